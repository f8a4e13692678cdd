"""ModelConfig: the one description of a decoder, read from and written to HuggingFace config.json.

Llama 3.x, Qwen2/2.5 and Qwen3 differ only in a few flags (q/k/v bias, q/k RMSNorm, explicit head_dim,
rope scaling), so one config with those flags covers the family and the model code has no per-family
branches beyond them.

A checkpoint either loads as exactly the model transformers builds from its config.json or is refused:
every HF config field that changes the computation is either implemented (IMPLEMENTED_FIELDS) or accepted
only at the values we implement (REFUSED_FIELDS, SUPPORTED_ROPE_TYPES, the activations of
`models.activations`); the rest is listed, with the reason, in NON_COMPUTATIONAL_FIELDS.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

# HF `architectures` entry -> our family name. The one place that says what we support.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
_HF_NAME = {family: hf for hf, family in SUPPORTED_ARCHITECTURES.items()}
_MODEL_TYPE = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
_CONFIG_CLASS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}

# RoPE scalings we implement (jaxwebrl.models.rope), each with the parameter keys it reads. Any other type
# (dynamic, longrope, ...) or key (mrope_section, ...) is refused.
SUPPORTED_ROPE_TYPES: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "llama3": frozenset({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
    "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
                       "mscale", "mscale_all_dim", "truncate"}),
}
_ROPE_REQUIRED = {"linear": {"factor"}, "llama3": SUPPORTED_ROPE_TYPES["llama3"], "yarn": {"original_max_position_embeddings"}}

# ---- which HF config fields change the computation, and what we do with each ------------------------
# tests/test_models_hf.py walks LlamaConfig, Qwen2Config and Qwen3Config and fails on a field in none of these.

# Read by `ModelConfig.from_hf` and implemented (the model computes what transformers computes for any value).
IMPLEMENTED_FIELDS = frozenset({
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "tie_word_embeddings",
    "attention_bias",  # llama, qwen3: bias on q, k, v and o; qwen2 always has q/k/v bias (transformers ignores it)
    "rope_parameters", "rope_scaling", "rope_theta",  # one dict in transformers 5; types in SUPPORTED_ROPE_TYPES
    "max_position_embeddings",  # yarn's default factor / original length
})


def _off(value: Any) -> bool:
    return value is None or value is False or value == 0


def _full_attention(value: Any) -> bool:
    return value is None or all(t == "full_attention" for t in value)


# Fields that change the computation, accepted only at the value(s) we implement: (check, what is supported).
REFUSED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "mlp_bias": (_off, "false (bias on gate/up/down projections is not implemented)"),
    "attention_dropout": (_off, "0.0 (attention dropout is not implemented)"),
    "partial_rotary_factor": (lambda v: v is None or v == 1, "1.0 (rotary embedding over the whole head_dim)"),
    # Qwen2/3 derive layer_types from use_sliding_window, sliding_window and max_window_layers.
    "layer_types": (_full_attention, "every layer 'full_attention' (sliding-window attention is not "
                                     "implemented; set use_sliding_window=false)"),
    # Not fields of our families, but a config.json that sets them describes a different model (a Gemma,
    # Granite, OLMo or quantized checkpoint relabelled): refuse instead of silently ignoring them.
    "attn_logit_softcapping": (_off, "null (attention logit soft-capping is not implemented)"),
    "final_logit_softcapping": (_off, "null (final logit soft-capping is not implemented)"),
    "query_pre_attn_scalar": (_off, "null (attention scale is head_dim ** -0.5)"),
    "logits_scaling": (lambda v: v is None or v == 1, "1.0"),
    "embedding_multiplier": (lambda v: v is None or v == 1, "1.0"),
    "residual_multiplier": (lambda v: v is None or v == 1, "1.0"),
    "attention_multiplier": (_off, "null (attention scale is head_dim ** -0.5)"),
    "clip_qkv": (_off, "null"),
    "use_qk_norm": (_off, "false (q/k norm comes with the Qwen3 family only)"),
    "attention_chunk_size": (_off, "null (chunked attention is not implemented)"),
    "no_rope_layers": (_off, "null (every layer uses RoPE)"),
    "quantization_config": (_off, "absent (quantized checkpoints are not implemented; use a bf16/fp32 one)"),
}

# Fields judged not to change the computation of these families' forward pass.
NON_COMPUTATIONAL_FIELDS = frozenset({
    # token ids: used by tokenization / generation, not by the forward pass
    "bos_token_id", "eos_token_id", "pad_token_id",
    # output and caching switches of the transformers API
    "use_cache", "output_hidden_states", "output_attentions", "return_dict",
    # task-head labels and bookkeeping
    "id2label", "label2id", "problem_type", "architectures", "model_type", "transformers_version",
    "name_or_path", "is_encoder_decoder",
    # storage dtype of the checkpoint; the compute dtype is ModelConfig.dtype / param_dtype
    "dtype", "torch_dtype",
    # initialisation of new weights only
    "initializer_range",
    # transformers 5 no longer reads it (it split the same matmuls into slices: the same math)
    "pretraining_tp",
    # feed-forward chunking: not read by these models, and chunking is the same math
    "chunk_size_feed_forward",
    # only act through layer_types (checked above)
    "use_sliding_window", "sliding_window", "max_window_layers",
})


class CheckpointError(ValueError):
    """A checkpoint we cannot load as exactly the model it describes (bad tensors, or config fields whose
    values we do not implement). The message names the tensor, file or field and the fix."""


class UnsupportedModelError(CheckpointError):
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
    # RoPE scaling parameters (rope_type and the keys SUPPORTED_ROPE_TYPES lists; None = default RoPE),
    # stored as a sorted tuple of items so the config stays hashable.
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    hidden_act: str = "silu"  # MLP activation, a key of jaxwebrl.models.activations.ACTIVATIONS
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v projections (Qwen2; Llama's and Qwen3's also set o_bias)
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
    attention: str = "xla"  # cache-free attention backend: xla | splash (TPU Pallas) | cudnn (models.attention)
    attention_block: int = 512  # splash: query/key block (a multiple of 128 dividing the sequence length)
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
        from jaxwebrl.models.activations import ACTIVATIONS

        if self.hidden_act not in ACTIVATIONS:
            raise UnsupportedModelError(
                f"hidden_act={self.hidden_act!r} is not implemented; supported: {sorted(ACTIVATIONS)}"
            )
        _check_rope(self.rope_scaling_dict)
        from jaxwebrl.models.attention import ATTENTION_BACKENDS, LANE

        if self.attention not in ATTENTION_BACKENDS:
            raise ValueError(f"attention={self.attention!r}: use one of {ATTENTION_BACKENDS}")
        if self.attention_block < LANE or self.attention_block % LANE:
            raise ValueError(f"attention_block={self.attention_block}: use a positive multiple of {LANE}")

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
        per_layer = attn + 3 * d * f + 2 * d + (2 * hd if self.qk_norm else 0) + (d if self.o_bias else 0)
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
        """Build from a HF config dict, read through the transformers config class of its family (so every
        default is the one transformers uses). Raise a CheckpointError naming the field, its value and
        what is supported for anything that would make the model compute something else."""
        archs = hf.get("architectures") or []
        family = next((SUPPORTED_ARCHITECTURES[a] for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if family is None:
            raise UnsupportedModelError(
                f"architectures={archs} is not supported; supported: {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        import transformers

        config_class = getattr(transformers, _CONFIG_CLASS[family])
        try:
            parsed = config_class.from_dict(copy.deepcopy(hf))
        except Exception as e:  # transformers' own validation (e.g. hidden_size not divisible by heads)
            raise CheckpointError(f"config.json does not parse as transformers.{config_class.__name__}: {e}") from e
        fields = {k: v for k, v in vars(parsed).items() if not k.startswith("_")}
        for name, (ok, supported) in REFUSED_FIELDS.items():
            if name in fields and not ok(fields[name]):
                raise UnsupportedModelError(
                    f"config.json field {name}={fields[name]!r} is not supported; supported: {supported}"
                )
        heads = parsed.num_attention_heads
        rope = dict(parsed.rope_parameters or {})
        if set(rope) & set(getattr(parsed, "layer_types", None) or ()):
            raise UnsupportedModelError(
                f"config.json field rope_parameters={rope!r} differs per layer type; supported: one RoPE for all layers"
            )
        rope_theta = float(rope.pop("rope_theta", None) or 10000.0)
        rope.pop("type", None)  # legacy alias of rope_type
        prf = rope.pop("partial_rotary_factor", None)
        if not REFUSED_FIELDS["partial_rotary_factor"][0](prf):
            raise UnsupportedModelError(
                f"config.json field partial_rotary_factor={prf!r} is not supported; supported: "
                f"{REFUSED_FIELDS['partial_rotary_factor'][1]}"
            )
        _check_rope(rope)
        if rope.get("rope_type", "default") == "default":
            rope = {}
        bias = True if family == "qwen2" else bool(parsed.attention_bias)
        eos = parsed.eos_token_id
        kwargs: dict[str, Any] = dict(
            architecture=family,
            vocab_size=parsed.vocab_size,
            hidden_size=parsed.hidden_size,
            intermediate_size=parsed.intermediate_size,
            num_layers=parsed.num_hidden_layers,
            num_heads=heads,
            num_kv_heads=parsed.num_key_value_heads or heads,
            head_dim=getattr(parsed, "head_dim", None) or parsed.hidden_size // heads,
            rope_theta=rope_theta,
            rope_scaling=tuple(sorted(rope.items())) if rope else None,
            hidden_act=parsed.hidden_act,
            rms_norm_eps=float(parsed.rms_norm_eps),
            tie_word_embeddings=bool(parsed.tie_word_embeddings),
            attention_bias=bias,
            o_bias=bias if family in ("llama", "qwen3") else False,
            qk_norm=family == "qwen3",
            max_position_embeddings=parsed.max_position_embeddings,
            bos_token_id=parsed.bos_token_id,
            eos_token_id=tuple(eos) if isinstance(eos, list) else eos,
            pad_token_id=parsed.pad_token_id,
            hf_extra=tuple(sorted((k, v) for k, v in hf.items() if k not in _READ and _hashable(v))),
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
            hidden_act=self.hidden_act,
            torch_dtype=self.param_dtype,
        )
        if self.architecture in ("qwen2", "qwen3"):
            out["use_sliding_window"] = False
        for key in ("bos_token_id", "pad_token_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.eos_token_id is not None:
            eos = self.eos_token_id
            out["eos_token_id"] = list(eos) if isinstance(eos, tuple) else eos
        return out


# Fields from_hf reads itself (or rewrites on export); the rest of config.json is carried through as hf_extra.
_READ = (IMPLEMENTED_FIELDS | set(REFUSED_FIELDS) | {
    "architectures", "model_type", "bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype", "dtype",
    "transformers_version", "use_sliding_window", "sliding_window", "max_window_layers",
})


def _check_rope(params: dict[str, Any] | None) -> None:
    """Refuse a RoPE scaling we do not implement, naming the type or key and what is supported."""
    if not params:
        return
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in SUPPORTED_ROPE_TYPES:
        raise UnsupportedModelError(
            f"config.json field rope_parameters.rope_type={kind!r} is not supported; supported: "
            f"{sorted(SUPPORTED_ROPE_TYPES)}"
        )
    unknown = sorted(set(params) - SUPPORTED_ROPE_TYPES[kind] - {"rope_type", "type", "rope_theta"})
    if unknown:
        raise UnsupportedModelError(
            f"config.json field rope_parameters.{unknown[0]}={params[unknown[0]]!r} is not supported for "
            f"rope_type={kind!r}; supported keys: {sorted(SUPPORTED_ROPE_TYPES[kind])}"
        )
    missing = sorted(_ROPE_REQUIRED.get(kind, set()) - set(params))
    if missing:
        raise UnsupportedModelError(f"rope_parameters for rope_type={kind!r} lacks {missing}")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
        return True
    except TypeError:
        return False
