"""ModelConfig: the one description of a decoder, read from and written to HuggingFace config.json.

Llama 3.x, Qwen2/2.5 and Qwen3 differ only in a few flags (q/k/v bias, q/k RMSNorm, explicit head_dim,
rope scaling), so one config with those flags covers the family and the model code has no per-family
branches beyond them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# HF `architectures` entry -> our family name. The one place that says what we support.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
_HF_NAME = {family: hf for hf, family in SUPPORTED_ARCHITECTURES.items()}
_MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


class UnsupportedModelError(ValueError):
    """Raised for a checkpoint whose architecture or options we do not implement."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a causal decoder. Field names follow HF where one exists."""

    architecture: str = "qwen3"  # llama | qwen2 | qwen3
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    rope_theta: float = 10000.0
    # Only `llama3` scaling is implemented; stored as a sorted tuple of items so the config stays hashable.
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v projections (Qwen2; Llama's attention_bias also sets o)
    o_bias: bool = False
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    max_position_embeddings: int = 4096
    bos_token_id: int | None = None
    eos_token_id: int | tuple[int, ...] | None = None
    pad_token_id: int | None = None
    # Numerics and compilation; not part of the HF config.
    dtype: str = "float32"  # compute dtype of activations
    param_dtype: str = "float32"
    remat: bool = False
    scan_layers: bool = True
    # Extra HF config fields we do not interpret, carried through export unchanged.
    hf_extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.architecture not in _HF_NAME:
            raise UnsupportedModelError(
                f"architecture {self.architecture!r} is not supported; use one of {sorted(_HF_NAME)}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.num_kv_heads} (GQA)"
            )
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in ("float32", "bfloat16", "float16"):
                raise ValueError(f"{name}={getattr(self, name)!r}: use 'float32', 'bfloat16' or 'float16'")

    @property
    def rope_scaling_dict(self) -> dict[str, Any] | None:
        return dict(self.rope_scaling) if self.rope_scaling else None

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return (self.eos_token_id,) if isinstance(self.eos_token_id, int) else tuple(self.eos_token_id)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count, used for FLOP and memory estimates."""
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        attn = d * hd * (self.num_heads * 2 + self.num_kv_heads * 2)
        if self.attention_bias:
            attn += hd * (self.num_heads + 2 * self.num_kv_heads)
        per_layer = attn + 3 * d * f + 2 * d + (2 * hd if self.qk_norm else 0)
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * per_layer + embed + d

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward), with the attention term."""
        non_embed = self.num_params() - self.vocab_size * self.hidden_size * (
            1 if self.tie_word_embeddings else 2
        )
        matmul = 2 * (non_embed + self.vocab_size * self.hidden_size)
        attention = 2 * 2 * self.num_layers * self.num_heads * self.head_dim * seq_len
        return 3.0 * (matmul + attention)

    # ---- HuggingFace config.json ------------------------------------------------------------------

    @classmethod
    def from_hf(cls, hf: dict[str, Any], **overrides: Any) -> "ModelConfig":
        """Build from a HF config dict; raise a clear error for what we do not implement."""
        archs = hf.get("architectures") or []
        family = next((SUPPORTED_ARCHITECTURES[a] for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if family is None:
            raise UnsupportedModelError(
                f"architectures={archs} is not supported; supported: {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        scaling = hf.get("rope_scaling") or (hf.get("rope_parameters") if "rope_parameters" in hf else None)
        if scaling:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind in (None, "default"):
                scaling = None
            elif kind != "llama3":
                raise UnsupportedModelError(f"rope_scaling type {kind!r} is not supported; supported: 'llama3'")
        if hf.get("mlp_bias"):
            raise UnsupportedModelError("mlp_bias=true is not supported (no released Llama/Qwen uses it)")
        if hf.get("use_sliding_window"):
            raise UnsupportedModelError("use_sliding_window=true is not supported; set it to false")
        heads = hf["num_attention_heads"]
        bias = bool(hf.get("attention_bias", family == "qwen2"))
        rope_theta = hf.get("rope_theta")
        if rope_theta is None and isinstance(hf.get("rope_parameters"), dict):
            rope_theta = hf["rope_parameters"].get("rope_theta")
        known = {
            "architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta",
            "rope_scaling", "rope_parameters", "rms_norm_eps", "tie_word_embeddings", "attention_bias",
            "max_position_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
            "mlp_bias", "use_sliding_window", "transformers_version",
        }
        eos = hf.get("eos_token_id")
        kwargs: dict[str, Any] = dict(
            architecture=family,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            rope_theta=float(rope_theta or 10000.0),
            rope_scaling=tuple(sorted(scaling.items())) if scaling else None,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            attention_bias=bias,
            o_bias=bias if family == "llama" else False,
            qk_norm=family == "qwen3",
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=hf.get("pad_token_id"),
            hf_extra=tuple(sorted((k, v) for k, v in hf.items() if k not in known and _hashable(v))),
        )
        kwargs.update(overrides)
        return cls(**kwargs)

    def to_hf(self) -> dict[str, Any]:
        """The config.json that `transformers` and SGLang read for this model."""
        out: dict[str, Any] = dict(self.hf_extra)
        out.update(
            architectures=[_HF_NAME[self.architecture]],
            model_type=_MODEL_TYPE[self.architecture],
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            rope_theta=self.rope_theta,
            rope_scaling=self.rope_scaling_dict,
            rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tie_word_embeddings,
            attention_bias=self.attention_bias,
            max_position_embeddings=self.max_position_embeddings,
            hidden_act="silu",
            torch_dtype=self.param_dtype,
        )
        if self.architecture == "qwen2":
            out["use_sliding_window"] = False
        for key in ("bos_token_id", "pad_token_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.eos_token_id is not None:
            eos = self.eos_token_id
            out["eos_token_id"] = list(eos) if isinstance(eos, tuple) else eos
        return out


def _hashable(value: Any) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False
