"""Rotary position embeddings in the HuggingFace (rotate-half) convention, with the frequency scalings of
`transformers.modeling_rope_utils` we implement: default, linear, llama3 and yarn.

The inverse-frequency table is computed exactly as transformers computes it: the same float32 operations in
the same order (numpy float32 arithmetic rounds like PyTorch's CPU kernels). An error of one ulp in a
frequency is an angle error that grows linearly with position (0.075 in the logits at position 100k when
the table was computed in float64 and cast). The one operation whose rounding is implementation-defined is
the float32 power `theta ** (2i / d)`: PyTorch rounds it with its own vectorised kernel (Sleef on x86, the C
library for the tail of a vector), so it is taken from PyTorch when torch is importable, which makes the
table bit-equal to the one transformers builds on the same machine. Without torch, the power is correctly
rounded (float64 power, one rounding), which differs from PyTorch's in about 1% of entries by one ulp.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxwebrl.models.config import ModelConfig

ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # the same list as config.SUPPORTED_ROPE_TYPES
F32 = np.float32


def _float32_pow(base: float, exponents: np.ndarray) -> np.ndarray:
    """float32(base) ** exponents in float32, rounded as PyTorch's CPU pow rounds it when available."""
    try:
        import torch
    except ImportError:  # correctly rounded: within one ulp of PyTorch's kernel
        return (np.float64(F32(base)) ** exponents.astype(np.float64)).astype(F32)
    return (base ** torch.from_numpy(np.ascontiguousarray(exponents, F32))).numpy().astype(F32)


def _base_powers(theta: float, dim: int) -> np.ndarray:
    """theta ** (arange(0, dim, 2) / dim), as transformers' `base ** (arange(...).float() / dim)`."""
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(F32) / F32(dim)
    return _float32_pow(theta, exponents)


def _llama3(inv_freq: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """transformers' `_compute_llama3_parameters`, op for op in float32."""
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old_context_len = p["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = F32(old_context_len / low), F32(old_context_len / high)
    # `scalar / tensor` in PyTorch is `tensor.reciprocal() * scalar` (Tensor.__rtruediv__): two roundings.
    wavelen = (F32(1) / inv_freq) * F32(2 * math.pi)
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / F32(factor), inv_freq)
    smooth = ((F32(1) / wavelen) * F32(old_context_len) - F32(low)) / F32(high - low)
    smoothed = (F32(1) - smooth) * inv_freq_llama / F32(factor) + smooth * inv_freq_llama
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, inv_freq_llama)


def _yarn_attention_factor(p: dict[str, Any], factor: float) -> float:
    def get_mscale(scale: float, mscale: float = 1) -> float:
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if p.get("attention_factor") is not None:
        return float(p["attention_factor"])
    if p.get("mscale") and p.get("mscale_all_dim"):
        return float(get_mscale(factor, p["mscale"]) / get_mscale(factor, p["mscale_all_dim"]))
    return get_mscale(factor)


def _yarn_factor(cfg: ModelConfig, p: dict[str, Any]) -> float:
    factor = p.get("factor")
    return cfg.max_position_embeddings / p["original_max_position_embeddings"] if factor is None else factor


def _yarn(cfg: ModelConfig, p: dict[str, Any]) -> np.ndarray:
    """transformers' `_compute_yarn_parameters` (inverse frequencies), op for op in float32."""
    dim, base = cfg.head_dim, cfg.rope_theta
    factor = _yarn_factor(cfg, p)
    beta_fast, beta_slow = p.get("beta_fast") or 32, p.get("beta_slow") or 1
    original = p["original_max_position_embeddings"]

    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(original / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers: "Prevent singularity"
    ramp = np.clip((np.arange(dim // 2, dtype=F32) - F32(low)) / F32(high - low), F32(0), F32(1))
    extrapolation_factor = F32(1) - ramp
    pos_freqs = _base_powers(base, dim)
    extrapolation = F32(1) / pos_freqs
    interpolation = F32(1) / (F32(factor) * pos_freqs)
    return interpolation * (F32(1) - extrapolation_factor) + extrapolation * extrapolation_factor


@functools.lru_cache(maxsize=64)
def _table(cfg: ModelConfig) -> np.ndarray:
    p = cfg.rope_scaling_dict or {}
    kind = p.get("rope_type", p.get("type", "default"))
    if kind == "yarn":
        inv_freq = _yarn(cfg, p)
    else:
        inv_freq = F32(1) / _base_powers(cfg.rope_theta, cfg.head_dim)
        if kind == "linear":
            inv_freq = inv_freq / F32(p["factor"])
        elif kind == "llama3":
            inv_freq = _llama3(inv_freq, p)
        elif kind != "default":
            raise ValueError(f"rope_type {kind!r} is not implemented; supported: {ROPE_TYPES}")
    out = np.asarray(inv_freq, F32)
    out.setflags(write=False)
    return out


def inverse_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Per-pair inverse frequencies, float32[head_dim // 2], computed once per config on the host."""
    return _table(cfg)


def attention_scaling(cfg: ModelConfig) -> float:
    """The factor transformers multiplies cos and sin by (yarn's attention factor; 1.0 for the others)."""
    p = cfg.rope_scaling_dict or {}
    if p.get("rope_type", p.get("type")) != "yarn":
        return 1.0
    return _yarn_attention_factor(p, _yarn_factor(cfg, p))


def apply_rope(x: jnp.ndarray, positions: jnp.ndarray, inv_freq: np.ndarray, scaling: float = 1.0) -> jnp.ndarray:
    """Rotate x[..., T, heads, head_dim] by angle positions[..., T] * inv_freq (math in float32); cos and sin
    are multiplied by `scaling` (see `attention_scaling`)."""
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, T, hd/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if scaling != 1.0:
        cos, sin = cos * jnp.float32(scaling), sin * jnp.float32(scaling)
    cos = jnp.concatenate([cos] * 2, axis=-1)[..., None, :]
    sin = jnp.concatenate([sin] * 2, axis=-1)[..., None, :]
    xf = x.astype(jnp.float32)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-xf[..., half:], xf[..., :half]], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)
