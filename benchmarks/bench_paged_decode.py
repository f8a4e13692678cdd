#!/usr/bin/env python3
"""Why the JaxEngine decodes from contiguous slot rows and copies cached pages in, rather than attending
through a page table: one layer's decode attention (one query per slot) over contiguous rows
[slots, kv_heads, span, head_dim] vs over pages gathered from a pool by a page table, both jitted by XLA.
On CPU the gather materialises every slot's pages at every call (no fused paged-attention kernel).

  .venv/bin/python benchmarks/bench_paged_decode.py [--slots 16 --span 2048 --page 16]
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from interleave import per_step  # noqa: E402


def _timed(fn: Callable[..., jax.Array], *args: Any, n: int = 10) -> float:
    """Milliseconds per call after one warm-up call."""
    return per_step(lambda: fn(*args).block_until_ready(), n) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slots", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--span", type=int, default=2048)
    p.add_argument("--page", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()
    S, K, hd, span, page = a.slots, a.kv_heads, a.head_dim, a.span, a.page
    pages = S * span // page
    rng = np.random.default_rng(0)
    rows = jnp.asarray(rng.standard_normal((S, K, span, hd), np.float32))
    pool = jnp.asarray(rng.standard_normal((pages, K, page, hd), np.float32))
    table = jnp.asarray(rng.permutation(pages).reshape(S, span // page).astype(np.int32))
    q = jnp.asarray(rng.standard_normal((S, K, 1, hd), np.float32))

    def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        scores = jnp.einsum("skgd,sktd->skgt", q, k)
        return jnp.einsum("skgt,sktd->skgd", jax.nn.softmax(scores, -1), v)

    def paged(q: jax.Array, pool_k: jax.Array, pool_v: jax.Array, table: jax.Array) -> jax.Array:
        k, v = (x[table].transpose(0, 2, 1, 3, 4).reshape(S, K, span, hd) for x in (pool_k, pool_v))
        return attend(q, k, v)

    contiguous_fn, paged_fn = jax.jit(attend), jax.jit(paged)
    print(f"decode attention, one layer: {S} slots x {span} positions, {K} kv heads x {hd}, pages of {page}")
    for _ in range(a.repeats):
        rows_ms, paged_ms = _timed(contiguous_fn, q, rows, rows), _timed(paged_fn, q, pool, pool, table)
        print(f"  contiguous rows {rows_ms:8.1f} ms   page table {paged_ms:8.1f} ms   ratio {paged_ms / rows_ms:.2f}x"
              f"   (loadavg {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
