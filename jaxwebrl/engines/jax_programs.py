"""The JaxEngine's device programs, as pure functions of the model config (the engine jits each once per
engine, `CountedProgram`): a prefill chunk into one slot's row, a whole VL prefill, one decode step for every
slot, and the row copies and resizes of the per-layer slot cache; plus the bucket sizes that keep the
programs few, and the count of their compilations per engine (from JAX's own compile events).
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxwebrl.engines.sampling import row_keys, sample
from jaxwebrl.models import ModelConfig, Params, forward
from jaxwebrl.models import vl
from jaxwebrl.models.decoder import hidden_states, init_layer_cache, lm_head
from jaxwebrl.models.vl_config import VLConfig

_COMPILES: collections.Counter[tuple[int, str]] = collections.Counter()
_CALLING = threading.local()  # (owner, kind) of the CountedProgram this thread is calling, if any


def _count_compile(name: str, duration: float, **kwargs: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":  # fired in the thread that called the program
        program = getattr(_CALLING, "program", None)
        if program is not None:
            _COMPILES[program] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


class CountedProgram:
    """`jax.jit(fn)` whose compilations are counted for its owner (an engine, a page pool) and kind.

    The program's name is the kind alone (`jaxengine_<kind>`), the same for every engine: JAX's compilation
    cache on disk keys a program by its IR, names included, so a second engine of the same model (the next
    policy a run evaluates, the next test) loads what the first compiled instead of compiling it again. The
    count comes from the compile events fired while this program is being called on this thread."""

    def __init__(self, fn: Callable[..., Any], owner: int, kind: str, **jit_kwargs: Any) -> None:
        def program(*args: Any) -> Any:
            return fn(*args)

        program.__name__ = program.__qualname__ = f"jaxengine_{kind}"
        self.key = (owner, kind)
        self._jitted = jax.jit(program, **jit_kwargs)

    def __call__(self, *args: Any) -> Any:
        outer = getattr(_CALLING, "program", None)
        _CALLING.program = self.key
        try:
            return self._jitted(*args)
        finally:
            _CALLING.program = outer


def compile_counts(owner: int, kinds: tuple[str, ...]) -> dict[str, int]:
    """Compilations so far of owner `owner`'s programs of each kind. JAX fires the event around its compile-or-
    load-from-disk step, so a program the disk cache served counts too (tests that count turn the cache off)."""
    return {kind: _COMPILES[(owner, kind)] for kind in kinds}


def patch_bucket(n: int, unit: int, min_bucket: int = 64) -> int:
    """Patch rows a prefill pads its images to: the next power of two >= n (at least `min_bucket`), a
    multiple of the merge unit, so many image sizes share one compiled program."""
    b = min_bucket
    while b < n:
        b *= 2
    return -(-b // unit) * unit


def prefill_buckets(max_len: int, min_bucket: int = 16) -> tuple[int, ...]:
    """Powers of two from `min_bucket` below `max_len`, then `max_len` itself."""
    out, b = [], min_bucket
    while b < max_len:
        out.append(b)
        b *= 2
    return tuple(out) + (max_len,)


def first_token_into_slot(
    logits: jax.Array, small: dict[str, jax.Array], cache: dict[str, jax.Array], length: jax.Array, slot: jax.Array,
    seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """The end of a prefill: sample the first token at position length-1 and write the prompt's one-row
    cache into the engine's cache at `slot`."""
    last = jax.lax.dynamic_index_in_dim(logits[0], length - 1, axis=0, keepdims=True)
    keys = row_keys(seed[None], jnp.zeros((1,), jnp.int32))
    tok, lp = sample(last, keys, temp[None], top_k[None], top_p[None], greedy[None])
    return put_row(cache, small, slot), tok[0], lp[0]


def get_row(cache: dict[str, Any], slot: jax.Array, length: int) -> dict[str, Any]:
    """Row `slot` of a per-layer cache, positions [0, length): a per-layer cache of one row."""
    zero = jnp.zeros((), jnp.int32)
    return jax.tree.map(lambda a: jax.lax.dynamic_slice(a, (slot, zero, zero, zero), (1, a.shape[1], length, a.shape[3])),
                        cache)


def put_row(cache: dict[str, Any], row: dict[str, Any], slot: jax.Array) -> dict[str, Any]:
    """The per-layer cache with a one-row per-layer cache written at `slot`, positions [0, its length)."""
    zero = jnp.zeros((), jnp.int32)
    return jax.tree.map(lambda a, r: jax.lax.dynamic_update_slice(a, r.astype(a.dtype), (slot, zero, zero, zero)),
                        cache, row)


def drop_layer_axis(sharding: Any) -> Any:
    """The sharding of one layer's slice of a stacked array."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec[1:]))
    return sharding


def resize_cache(cache: dict[str, Any], length: int) -> dict[str, Any]:
    """The per-layer cache cut or zero-padded to `length` positions per row."""
    def one(a: jax.Array) -> jax.Array:
        if length <= a.shape[2]:
            return a[:, :, :length]
        return jnp.pad(a, ((0, 0), (0, 0), (0, length - a.shape[2]), (0, 0)))

    return jax.tree.map(one, cache)


def chunk_prefill(
    cfg: ModelConfig, params: Params, row: dict[str, jax.Array], tokens: jax.Array, start: jax.Array, count: jax.Array,
    seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """Prefill one chunk: `count` real tokens of the right-padded [1, chunk] `tokens` at positions start..,
    attending to `row` (a slot's first ctx >= start + chunk positions, stacked [L, 1, K, ctx, hd]: earlier
    chunks, cached pages); returns the row and the token sampled from the logits of the last real token
    (used when the chunk ends the prompt). Only that token's logits are computed, not [chunk, vocab]."""
    positions = (start + jnp.arange(tokens.shape[1], dtype=jnp.int32))[None]
    h, row = hidden_states(cfg, params, tokens, positions, cache=row)
    assert row is not None
    last = jax.lax.dynamic_index_in_dim(h, count - 1, axis=1, keepdims=True)  # [1, 1, D]
    head = lm_head(cfg, params).astype(last.dtype)
    logits = jnp.einsum("btd,dv->btv", last, head, preferred_element_type=jnp.float32)[0]  # as `forward`
    keys = row_keys(seed[None], jnp.zeros((1,), jnp.int32))
    tok, lp = sample(logits, keys, temp[None], top_k[None], top_p[None], greedy[None])
    return row, tok[0], lp[0]


def prefill_vl(
    cfg: VLConfig, cache_dtype: str | None, params: Params, cache: dict[str, jax.Array], inputs: dict[str, Any], length: jax.Array,
    slot: jax.Array, seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """The prefill of a VL model, whole: `inputs` are `vl.prepare_inputs` arrays of one right-padded prompt
    (with its images' patches, or vision None); the vision encoder runs here, inside the prefill."""
    bucket = inputs["tokens"].shape[1]
    small = init_layer_cache(cfg.text, 1, bucket, cache_dtype)
    logits, small = vl.forward(cfg, params, inputs, cache=small)
    return first_token_into_slot(logits, small, cache, length, slot, seed, temp, top_k, top_p, greedy)


def decode_vl(
    cfg: VLConfig, params: Params, cache: dict[str, jax.Array], tokens: jax.Array, positions: jax.Array,
    deltas: jax.Array, seeds: jax.Array, counters: jax.Array, temp: jax.Array, top_k: jax.Array,
    top_p: jax.Array, greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """`decode` for a VL model: each slot's M-RoPE position is its cache index + its prompt's delta."""
    inputs = vl.decode_inputs(tokens[:, None], positions[:, None], deltas)
    logits, cache = vl.forward(cfg, params, inputs, cache=cache)
    tok, lp = sample(logits[:, 0], row_keys(seeds, counters), temp, top_k, top_p, greedy)
    return cache, tok, lp


def decode_by_row(step: Any, params: Params, cache: dict[str, Any], order: jax.Array, count: jax.Array,
                  *per_slot: jax.Array) -> tuple[Any, jax.Array, jax.Array]:
    """`step` (`decode` or `decode_vl` bound to a config) run one slot at a time in a loop over the decoding
    slots `order[:count]`: every row goes through the same compiled body, so a request's numbers do not
    depend on its slot index or on the other rows. Batched, XLA's CPU code generation vectorises across the
    flattened slot axis of the small per-token arrays, and a row's position among the lanes changed the last
    bit of its keys (measured on the tiny Qwen3 of the engine tests: slot 0 vs 1, same inputs). Each row is
    copied out of the cache, stepped, and only its new position written back. Free and mid-prefill slots are
    not stepped at all (each row reads every weight once, so a step costs what its busy rows cost); their
    tokens come back 0. `per_slot[1]` are the cache positions."""
    slots = per_slot[0].shape[0]
    length = cache["k"][0].shape[2]
    positions = per_slot[1]

    def body(j: jax.Array, carry: tuple[Any, jax.Array, jax.Array]) -> tuple[Any, jax.Array, jax.Array]:
        cache, toks, lps = carry
        i = order[j]
        row = get_row(cache, i, length)
        row, tok, lp = step(params, row, *(jax.lax.dynamic_slice_in_dim(a, i, 1) for a in per_slot))
        at = jnp.minimum(positions[i], length - 1)
        zero = jnp.zeros((), jnp.int32)
        cache = jax.tree.map(
            lambda c, r: jax.lax.dynamic_update_slice(
                c, jax.lax.dynamic_slice(r, (zero, zero, at, zero), (1, r.shape[1], 1, r.shape[3])).astype(c.dtype),
                (i, zero, at, zero)), cache, row)
        return cache, toks.at[i].set(tok[0]), lps.at[i].set(lp[0])

    init = (cache, jnp.zeros((slots,), jnp.int32), jnp.zeros((slots,), jnp.float32))
    return jax.lax.fori_loop(0, count, body, init)


def decode(
    cfg: ModelConfig, params: Params, cache: dict[str, jax.Array], tokens: jax.Array, positions: jax.Array,
    seeds: jax.Array, counters: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array,
    greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """One token for every slot: tokens/positions [S], each row at its own position, attending over the
    cache's whole capacity (a bucket just above the furthest busy slot); the donated cache is updated in
    place."""
    logits, cache = forward(cfg, params, tokens[:, None], positions[:, None], cache=cache)
    tok, lp = sample(logits[:, 0], row_keys(seeds, counters), temp, top_k, top_p, greedy)
    return cache, tok, lp
