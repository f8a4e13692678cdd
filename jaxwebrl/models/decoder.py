"""The causal decoder of the Llama / Qwen2 / Qwen3 family, as an NNX module over a pure forward function.

Parameters are a nested dict of arrays with every layer stacked on a leading `layers` axis, so the same
params run with `jax.lax.scan` (compile time flat in depth) or unrolled, and map one-to-one onto
HuggingFace tensors. `forward` is a pure function so the trainer and the sampler jit exactly the same
math; `Decoder` is the NNX face of it (params as `nnx.Param` with their logical axis names).

Masking: `segment_ids` (0 = padding) make packed sequences attend only within their segment, causally by
index. With a KV cache, keys and values are written at cache index = position, and a query at position p
attends cache entries 0..p, so each batch row (sampler slot) advances independently.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxwebrl.models.config import ModelConfig
from jaxwebrl.models.activations import activation
from jaxwebrl.models.attention import kernel_attention
from jaxwebrl.models.mrope import rotate
from jaxwebrl.models.projection import project
from jaxwebrl.models.rope import apply_rope, attention_scaling, inverse_frequencies
from jaxwebrl.sharding import constrain

Params = dict[str, Any]
KVCache = dict[str, Any]  # stacked {"k": [L, B, KVH, S, hd], "v": same}, or per layer (`init_layer_cache`)

_NEG_INF = -0.7 * float(np.finfo(np.float32).max)  # finite, so fully masked (padding) rows stay NaN-free


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    axes: tuple[str, ...]  # logical axis names, mapped to mesh axes by jaxwebrl.sharding.RULES
    init: str  # "normal" | "ones" | "zeros"


def param_specs(cfg: ModelConfig) -> dict[str, Any]:
    """Shape, logical axes and initialiser of every parameter, nested like the params."""
    L, D, F, V = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    H, K, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    layers: dict[str, ParamSpec] = {
        "attn_norm": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "wq": ParamSpec((L, D, H, hd), ("layers", "embed", "heads", "head_dim"), "normal"),
        "wk": ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim"), "normal"),
        "wv": ParamSpec((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim"), "normal"),
        "wo": ParamSpec((L, H, hd, D), ("layers", "heads", "head_dim", "embed"), "normal"),
        "mlp_norm": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "w_gate": ParamSpec((L, D, F), ("layers", "embed", "mlp"), "normal"),
        "w_up": ParamSpec((L, D, F), ("layers", "embed", "mlp"), "normal"),
        "w_down": ParamSpec((L, F, D), ("layers", "mlp", "embed"), "normal"),
    }
    if cfg.attention_bias:
        layers["bq"] = ParamSpec((L, H, hd), ("layers", "heads", "head_dim"), "zeros")
        layers["bk"] = ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim"), "zeros")
        layers["bv"] = ParamSpec((L, K, hd), ("layers", "kv_heads", "head_dim"), "zeros")
    if cfg.o_bias:
        layers["bo"] = ParamSpec((L, D), ("layers", "norm"), "zeros")
    if cfg.qk_norm:
        layers["q_norm"] = ParamSpec((L, hd), ("layers", "head_dim"), "ones")
        layers["k_norm"] = ParamSpec((L, hd), ("layers", "head_dim"), "ones")
    specs: dict[str, Any] = {
        "embed": ParamSpec((V, D), ("vocab", "embed"), "normal"),
        "layers": layers,
        "final_norm": ParamSpec((D,), ("norm",), "ones"),
    }
    if not cfg.tie_word_embeddings:
        specs["lm_head"] = ParamSpec((D, V), ("embed", "vocab"), "normal")
    return specs


def _is_spec(x: Any) -> bool:
    return isinstance(x, ParamSpec)


def logical_axes(cfg: ModelConfig) -> dict[str, Any]:
    """Logical axis names of every parameter, nested like the params."""
    return jax.tree.map(lambda s: s.axes, param_specs(cfg), is_leaf=_is_spec)


def abstract_params(cfg: ModelConfig) -> dict[str, Any]:
    """ShapeDtypeStructs of the params: for ahead-of-time lowering without allocating weights."""
    dtype = jnp.dtype(cfg.param_dtype)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, dtype), param_specs(cfg), is_leaf=_is_spec)


def init_params(cfg: ModelConfig, key: jax.Array, std: float = 0.02) -> Params:
    """Random params (normal(0, std) matrices, unit norms, zero biases) in cfg.param_dtype."""
    specs = param_specs(cfg)
    flat, treedef = jax.tree.flatten(specs, is_leaf=_is_spec)
    keys = jax.random.split(key, len(flat))
    dtype = jnp.dtype(cfg.param_dtype)

    def make(spec: ParamSpec, k: jax.Array) -> jax.Array:
        if spec.init == "ones":
            return jnp.ones(spec.shape, dtype)
        if spec.init == "zeros":
            return jnp.zeros(spec.shape, dtype)
        return (std * jax.random.normal(k, spec.shape, jnp.float32)).astype(dtype)

    return jax.tree.unflatten(treedef, [make(s, k) for s, k in zip(flat, keys)])


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: str | None = None) -> KVCache:
    """An empty KV cache for `batch` rows of up to `max_len` positions."""
    # Heads before positions: attention reads each head's keys contiguously, with no per-step transpose.
    shape = (cfg.num_layers, batch, cfg.num_kv_heads, max_len, cfg.head_dim)
    dt = jnp.dtype(dtype or cfg.dtype)
    return {"k": jnp.zeros(shape, dt), "v": jnp.zeros(shape, dt)}


CACHE_AXES = ("layers", "cache_batch", "kv_heads", "cache_length", "head_dim")
LAYER_CACHE_AXES = CACHE_AXES[1:]  # one array of a per-layer cache


def init_layer_cache(cfg: ModelConfig, batch: int, length: int, dtype: str | None = None) -> KVCache:
    """The KV cache as one array per layer, {"k": ([B, KVH, S, hd],) * L, "v": same}: the sampler's decode step.

    Why not the stacked [L, ...] array: on CPU, XLA copies a layer's slice out of a stacked cache before
    each attention matmul (the dot cannot read a slice in place), which tripled the decode step's memory
    traffic at long contexts (`BUILD.md`, "Decode attention"). Separate arrays are read where they lie; the
    layers are then unrolled, not scanned (a scan cannot index a tuple by the loop counter), over per-layer
    params (`unstack_layers`).
    """
    shape = (batch, cfg.num_kv_heads, length, cfg.head_dim)
    dt = jnp.dtype(dtype or cfg.dtype)
    return {n: tuple(jnp.zeros(shape, dt) for _ in range(cfg.num_layers)) for n in ("k", "v")}


def unstack_layers(params: Params) -> Params:
    """`params` with "layers" as a tuple of per-layer trees: the sampler's layout (`init_layer_cache`). On CPU
    a layer's weights sliced out of the stacked arrays in an unrolled loop are copied at every step (a
    decode step at batch 16 spent 52 ms where its matmuls take ~10); separate arrays are read in place."""
    layers = params["layers"]
    n = jax.tree.leaves(layers)[0].shape[0]
    return {**params, "layers": tuple(jax.tree.map(lambda a, i=i: a[i], layers) for i in range(n))}


@jax.custom_vjp
def _split_layer_axis(a: jax.Array) -> tuple[jax.Array, ...]:
    """a[0], a[1], ... of a stacked [layers, ...] array. Its gradient is one stack of the layers' gradients:
    through plain `a[i]` slices autodiff pads every layer's gradient to the stacked shape and adds all of them,
    an O(layers^2) fusion (SmolLM2's 30-layer train step spent about 1.9 of its 10 s loaded in them)."""
    return tuple(a[i] for i in range(a.shape[0]))


def _split_layer_axis_fwd(a: jax.Array) -> tuple[tuple[jax.Array, ...], None]:
    return _split_layer_axis(a), None


def _split_layer_axis_bwd(_: None, grads: tuple[jax.Array, ...]) -> tuple[jax.Array]:
    return (jnp.stack(grads),)


_split_layer_axis.defvjp(_split_layer_axis_fwd, _split_layer_axis_bwd)


def split_layers(layers: Params) -> list[Params]:
    """The per-layer trees of stacked layer params, for an unrolled loop (see `_split_layer_axis`)."""
    leaves, treedef = jax.tree.flatten(layers)
    split = [_split_layer_axis(a) for a in leaves]
    return [treedef.unflatten([s[i] for s in split]) for i in range(leaves[0].shape[0])]


def stack_layers(params: Params) -> Params:
    """The inverse of `unstack_layers`: the model's stacked layout."""
    return {**params, "layers": jax.tree.map(lambda *a: jnp.stack(a), *params["layers"])}


def is_layer_cache(cache: KVCache | None) -> bool:
    """True for `init_layer_cache`'s form (a tuple of per-layer arrays), False for the stacked one."""
    return cache is not None and isinstance(cache["k"], (tuple, list))


def cache_length(cache: KVCache) -> int:
    """Positions each row of the cache holds, in either form."""
    return int(cache["k"][0].shape[2] if is_layer_cache(cache) else cache["k"].shape[3])


# ---- the math ------------------------------------------------------------------------------------


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * weight.astype(jnp.float32)).astype(x.dtype)


# Causal attention without a cache goes in blocks of query rows: block i needs keys [0, end of block i] only,
# so the masked upper triangle is skipped (exact, no online softmax), and each block's fp32 scores are small
# enough to stay in cache through the mask / softmax passes. The block length is chosen by sequence length
# (`query_block`): one dense block up to QUERY_BLOCK rows, blocks of QUERY_BLOCK up to
# QUERY_BLOCK * MAX_QUERY_BLOCKS, then longer blocks so the unrolled block loop (HLO size, compile time)
# stays bounded. Measured on CPU fwd+bwd (BUILD.md, "Attention block length"): blocks of 64 beat one dense
# block 1.5x at T=128 and 2x at T=256, and blocks of 128 by 1.15-1.3x at T=512-1024.
QUERY_BLOCK = 64
MAX_QUERY_BLOCKS = 32


def query_block(seq_len: int) -> int:
    """Query rows per attention block for a cache-free sequence of `seq_len` (>= seq_len: one dense block)."""
    return max(QUERY_BLOCK, -(-seq_len // MAX_QUERY_BLOCKS))


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """q [B,K,G,T,hd], k/v [B,K,S,hd], mask bool [B,T,S] -> [B,T,K*G,hd]. Scores and softmax in fp32."""
    B, K, G, T, hd = q.shape
    S = k.shape[2]
    scores = jnp.matmul(q.reshape(B, K, G * T, hd), jnp.swapaxes(k, 2, 3), preferred_element_type=jnp.float32)
    scores = scores.reshape(B, K, G, T, S) * (hd**-0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, _NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(B, K, G * T, S)
    out = jnp.matmul(probs, v).reshape(B, K, G, T, hd)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, K * G, hd)


def _attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, num_kv_heads: int, heads_first: bool = False
) -> jax.Array:
    """GQA attention. q [B,T,H,hd], k/v [B,S,K,hd] (or [B,K,S,hd] with heads_first, the cache layout),
    mask bool [B,T,S] -> [B,T,H,hd]. Without a cache (T == S, mask causal by index) queries go in blocks of
    `query_block(T)` rows."""
    B, T, H, hd = q.shape
    K = num_kv_heads
    if not heads_first:
        k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
    q = q.reshape(B, T, K, H // K, hd).transpose(0, 2, 3, 1, 4)  # [B,K,G,T,hd]
    block = query_block(T)
    if heads_first or T <= block:
        return _attend(q, k, v, mask)
    blocks = []
    for start in range(0, T, block):
        end = min(start + block, T)
        blocks.append(_attend(q[:, :, :, start:end], k[:, :, :end], v[:, :, :end], mask[:, start:end, :end]))
    return jnp.concatenate(blocks, axis=1)


def _layer(
    cfg: ModelConfig,
    p: Params,
    x: jax.Array,
    positions: jax.Array,
    mask: jax.Array | None,
    inv_freq: np.ndarray,
    cache: KVCache | None,
    layer: jax.Array | int | None,
    attend_len: int | None,
    rope_angles: jax.Array | None = None,
    segment_ids: jax.Array | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """One pre-norm block: x + attn(norm(x)), then + act(gate) * up (SwiGLU with the default hidden_act). p holds
    this layer's slices; `cache` is the whole [layers, ...] cache, of which this block writes and reads index
    `layer` (or, with `layer` None, `cache` is this layer's own [B, ...] arrays). `rope_angles` [B, T, hd/2] (M-RoPE) replace the angles from `positions`, which then only index
    the cache. `mask` is None when a kernel backend (`cfg.attention`) attends by `segment_ids` instead."""
    dt = x.dtype
    h = rms_norm(x, p["attn_norm"], cfg.rms_norm_eps)
    q = project("btd,dhk->bthk", h, p["wq"].astype(dt))
    k = project("btd,dhk->bthk", h, p["wk"].astype(dt))
    v = project("btd,dhk->bthk", h, p["wv"].astype(dt))
    if cfg.attention_bias:
        q, k, v = q + p["bq"].astype(dt), k + p["bk"].astype(dt), v + p["bv"].astype(dt)
    if cfg.qk_norm:
        q = rms_norm(q, p["q_norm"], cfg.rms_norm_eps)
        k = rms_norm(k, p["k_norm"], cfg.rms_norm_eps)
    if rope_angles is None:
        rope_scale = attention_scaling(cfg)
        q, k = apply_rope(q, positions, inv_freq, rope_scale), apply_rope(k, positions, inv_freq, rope_scale)
    else:
        q, k = rotate(q, rope_angles), rotate(k, rope_angles)
    q = constrain(q, ("activation_batch", "activation_length", "activation_heads", None))
    if cache is not None:  # write this step's k/v at their positions, attend over the first attend_len entries
        rows = jnp.arange(x.shape[0])[:, None, None]
        heads = jnp.arange(cfg.num_kv_heads)[None, :, None]
        at = (rows, heads, positions[:, None, :]) if layer is None else (layer, rows, heads, positions[:, None, :])
        new = {"k": k.transpose(0, 2, 1, 3), "v": v.transpose(0, 2, 1, 3)}
        cache = {n: cache[n].at[at].set(new[n].astype(cache[n].dtype)) for n in ("k", "v")}

        def own(a: jax.Array) -> jax.Array:  # this layer's [B, KVH, S, hd] (a slice of full length is no copy)
            return a if layer is None else jax.lax.dynamic_index_in_dim(a, layer, 0, keepdims=False)

        k, v = (own(cache[n])[:, :, :attend_len].astype(dt) for n in "kv")
    if mask is None:
        attn = kernel_attention(cfg, q, k, v, segment_ids)
    else:
        attn = _attention(q, k, v, mask, cfg.num_kv_heads, heads_first=cache is not None)
    out = project("bthk,hkd->btd", attn, p["wo"].astype(dt))
    if cfg.o_bias:
        out = out + p["bo"].astype(dt)
    x = constrain(x + out, ("activation_batch", "activation_length", "activation_embed"))
    h = rms_norm(x, p["mlp_norm"], cfg.rms_norm_eps)
    gate = project("btd,df->btf", h, p["w_gate"].astype(dt))
    up = project("btd,df->btf", h, p["w_up"].astype(dt))
    act = constrain(activation(cfg.hidden_act)(gate) * up, ("activation_batch", "activation_length", "activation_mlp"))
    x = x + project("btf,fd->btd", act, p["w_down"].astype(dt))
    return constrain(x, ("activation_batch", "activation_length", "activation_embed")), cache


def attention_mask(
    positions: jax.Array, segment_ids: jax.Array | None, cache_len: int | None
) -> jax.Array:
    """bool[B, T, S]. Without a cache: causal by index within equal non-zero segments. With: key <= pos."""
    B, T = positions.shape
    if cache_len is not None:
        return jnp.arange(cache_len)[None, None, :] <= positions[:, :, None]
    causal = jnp.tril(jnp.ones((T, T), dtype=bool))[None]
    if segment_ids is None:
        return jnp.broadcast_to(causal, (B, T, T))
    same = (segment_ids[:, :, None] == segment_ids[:, None, :]) & (segment_ids[:, None, :] != 0)
    return causal & same


def hidden_states(
    cfg: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array | None = None,
    cache: KVCache | None = None,
    attend_len: int | None = None,
    *,
    embeds: jax.Array | None = None,
    rope_angles: jax.Array | None = None,
    layer_residuals: jax.Array | None = None,
    frozen_layers: int = 0,
) -> tuple[jax.Array, KVCache | None]:
    """Final normed hidden states [B, T, D] (and the updated cache).

    `frozen_layers` (training, stacked params, no cache): the input embedding and the first `frozen_layers`
    layers run outside autodiff (their params and output under `stop_gradient`, as their own scan), so the
    backward pass runs through the layers above only: fine-tuning the top of a pretrained model costs one
    forward plus the top layers' backward.

    Vision-language hooks (jaxwebrl.models.vl): `embeds` [B, T, D] replace the token embeddings (image
    features scattered in), `rope_angles` [B, T, hd/2] replace the rotary angles of `positions` (M-RoPE),
    and `layer_residuals` [n, B, T, D] are added to the output of layers 0..n-1 (Qwen3-VL's DeepStack).

    The cache rides through the layer loop as part of the carry, each layer writing only its new entries, so
    XLA updates it in place: as scanned-over inputs and stacked outputs, every decode step copied the whole
    cache. `attend_len` (static) limits attention to the first cache entries, enough for the furthest row.
    """
    dt = jnp.dtype(cfg.dtype)
    x = (embeds if embeds is not None else jnp.take(params["embed"], tokens, axis=0)).astype(dt)
    x = constrain(x, ("activation_batch", "activation_length", "activation_embed"))
    if cache is not None and attend_len is None:
        attend_len = cache_length(cache)
    use_kernel = cache is None and cfg.attention != "xla"
    mask = None if use_kernel else attention_mask(positions, segment_ids, attend_len)
    inv_freq = inverse_frequencies(cfg)

    def body(carry: tuple[jax.Array, KVCache | None], layer: tuple[Params, jax.Array]) -> tuple[Any, None]:
        (h, c), (p, i) = carry, layer
        h, c = _layer(cfg, p, h, positions, mask, inv_freq, c, i, attend_len, rope_angles, segment_ids)
        if layer_residuals is not None:
            n = layer_residuals.shape[0]
            extra = jax.lax.dynamic_index_in_dim(layer_residuals, jnp.minimum(i, n - 1), 0, keepdims=False)
            h = h + jnp.where(i < n, extra, jnp.zeros_like(extra)).astype(h.dtype)
        return (h, c), None

    if isinstance(params["layers"], (tuple, list)):  # the sampler's layout: layers unrolled, no remat
        assert cache is None or is_layer_cache(cache), "per-layer params take a per-layer cache (init_layer_cache)"
        ks, vs = (list(cache["k"]), list(cache["v"])) if cache is not None else ([None] * cfg.num_layers,) * 2
        for i, p in enumerate(params["layers"]):
            c = None if cache is None else {"k": ks[i], "v": vs[i]}
            x, c = _layer(cfg, p, x, positions, mask, inv_freq, c, None, attend_len, rope_angles, segment_ids)
            if c is not None:
                ks[i], vs[i] = c["k"], c["v"]
            if layer_residuals is not None and i < layer_residuals.shape[0]:
                x = x + layer_residuals[i].astype(x.dtype)
        out = None if cache is None else {"k": tuple(ks), "v": tuple(vs)}
        return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), out
    assert not is_layer_cache(cache), "a per-layer cache takes per-layer params (unstack_layers)"
    if cfg.remat:
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable)  # type: ignore[assignment]
    layers, first = params["layers"], 0
    if frozen_layers:
        if cache is not None or not 0 < frozen_layers < cfg.num_layers:
            raise ValueError(f"frozen_layers={frozen_layers} needs 0 < frozen_layers < num_layers={cfg.num_layers} "
                             "and no cache (it is a training option)")
        lower = jax.lax.stop_gradient(jax.tree.map(lambda a: a[:frozen_layers], layers))
        x = jax.lax.stop_gradient(x)
        if cfg.scan_layers:
            (x, _), _ = jax.lax.scan(body, (x, None), (lower, jnp.arange(frozen_layers)))
        else:
            for i in range(frozen_layers):
                (x, _), _ = body((x, None), (jax.tree.map(lambda a: a[i], lower), i))
        x = jax.lax.stop_gradient(x)
        layers, first = jax.tree.map(lambda a: a[frozen_layers:], layers), frozen_layers
    if cfg.scan_layers:
        (x, cache), _ = jax.lax.scan(body, (x, cache), (layers, jnp.arange(first, cfg.num_layers)))
    else:
        for i, p in enumerate(split_layers(layers), start=first):
            (x, cache), _ = body((x, cache), (p, i))
    return rms_norm(x, params["final_norm"], cfg.rms_norm_eps), cache


def lm_head(cfg: ModelConfig, params: Params) -> jax.Array:
    """Output projection [D, V] (the transposed embedding when tied)."""
    return params["embed"].T if cfg.tie_word_embeddings else params["lm_head"]


def forward(
    cfg: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    segment_ids: jax.Array | None = None,
    cache: KVCache | None = None,
    attend_len: int | None = None,
    **hooks: jax.Array | None,
) -> tuple[jax.Array, KVCache | None]:
    """Logits float32[B, T, V] for tokens int32[B, T] at positions int32[B, T]; see the module doc.
    `hooks` are `hidden_states`' vision-language keywords (embeds, rope_angles, layer_residuals)."""
    h, new_cache = hidden_states(cfg, params, tokens, positions, segment_ids, cache, attend_len, **hooks)
    logits = project("btd,dv->btv", h, lm_head(cfg, params).astype(h.dtype), jnp.float32)
    return constrain(logits, ("activation_batch", "activation_length", "activation_vocab")), new_cache


def positions_from_mask(mask: jax.Array) -> jax.Array:
    """Positions 0.. counted over real tokens (left or right padding alike); pads get 0."""
    mask = mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0) * mask


class Decoder(nnx.Module):
    """NNX module holding the params as `nnx.Param`s annotated with `logical_axes`."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, params: Params | None = None):
        self.cfg = cfg
        values = params if params is not None else init_params(cfg, rngs.params())
        axes = logical_axes(cfg)
        self.params = nnx.data(
            jax.tree.map(lambda v, a: nnx.Param(v, logical_axes=a), values, axes, is_leaf=lambda x: isinstance(x, tuple))
        )

    def param_dict(self) -> Params:
        """The plain nested dict of arrays that `forward`, the trainer and the checkpointer use."""
        return jax.tree.map(lambda p: p[...], self.params, is_leaf=lambda x: isinstance(x, nnx.Variable))

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array | None = None,
        cache: KVCache | None = None,
    ) -> tuple[jax.Array, KVCache | None]:
        return forward(self.cfg, self.param_dict(), tokens, positions, segment_ids, cache)



