"""Weight projections (an einsum of activations with a parameter) with a backward that XLA's CPU backend
runs without transposing the large operand.

jax differentiates `einsum("btd,df->btf", x, w)` with respect to `w` as a product that comes out [f, d]
followed by a transpose, so XLA's CPU dot emitter first transposes the cotangent g [b*t, f] (for the MLP
and the vocabulary projection the largest operand: a strided copy fused into the op that produces g).
Here the weight gradient is `einsum("btd,btf->df", x, g)`: it comes out in the weight's own layout and only
the activations x [b*t, d] are transposed. Same math, values equal up to float summation order; the
forward is the plain einsum. Measured on CPU (BUILD.md, "Benchmarks", 2026-11-26): the decoder's fwd+bwd
1.37x faster (benchmarks/bench_model.py), the GRPO train step 1.45x (benchmarks/bench_grpo.py). On TPU and GPU
the compiler picks layouts itself; the backward is the same contraction autodiff would produce.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp


def _operands(spec: str) -> tuple[str, str, str]:
    inputs, out = spec.replace(" ", "").split("->")
    x, w = inputs.split(",")
    return x, w, out


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 3))
def project(spec: str, x: jax.Array, w: jax.Array, preferred_element_type: Any = None) -> jax.Array:
    """`jnp.einsum(spec, x, w)` for a two-operand spec "x,w->out" (w a weight), with the backward above."""
    return jnp.einsum(spec, x, w, preferred_element_type=preferred_element_type)


def _project_fwd(spec: str, x: jax.Array, w: jax.Array, preferred_element_type: Any) -> tuple[jax.Array, Any]:
    return project(spec, x, w, preferred_element_type), (x, w)


def _project_bwd(spec: str, preferred_element_type: Any, res: Any, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, w = res
    xs, ws, outs = _operands(spec)
    dx = jnp.einsum(f"{outs},{ws}->{xs}", g, w, preferred_element_type=jnp.float32).astype(x.dtype)
    dw = jnp.einsum(f"{xs},{outs}->{ws}", x, g, preferred_element_type=jnp.float32).astype(w.dtype)
    return dx, dw


project.defvjp(_project_fwd, _project_bwd)
