"""Qwen3-VL / Qwen2.5-VL: the vision encoder feeding the text decoder, with M-RoPE and DeepStack.

Params are {"vision": ..., "text": ...}; "text" is exactly the text decoder's param tree, run by the same
`decoder.hidden_states` (scan over layers, remat, KV cache) through its three vision-language hooks:
image features replace the embeddings of the `<|image_pad|>` placeholders, rotary angles come from the
three M-RoPE position axes, and (Qwen3-VL) DeepStack features are added after the first decoder layers.

Two steps, like transformers' processor + model: `prepare_inputs` (host, numpy) turns what the processor
returns (input_ids, attention_mask, pixel_values, image_grid_thw) into fixed-shape arrays: M-RoPE
positions, the patch layout, where each merged image token goes. `forward` (pure, jittable) computes
logits from them. `VLModel` is the NNX face doing both.

Decoding with a KV cache: prefill with `forward(..., cache=...)` (the cache is indexed by `positions`, the
count of real tokens before each one), then each new token at cache index p has M-RoPE
position p + rope_delta on all three axes (`decode_inputs`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxwebrl.models import decoder
from jaxwebrl.models.decoder import KVCache, ParamSpec
from jaxwebrl.models.mrope import axis_of_frequency, mrope_angles, rope_index
from jaxwebrl.models.rope import inverse_frequencies
from jaxwebrl.models.vision import encode, param_specs as vision_param_specs, patch_layout
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.sharding import constrain

Params = dict[str, Any]
Inputs = dict[str, Any]


def _is_spec(x: Any) -> bool:
    return isinstance(x, ParamSpec)


def param_specs(cfg: VLConfig) -> dict[str, Any]:
    return {"vision": vision_param_specs(cfg.vision), "text": decoder.param_specs(cfg.text)}


def logical_axes(cfg: VLConfig) -> dict[str, Any]:
    """Logical axis names of every parameter (names from jaxwebrl.sharding.RULES), nested like the params."""
    return jax.tree.map(lambda s: s.axes, param_specs(cfg), is_leaf=_is_spec)


def abstract_params(cfg: VLConfig) -> dict[str, Any]:
    dtype = jnp.dtype(cfg.param_dtype)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, dtype), param_specs(cfg), is_leaf=_is_spec)


@functools.partial(jax.jit, static_argnums=(0, 2))
def init_params(cfg: VLConfig, key: jax.Array, std: float = 0.02) -> Params:
    """Random params (normal(0, std) matrices, unit norms, zero biases) in cfg.param_dtype (one compiled
    program, not one per parameter shape)."""
    flat, treedef = jax.tree.flatten(param_specs(cfg), is_leaf=_is_spec)
    keys = jax.random.split(key, len(flat))
    dtype = jnp.dtype(cfg.param_dtype)

    def make(spec: ParamSpec, k: jax.Array) -> jax.Array:
        if spec.init in ("ones", "zeros"):
            return (jnp.ones if spec.init == "ones" else jnp.zeros)(spec.shape, dtype)
        return (std * jax.random.normal(k, spec.shape, jnp.float32)).astype(dtype)

    return jax.tree.unflatten(treedef, [make(s, k) for s, k in zip(flat, keys)])


# ---- host: processor outputs -> fixed-shape model inputs ------------------------------------------

def _np(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    if hasattr(x, "detach"):  # torch tensors from a transformers processor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def prepare_inputs(
    cfg: VLConfig,
    input_ids: Any,
    attention_mask: Any = None,
    pixel_values: Any = None,
    image_grid_thw: Any = None,
    mm_token_type_ids: Any = None,
    num_patches: int | None = None,
) -> Inputs:
    """Model inputs from the processor's outputs (numpy or torch). `num_patches` pads the patch rows to a
    bucket so one compiled program serves many image sizes (padding patches join no image).

    Returns tokens, segment_ids (the attention mask), positions (the KV-cache slot: index among real
    tokens, padding after them), mrope_positions int32[3, B, T], rope_deltas int32[B], and `vision` (None without images):
    pixel_values, the patch layout (see `vision.patch_layout`) and `scatter_to` int32[N / merge^2], the
    flat b * T + t index of each merged image token (B * T, dropped, for padding)."""
    ids = _np(input_ids).astype(np.int64)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, length], got shape {ids.shape}")
    B, T = ids.shape
    mask = np.ones_like(ids) if attention_mask is None else _np(attention_mask).astype(np.int64)
    is_image = (ids == cfg.image_token_id) & (mask != 0)
    if (ids == cfg.video_token_id).any():
        raise ValueError(f"input_ids contain video tokens (id {cfg.video_token_id}); only images are supported")
    if mm_token_type_ids is not None:
        mm = _np(mm_token_type_ids)
        if ((mm == 1) & (mask != 0)).astype(bool).tolist() != is_image.tolist():
            raise ValueError("mm_token_type_ids disagree with the image tokens in input_ids "
                             f"(image_token_id={cfg.image_token_id}); pass the processor's own outputs")
    grid = _np(image_grid_thw)
    if is_image.any() and (grid is None or pixel_values is None):
        raise ValueError("input_ids contain image tokens but pixel_values / image_grid_thw are missing")
    if is_image.any():
        grid = grid.reshape(-1, 3)
        n_real = int(np.prod(grid, axis=-1).sum())
        n_tokens = n_real // cfg.vision.merge_unit
        if int(is_image.sum()) != n_tokens:
            raise ValueError(f"input_ids hold {int(is_image.sum())} image tokens but the images give {n_tokens} "
                             "merged patches; expand the placeholders with the checkpoint's processor")
    mrope, deltas = rope_index(ids, mask, grid if is_image.any() else None, cfg.image_token_id,
                               cfg.vision.spatial_merge_size)
    # Cache slots: real tokens 0..n-1 in order, padding after them (n, n+1, ...), so a prefill with either
    # padding side never overwrites a real token's keys; decoding later overwrites the padding's.
    real = mask != 0
    positions = np.where(real, np.cumsum(real, axis=-1) - 1, real.sum(-1, keepdims=True) + np.cumsum(~real, axis=-1) - 1)
    out: Inputs = {
        "tokens": ids.astype(np.int32), "segment_ids": mask.astype(np.int32),
        "positions": positions.astype(np.int32), "mrope_positions": mrope, "rope_deltas": deltas, "vision": None,
    }
    if not is_image.any():
        return out
    pixels = _np(pixel_values).astype(np.float32)
    if pixels.shape != (n_real, cfg.vision.patch_dim):
        raise ValueError(f"pixel_values has shape {list(pixels.shape)}, expected [{n_real}, {cfg.vision.patch_dim}] "
                         "for image_grid_thw and the vision config")
    layout = patch_layout(cfg.vision, grid, num_patches)
    total = layout["segment"].shape[0]
    scatter_to = np.full(total // cfg.vision.merge_unit, B * T, np.int32)
    scatter_to[:n_tokens] = np.flatnonzero(is_image.reshape(-1))
    out["vision"] = dict(layout, pixel_values=np.pad(pixels, ((0, total - n_real), (0, 0))), scatter_to=scatter_to)
    return out


def decode_inputs(tokens: Any, positions: Any, rope_deltas: Any) -> Inputs:
    """Inputs for text tokens [B, S] at cache indexes `positions` [B, S] after a prefill with rope_deltas [B]."""
    tokens, positions = jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32)
    mrope = positions + jnp.asarray(rope_deltas, jnp.int32)[:, None]
    return {"tokens": tokens, "positions": positions, "segment_ids": None,
            "mrope_positions": jnp.broadcast_to(mrope, (3,) + mrope.shape), "vision": None}


# ---- device: the model ---------------------------------------------------------------------------

def embed_inputs(cfg: VLConfig, params: Params, inputs: Inputs) -> tuple[jax.Array, jax.Array | None]:
    """Token embeddings with the image features scattered in, and the DeepStack residuals [n, B, T, D].

    Two layouts of `vision`: flat (`prepare_inputs`: all patches of the batch in one sequence, `scatter_to`
    a flat b * T + t index) or per row (`data.vl_batch`: pixel_values [B, P, patch_dim], each row's own
    patches, `scatter_to` [B, P / merge^2] the token index t in that row). Per row, the encoder runs row by
    row (vmap), so its work and memory split over the devices the rows are sharded on."""
    dt = jnp.dtype(cfg.dtype)
    tokens = inputs["tokens"]
    B, T = tokens.shape
    x = jnp.take(params["text"]["embed"], tokens, axis=0).astype(dt)
    vis = inputs.get("vision")
    if vis is None:
        return x, None

    def run(v: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array | None]:
        return encode(cfg.vision, params["vision"], v["pixel_values"], v, cfg.dtype, cfg.text.remat,
                      cfg.text.scan_layers)

    n = min(len(cfg.vision.deepstack_visual_indexes), cfg.text.num_layers)  # transformers ignores taps past the last layer
    if vis["pixel_values"].ndim == 3:  # per row
        vis = {k: constrain(a, ("activation_batch",) + (None,) * (a.ndim - 1)) for k, a in vis.items()}
        merged, deepstack = jax.vmap(run)(vis)  # [B, M, D], [B, taps, M, D]
        dest = vis["scatter_to"]
        x = jax.vmap(lambda row, d, m: row.at[d].set(m.astype(dt), mode="drop"))(x, dest, merged)
        if deepstack is None or n == 0:
            return x, None
        residuals = jax.vmap(lambda d, f: jnp.zeros((n, T, x.shape[-1]), dt).at[:, d].set(f[:n].astype(dt), mode="drop"))(
            dest, deepstack)
        return x, residuals.swapaxes(0, 1)
    merged, deepstack = run(vis)
    dest = vis["scatter_to"]
    x = x.reshape(B * T, -1).at[dest].set(merged.astype(dt), mode="drop").reshape(B, T, -1)
    residuals = None
    if deepstack is not None and n:
        residuals = jnp.zeros((n, B * T, x.shape[-1]), dt).at[:, dest].set(deepstack[:n].astype(dt), mode="drop")
        residuals = residuals.reshape(n, B, T, -1)
    return x, residuals


def hidden_states(
    cfg: VLConfig, params: Params, inputs: Inputs, cache: KVCache | None = None, attend_len: int | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """Final normed hidden states [B, T, D] of the text decoder (and the updated cache)."""
    x, residuals = embed_inputs(cfg, params, inputs)
    axis_map = axis_of_frequency(cfg.mrope_section, cfg.mrope_interleaved)
    angles = mrope_angles(inputs["mrope_positions"], inverse_frequencies(cfg.text), axis_map)
    return decoder.hidden_states(
        cfg.text, params["text"], inputs["tokens"], inputs["positions"], inputs.get("segment_ids"), cache,
        attend_len, embeds=x, rope_angles=angles, layer_residuals=residuals)


def forward(
    cfg: VLConfig, params: Params, inputs: Inputs, cache: KVCache | None = None, attend_len: int | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """Logits float32[B, T, V] for `prepare_inputs` / `decode_inputs` arrays."""
    h, new_cache = hidden_states(cfg, params, inputs, cache, attend_len)
    head = decoder.lm_head(cfg.text, params["text"]).astype(h.dtype)
    logits = jnp.einsum("btd,dv->btv", h, head, preferred_element_type=jnp.float32)
    return constrain(logits, ("activation_batch", "activation_length", "activation_vocab")), new_cache


# One compiled program per (config, input shapes): jit with the config static.
forward_jit = jax.jit(forward, static_argnums=(0,), static_argnames=("attend_len",))


def init_cache(cfg: VLConfig, batch: int, max_len: int, dtype: str | None = None) -> KVCache:
    return decoder.init_cache(cfg.text, batch, max_len, dtype)


class VLModel(nnx.Module):
    """NNX module holding the params as `nnx.Param`s annotated with `logical_axes`; called like the
    transformers model (input_ids, attention_mask, pixel_values, image_grid_thw) it returns logits."""

    def __init__(self, cfg: VLConfig, *, rngs: nnx.Rngs, params: Params | None = None):
        self.cfg = cfg
        values = params if params is not None else init_params(cfg, rngs.params())
        self.params = nnx.data(jax.tree.map(lambda v, a: nnx.Param(v, logical_axes=a), values, logical_axes(cfg),
                                            is_leaf=lambda x: isinstance(x, tuple)))

    def param_dict(self) -> Params:
        return jax.tree.map(lambda p: p[...], self.params, is_leaf=lambda x: isinstance(x, nnx.Variable))

    def __call__(self, input_ids: Any, attention_mask: Any = None, pixel_values: Any = None,
                 image_grid_thw: Any = None, mm_token_type_ids: Any = None) -> jax.Array:
        inputs = prepare_inputs(self.cfg, input_ids, attention_mask, pixel_values, image_grid_thw, mm_token_type_ids)
        return forward_jit(self.cfg, self.param_dict(), inputs)[0]
