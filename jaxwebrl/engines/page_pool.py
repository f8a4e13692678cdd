"""PagePool: the device memory of the JaxEngine's prefix cache, fixed-size pages of keys and values.

The pool is `{"k", "v"}` of [layers, pages, kv_heads, page_size, head_dim], apart from the engine's slot
cache (one [slots, kv_heads, capacity, head_dim] array per layer). Two jitted copies move blocks between them: `store`
writes blocks of a slot's row into pages (after a prefill, and when a request ends, so its response is
cached too), `load` writes a list of pages into the start of a slot's row (a request whose prompt begins
with cached blocks). Decoding then reads each slot's row contiguously, exactly as without the cache.

Why copy instead of attending through a page table: on CPU, XLA gathers the pages of every slot into a new
buffer at every decode step and layer before the matmul (no fused paged-attention kernel), which multiplies
the decode step's memory traffic, the part that dominates it at long contexts; a copy happens once per
request. The page list of a slot is what `RadixIndex.match` returns.

Every copy moves as many pages as the slot cache's rows hold at its current capacity (padded ids), so there is
one `store` and one `load` program per capacity, whatever the prompts and the matched prefixes' lengths (page
counts bucketed to powers of two compiled a new copy program whenever a later round matched a prefix of a new
bucket). The padding costs a copy of the row's length: about 60 ms per store at SmolLM2's 30 layers x 1,024
positions on one CPU thread, once per prompt and once per finished request.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxwebrl.engines.jax_programs import CountedProgram
from jaxwebrl.models.decoder import cache_length
from jaxwebrl.sharding import tree_shardings

KVPages = dict[str, jax.Array]

POOL_AXES = ("layers", "cache_pages", "kv_heads", "cache_length", "head_dim")


def _store(pool: KVPages, cache: dict[str, jax.Array], slot: jax.Array, blocks: jax.Array,
           pages: jax.Array) -> KVPages:
    """pool[:, pages[i]] = block blocks[i] of row `slot`; ids >= num_pages (padding) are dropped. Only the
    blocks' positions are gathered from each layer (copying whole rows first cost 50 ms a call at 30 layers x
    1,024 positions)."""
    L, P, K, page, hd = pool["k"].shape
    positions = (blocks[:, None] * page + jnp.arange(page)[None]).reshape(-1)  # [nb * page]
    out = {}
    for n in ("k", "v"):
        picked = jnp.stack([a[slot, :, positions] for a in cache[n]])  # [L, nb * page, K, hd]
        picked = picked.reshape(L, -1, page, K, hd).transpose(0, 1, 3, 2, 4)  # [L, nb, K, page, hd]
        out[n] = pool[n].at[:, pages].set(picked.astype(pool[n].dtype), mode="drop")
    return out


def _load(cache: dict[str, jax.Array], pool: KVPages, slot: jax.Array, pages: jax.Array) -> dict[str, jax.Array]:
    """Row `slot` positions [0, nb * page) = pool pages `pages` in order. Positions past the real pages get
    padding pages' contents; they are past the prompt's cached part and written before anything reads them."""
    L, _, K, page, hd = pool["k"].shape
    nb = pages.shape[0]
    zero = jnp.zeros((), jnp.int32)
    out = {}
    for n in ("k", "v"):
        seq = jnp.take(pool[n], pages, axis=1).transpose(0, 2, 1, 3, 4).reshape(L, K, nb * page, hd)
        out[n] = tuple(jax.lax.dynamic_update_slice(a, seq[i][None].astype(a.dtype), (slot, zero, zero, zero))
                       for i, a in enumerate(cache[n]))
    return out


class PagePool:
    """Pages of keys and values on the devices, and the two copy programs; see the module doc."""

    def __init__(self, num_pages: int, page_size: int, cache_shape: tuple[int, ...], dtype: Any,
                 placement: Mesh | jax.sharding.Sharding, owner: int = -1) -> None:
        """`cache_shape`: the slot cache's [layers, slots, kv_heads, max_len, head_dim]; `placement`: where the
        engine keeps that cache, a mesh (pages replicated, kv heads split as the rules table says) or the one
        device's sharding; `owner`: whose compile counts the copy programs add to (the engine's id)."""
        L, _, K, max_len, hd = cache_shape
        if max_len < page_size:
            raise ValueError(f"page_size={page_size} exceeds the cache length {max_len}")
        self.num_pages, self.page_size = int(num_pages), int(page_size)
        self.max_pages = max_len // page_size  # whole pages a row holds
        shape = (L, self.num_pages, K, page_size, hd)
        mesh = placement if isinstance(placement, Mesh) else None
        sharding: Any = (tree_shardings(jax.ShapeDtypeStruct(shape, dtype), POOL_AXES, mesh) if mesh is not None
                         else placement)
        self.mesh = mesh
        with self._mesh_ctx():
            self.arrays: KVPages = jax.jit(lambda: {n: jnp.zeros(shape, dtype) for n in ("k", "v")},
                                           out_shardings={"k": sharding, "v": sharding})()
        self._store = CountedProgram(_store, owner, "store", donate_argnums=(0,))
        self._load = CountedProgram(_load, owner, "load", donate_argnums=(0,))

    def _mesh_ctx(self) -> contextlib.AbstractContextManager[Any]:
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays.values())

    def store(self, cache: dict[str, Any], slot: int, blocks: list[int], pages: list[int]) -> None:
        """Copy blocks `blocks` of row `slot` into pages `pages` (same length). Device thread only."""
        nb = cache_length(cache) // self.page_size
        b = np.zeros(nb, np.int32)
        p = np.full(nb, self.num_pages, np.int32)  # out of range: dropped
        b[: len(blocks)], p[: len(pages)] = blocks, pages
        with self._mesh_ctx():
            self.arrays = self._store(self.arrays, cache, np.int32(slot), b, p)

    def load(self, cache: dict[str, Any], slot: int, pages: list[int]) -> dict[str, Any]:
        """The cache (donated) with row `slot` starting with pages `pages` (which the row's length must hold).
        Device thread only."""
        nb = cache_length(cache) // self.page_size  # the whole row: one program per capacity
        p = np.zeros(nb, np.int32)
        p[: len(pages)] = pages
        with self._mesh_ctx():
            return self._load(cache, self.arrays, np.int32(slot), p)
