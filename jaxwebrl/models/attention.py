"""Attention backends for the cache-free (training / scoring) forward, chosen by `ModelConfig.attention`.

- `xla`: the blocked causal attention of `decoder._attention` (scores materialised per query block; exact,
  runs everywhere; memory grows with T^2: at 16k its backward dominates the step's temporaries).
- `splash`: TPU Pallas splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`), a flash
  kernel with causal masks, segment ids (packing) and GQA. Memory O(T). On a
  CPU backend it runs in Pallas' HLO interpret mode (tests, dry runs); on GPU it is refused.
- `cudnn`: cuDNN flash attention through `jax.nn.dot_product_attention(implementation="cudnn")` (NVIDIA
  GPUs; half-precision activations). Segment ids become its boolean mask.

No supported family (Llama, Qwen2/2.5, Qwen3) has an attention logits soft cap (`models.config` refuses
`attn_logit_softcapping`); `_splash` takes one (`soft_cap`) for the family that will.

Every backend takes q [B,T,H,hd] and k/v [B,T,K,hd] with segment ids [B,T] (0 = padding) and returns
[B,T,H,hd]. Kernels run per device under `shard_map` with batch and heads split as `jaxwebrl.sharding.RULES`
says (`activation_batch`, `activation_heads`), so the kernel sees whole sequences of its local heads.
Positions in segment 0 (padding) attend among themselves in the kernels and to nothing in `xla`: real
tokens never see padding either way, so every real position's output (and every gradient through it)
is the same.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from jaxwebrl.fields import ConfigError
from jaxwebrl.sharding import RULES, logical_to_spec

ATTENTION_BACKENDS = ("xla", "splash", "cudnn")
KERNEL_BACKENDS = ("splash", "cudnn")
LANE = 128  # splash block sizes must be multiples of the TPU lane width

# The implementation `jax.nn.dot_product_attention` is asked for by the cudnn backend. Only tests change it
# (to "xla", the same call and shape contract on a machine without cuDNN).
CUDNN_IMPLEMENTATION = "cudnn"


def check_attention_fits(cfg: Any, seq_len: int, mesh_sizes: Mapping[str, int]) -> None:
    """Raise ConfigError naming the field and the fix when the chosen kernel cannot run this model at
    `seq_len` on a mesh of `mesh_sizes` (a dict data/fsdp/tensor). `cfg` is a ModelConfig."""
    backend = cfg.attention
    if backend == "xla":
        return
    tensor = _mesh_size(RULES["activation_heads"], mesh_sizes)
    for name, heads in (("num_heads", cfg.num_heads), ("num_kv_heads", cfg.num_kv_heads)):
        if heads % tensor:
            raise ConfigError(
                f"config.mesh: the {backend} attention kernel splits heads over the mesh axes "
                f"{RULES['activation_heads']!r} (size {tensor}), which do not divide model {name}={heads}; "
                f"set config.mesh.tensor to a divisor of {math.gcd(cfg.num_heads, cfg.num_kv_heads)}, "
                "or config.model.attention='xla'")
    if backend == "splash":
        block = cfg.attention_block
        if block % LANE:
            raise ConfigError(f"config.model.attention_block: {block} is not a multiple of {LANE}; "
                              f"use a multiple of {LANE} (512 is a good default)")
        tile = min(block, seq_len)
        if seq_len % LANE or seq_len % tile:
            raise ConfigError(
                f"config.train.seq_len: {seq_len} cannot be tiled by the splash attention kernel (blocks of "
                f"{tile} = min(model.attention_block, seq_len), a multiple of {LANE}); set train.seq_len to a "
                f"multiple of {tile}, or config.model.attention='xla'")
    if backend == "cudnn" and cfg.dtype not in ("bfloat16", "float16"):
        raise ConfigError(f"config.model.dtype: {cfg.dtype!r} with attention='cudnn'; cuDNN flash attention "
                          "needs half-precision activations: set model.dtype='bfloat16'")


def _mesh_size(target: Any, sizes: Mapping[str, int]) -> int:
    axes = (target,) if isinstance(target, str) else tuple(target or ())
    return math.prod(int(sizes.get(a, 1)) for a in axes)


def kernel_attention(cfg: Any, q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
    """Causal GQA attention with packing by `cfg.attention` (one of KERNEL_BACKENDS); see the module doc."""
    B, T = q.shape[:2]
    seg = jnp.ones((B, T), jnp.int32) if segment_ids is None else segment_ids.astype(jnp.int32)
    if cfg.attention == "splash":
        fn: Callable[..., jax.Array] = functools.partial(
            _splash, block=cfg.attention_block, interpret=jax.default_backend() == "cpu")
        if jax.default_backend() == "gpu":
            raise ConfigError("config.model.attention: 'splash' is a TPU kernel; on GPUs use 'cudnn' (or 'xla')")
    elif cfg.attention == "cudnn":
        fn = _cudnn
    else:
        raise ConfigError(f"config.model.attention: {cfg.attention!r} is not a kernel; use one of {KERNEL_BACKENDS}")
    return _per_device(fn, q, k, v, seg)


def _per_device(fn: Callable[..., jax.Array], q: jax.Array, k: jax.Array, v: jax.Array, seg: jax.Array) -> jax.Array:
    """Run `fn` under shard_map over the current mesh: batch over RULES['activation_batch'] (replicated
    where it does not divide), heads over RULES['activation_heads'] (must divide: check_attention_fits)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return fn(q, k, v, seg)
    batch = logical_to_spec(("activation_batch",))[0]
    heads = logical_to_spec(("activation_heads",))[0]
    if batch is not None and q.shape[0] % _mesh_size(batch, mesh.shape):
        batch = None
    for name, n in (("query", q.shape[2]), ("key/value", k.shape[2])):
        if heads is not None and n % _mesh_size(heads, mesh.shape):
            raise ConfigError(f"config.mesh: {n} {name} heads are not divisible by the mesh axes {heads!r} of the "
                              "attention kernel; change config.mesh.tensor or set config.model.attention='xla'")
    qkv = P(batch, None, heads, None)
    return jax.shard_map(fn, mesh=mesh, in_specs=(qkv, qkv, qkv, P(batch, None)), out_specs=qkv,
                         check_vma=False)(q, k, v, seg)


def _splash(q: jax.Array, k: jax.Array, v: jax.Array, seg: jax.Array, *, block: int, interpret: bool,
            soft_cap: float | None = None) -> jax.Array:
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    B, T, H, hd = q.shape
    tile = min(block, T)
    if T % tile or tile % LANE:
        raise ConfigError(f"config.train.seq_len: a length of {T} cannot be tiled by splash attention blocks of "
                          f"{tile} (multiples of {LANE}); pad sequences to a multiple of {max(tile, LANE)} "
                          "or set config.model.attention='xla'")
    sizes = sa.BlockSizes(block_q=tile, block_kv=tile, block_kv_compute=tile, block_q_dkv=tile, block_kv_dkv=tile,
                          block_kv_dkv_compute=tile, block_q_dq=tile, block_kv_dq=tile)
    mask = sa.MultiHeadMask([sa.CausalMask((T, T)) for _ in range(H)])
    kernel = sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes,
                                attn_logits_soft_cap=soft_cap, interpret=interpret)
    qh = (q * jnp.asarray(hd**-0.5, q.dtype)).transpose(0, 2, 1, 3)  # splash has no scale argument
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    out = jax.vmap(lambda a, b, c, s: kernel(a, b, c, segment_ids=sa.SegmentIds(q=s, kv=s)))(qh, kh, vh, seg)
    return out.transpose(0, 2, 1, 3).astype(q.dtype)


def _cudnn(q: jax.Array, k: jax.Array, v: jax.Array, seg: jax.Array) -> jax.Array:
    same = (seg[:, :, None] == seg[:, None, :])[:, None]  # [B,1,T,S]; causality is the kernel's own mask
    return jax.nn.dot_product_attention(q, k, v, mask=same, is_causal=True, implementation=CUDNN_IMPLEMENTATION)
