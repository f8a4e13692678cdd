"""VLConfig: a Qwen3-VL or Qwen2.5-VL model = vision encoder config + text decoder config + M-RoPE layout.

The text half is the ordinary `ModelConfig` (Qwen3-VL's decoder is a Qwen3 decoder, Qwen2.5-VL's a Qwen2
one), so the VL model runs the same decoder code; what differs lives in `VisionConfig` and in how the
rotary angles of the decoder are built from three position axes (temporal, height, width).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxwebrl.models.config import ModelConfig, UnsupportedModelError

# HF `architectures` entry -> our VL family name.
SUPPORTED_VL_ARCHITECTURES: dict[str, str] = {
    "Qwen3VLForConditionalGeneration": "qwen3_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
}
_HF_NAME = {family: hf for hf, family in SUPPORTED_VL_ARCHITECTURES.items()}
_TEXT_FAMILY = {"qwen3_vl": "qwen3", "qwen2_5_vl": "qwen2"}
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu", "silu", "quick_gelu")
_NUMERICS = ("dtype", "param_dtype", "remat", "scan_layers", "attention", "attention_block")


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _unhash(value: Any) -> Any:
    """Inverse of `_hashable` for JSON: tuples of (str, value) pairs become dicts, other tuples lists."""
    if isinstance(value, tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value):
            return {k: _unhash(v) for k, v in value}
        return [_unhash(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """The ViT of Qwen3-VL (LayerNorm, learned + rotary positions, DeepStack mergers) or Qwen2.5-VL
    (RMSNorm, gated MLP, window attention except in `fullatt_block_indexes`). Names follow HF."""

    family: str = "qwen3_vl"  # qwen3_vl | qwen2_5_vl
    depth: int = 2
    hidden_size: int = 32
    intermediate_size: int = 64
    num_heads: int = 2
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 64  # = the text hidden size
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10000.0
    # Qwen3-VL
    num_position_embeddings: int = 64  # a square grid of learned positions, bilinearly resampled per image
    deepstack_visual_indexes: tuple[int, ...] = ()
    # Qwen2.5-VL
    window_size: int = 112  # in pixels; windows are window_size // merge // patch merged tokens a side
    fullatt_block_indexes: tuple[int, ...] = ()
    tokens_per_second: int = 4
    hf_extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.family not in _TEXT_FAMILY:
            raise UnsupportedModelError(f"vision family {self.family!r}: use one of {sorted(_TEXT_FAMILY)}")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise ValueError(f"vision hidden_size={self.hidden_size} / num_heads={self.num_heads} must give a "
                             "head_dim divisible by 4 (2D rotary over height and width)")
        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedModelError(f"vision hidden_act={self.hidden_act!r}; supported: {ACTIVATIONS}")
        bad = [i for i in self.deepstack_visual_indexes + self.fullatt_block_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"vision block indexes {bad} are outside depth={self.depth}; check "
                             "deepstack_visual_indexes / fullatt_block_indexes")
        side = int(round(self.num_position_embeddings ** 0.5))
        if self.family == "qwen3_vl" and side * side != self.num_position_embeddings:
            raise ValueError(f"num_position_embeddings={self.num_position_embeddings} must be a perfect square")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        """Length of one row of `pixel_values`: channels x temporal_patch x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size

    @property
    def merge_unit(self) -> int:
        return self.spatial_merge_size ** 2

    @property
    def window_merged(self) -> int:
        """Qwen2.5-VL window side in merged tokens."""
        return self.window_size // self.spatial_merge_size // self.patch_size


@dataclasses.dataclass(frozen=True)
class VLConfig:
    """A vision-language model: `text` (the decoder, with its numerics: dtype, param_dtype, remat,
    scan_layers, which the vision encoder follows too), `vision`, and the M-RoPE layout."""

    architecture: str = "qwen3_vl"  # qwen3_vl | qwen2_5_vl
    text: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    vision: VisionConfig = dataclasses.field(default_factory=VisionConfig)
    mrope_section: tuple[int, int, int] = (4, 2, 2)  # frequencies per axis (T, H, W); sums to head_dim / 2
    image_token_id: int = 6
    video_token_id: int = 7
    vision_start_token_id: int = 3
    vision_end_token_id: int = 4
    hf_extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in _TEXT_FAMILY:
            raise UnsupportedModelError(f"architecture {self.architecture!r}: use one of {sorted(_TEXT_FAMILY)}")
        if self.text.architecture != _TEXT_FAMILY[self.architecture] or self.vision.family != self.architecture:
            raise ValueError(f"{self.architecture}: text architecture must be {_TEXT_FAMILY[self.architecture]!r} "
                             f"(got {self.text.architecture!r}) and vision family {self.architecture!r} "
                             f"(got {self.vision.family!r})")
        if sum(self.mrope_section) != self.text.head_dim // 2:
            raise ValueError(f"mrope_section={list(self.mrope_section)} must sum to head_dim/2 = "
                             f"{self.text.head_dim // 2}")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ValueError(f"vision out_hidden_size={self.vision.out_hidden_size} must equal the text "
                             f"hidden_size={self.text.hidden_size}")

    @property
    def mrope_interleaved(self) -> bool:
        """Qwen3-VL interleaves the axes over frequencies (T,H,W,T,H,W,...); Qwen2.5-VL uses sections.
        (transformers ignores the `mrope_interleaved` flag: the family decides.)"""
        return self.architecture == "qwen3_vl"

    @property
    def dtype(self) -> str:
        return self.text.dtype

    @property
    def param_dtype(self) -> str:
        return self.text.param_dtype

    # The text decoder's attention settings and size, read by the attention checks, the dry run and MFU.
    attention = property(lambda self: self.text.attention)
    attention_block = property(lambda self: self.text.attention_block)
    num_heads = property(lambda self: self.text.num_heads)
    num_kv_heads = property(lambda self: self.text.num_kv_heads)
    num_layers = property(lambda self: self.text.num_layers)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per text token of the decoder (image patches add the encoder's, not counted)."""
        return self.text.flops_per_token(seq_len)

    def replace(self, **changes: Any) -> "VLConfig":
        """Numerics (dtype, param_dtype, remat, scan_layers, attention, attention_block) go to the text
        config; other keys to this one."""
        numerics = {k: changes.pop(k) for k in _NUMERICS if k in changes}
        if numerics:
            changes["text"] = changes.get("text", self.text).replace(**numerics)
        return dataclasses.replace(self, **changes)

    # ---- HuggingFace config.json ------------------------------------------------------------------

    @classmethod
    def from_hf(cls, hf: dict[str, Any], **overrides: Any) -> "VLConfig":
        archs = hf.get("architectures") or []
        family = next((SUPPORTED_VL_ARCHITECTURES[a] for a in archs if a in SUPPORTED_VL_ARCHITECTURES), None)
        if family is None:
            raise UnsupportedModelError(
                f"architectures={archs} is not a supported VL model; supported: {sorted(SUPPORTED_VL_ARCHITECTURES)}")
        tc = dict(hf.get("text_config") or {})
        vc = dict(hf.get("vision_config") or {})
        if not tc or not vc:
            raise UnsupportedModelError(f"{family}: config.json needs text_config and vision_config sections")
        rope = dict(tc.get("rope_parameters") or tc.get("rope_scaling") or {})
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ("default", "mrope"):
            raise UnsupportedModelError(f"text rope_type {kind!r} is not supported for {family}; supported: default")
        if tc.get("use_sliding_window"):
            raise UnsupportedModelError("use_sliding_window=true is not supported; set it to false")
        if "mrope_section" not in rope:
            raise UnsupportedModelError(f"{family}: text_config.rope_parameters has no mrope_section")
        heads = tc["num_attention_heads"]
        eos = tc.get("eos_token_id", hf.get("eos_token_id"))
        text_known = {
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "rope_parameters", "rope_scaling", "rope_theta", "rms_norm_eps",
            "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "attention_bias",
            "dtype", "torch_dtype", "use_sliding_window", "model_type",
        }
        text = ModelConfig(
            architecture=_TEXT_FAMILY[family],
            vocab_size=tc["vocab_size"],
            hidden_size=tc["hidden_size"],
            intermediate_size=tc["intermediate_size"],
            num_layers=tc["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=tc.get("num_key_value_heads") or heads,
            head_dim=(tc.get("head_dim") if family == "qwen3_vl" else None) or tc["hidden_size"] // heads,
            rope_theta=float(rope.get("rope_theta", tc.get("rope_theta", 10000.0))),
            rms_norm_eps=float(tc.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", tc.get("tie_word_embeddings", False))),
            attention_bias=family == "qwen2_5_vl" or bool(tc.get("attention_bias", False)),
            o_bias=family == "qwen3_vl" and bool(tc.get("attention_bias", False)),
            qk_norm=family == "qwen3_vl",
            max_position_embeddings=tc.get("max_position_embeddings", 4096),
            bos_token_id=tc.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=tc.get("pad_token_id"),
            hf_extra=tuple(sorted((k, _hashable(v)) for k, v in tc.items() if k not in text_known)),
        )
        vrope = dict(vc.get("rope_parameters") or {})
        if vrope.get("rope_type", "axial") != "axial":
            raise UnsupportedModelError(f"vision rope_type {vrope.get('rope_type')!r}; supported: axial")
        vision_known = {
            "depth", "hidden_size", "intermediate_size", "num_heads", "in_channels", "patch_size",
            "temporal_patch_size", "spatial_merge_size", "out_hidden_size", "hidden_act", "rope_parameters",
            "num_position_embeddings", "deepstack_visual_indexes", "window_size", "fullatt_block_indexes",
            "tokens_per_second", "model_type",
        }
        defaults = {"qwen3_vl": dict(hidden_act="gelu_pytorch_tanh"), "qwen2_5_vl": dict(hidden_act="silu")}[family]
        vision = VisionConfig(
            family=family,
            depth=vc["depth"],
            hidden_size=vc["hidden_size"],
            intermediate_size=vc["intermediate_size"],
            num_heads=vc["num_heads"],
            in_channels=vc.get("in_channels", 3),
            patch_size=vc["patch_size"],
            temporal_patch_size=vc.get("temporal_patch_size", 2),
            spatial_merge_size=vc.get("spatial_merge_size", 2),
            out_hidden_size=vc["out_hidden_size"],
            hidden_act=vc.get("hidden_act", defaults["hidden_act"]),
            rope_theta=float(vrope.get("rope_theta", 10000.0)),
            num_position_embeddings=vc.get("num_position_embeddings", 64) if family == "qwen3_vl" else 64,
            deepstack_visual_indexes=tuple(vc.get("deepstack_visual_indexes", ())) if family == "qwen3_vl" else (),
            window_size=vc.get("window_size", 112),
            fullatt_block_indexes=tuple(vc.get("fullatt_block_indexes", ())) if family == "qwen2_5_vl" else (),
            tokens_per_second=vc.get("tokens_per_second", 4),
            hf_extra=tuple(sorted((k, _hashable(v)) for k, v in vc.items() if k not in vision_known)),
        )
        top_known = {"architectures", "model_type", "text_config", "vision_config", "image_token_id", "video_token_id",
                     "vision_start_token_id", "vision_end_token_id", "tie_word_embeddings", "dtype", "torch_dtype",
                     "transformers_version"}
        numerics = {k: overrides.pop(k) for k in _NUMERICS if k in overrides}
        cfg = cls(
            architecture=family, text=text.replace(**numerics), vision=vision,
            mrope_section=tuple(int(s) for s in rope["mrope_section"]),  # type: ignore[arg-type]
            image_token_id=hf.get("image_token_id", 151655), video_token_id=hf.get("video_token_id", 151656),
            vision_start_token_id=hf.get("vision_start_token_id", 151652),
            vision_end_token_id=hf.get("vision_end_token_id", 151653),
            hf_extra=tuple(sorted((k, _hashable(v)) for k, v in hf.items() if k not in top_known)),
        )
        return dataclasses.replace(cfg, **overrides) if overrides else cfg

    def to_hf(self) -> dict[str, Any]:
        """The config.json `transformers` reads for this model."""
        t, v = self.text, self.vision
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": t.rope_theta, "mrope_section": list(self.mrope_section)}
        if self.architecture == "qwen3_vl":
            rope["mrope_interleaved"] = True
        text: dict[str, Any] = {k: _unhash(x) for k, x in t.hf_extra}
        text.update(
            model_type=f"{self.architecture}_text", vocab_size=t.vocab_size, hidden_size=t.hidden_size,
            intermediate_size=t.intermediate_size, num_hidden_layers=t.num_layers, num_attention_heads=t.num_heads,
            num_key_value_heads=t.num_kv_heads, rms_norm_eps=t.rms_norm_eps,
            max_position_embeddings=t.max_position_embeddings, rope_parameters=rope, hidden_act="silu",
            dtype=t.param_dtype,
        )
        if self.architecture == "qwen3_vl":
            text.update(head_dim=t.head_dim, attention_bias=t.o_bias)
        else:
            text["use_sliding_window"] = False
        for key in ("bos_token_id", "pad_token_id"):
            if getattr(t, key) is not None:
                text[key] = getattr(t, key)
        if t.eos_token_id is not None:
            text["eos_token_id"] = list(t.eos_token_id) if isinstance(t.eos_token_id, tuple) else t.eos_token_id
        vision: dict[str, Any] = {k: _unhash(x) for k, x in v.hf_extra}
        vision.update(
            model_type=f"{self.architecture}_vision", depth=v.depth, hidden_size=v.hidden_size,
            intermediate_size=v.intermediate_size, num_heads=v.num_heads, in_channels=v.in_channels,
            patch_size=v.patch_size, temporal_patch_size=v.temporal_patch_size,
            spatial_merge_size=v.spatial_merge_size, out_hidden_size=v.out_hidden_size, hidden_act=v.hidden_act,
            rope_parameters={"rope_type": "axial", "rope_theta": v.rope_theta},
        )
        if self.architecture == "qwen3_vl":
            vision.update(num_position_embeddings=v.num_position_embeddings,
                          deepstack_visual_indexes=list(v.deepstack_visual_indexes))
        else:
            vision.update(window_size=v.window_size, fullatt_block_indexes=list(v.fullatt_block_indexes),
                          tokens_per_second=v.tokens_per_second)
        out: dict[str, Any] = {k: _unhash(x) for k, x in self.hf_extra}
        out.update(
            architectures=[_HF_NAME[self.architecture]], model_type=self.architecture, text_config=text,
            vision_config=vision, image_token_id=self.image_token_id, video_token_id=self.video_token_id,
            vision_start_token_id=self.vision_start_token_id, vision_end_token_id=self.vision_end_token_id,
            tie_word_embeddings=t.tie_word_embeddings, dtype=t.param_dtype,
        )
        return out
