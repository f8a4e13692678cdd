"""The MLP activations a HF `hidden_act` may name, as JAX functions (the subset of transformers' ACT2FN we
implement; `ModelConfig` refuses any other name rather than running a checkpoint with the wrong one)."""

from __future__ import annotations

from typing import Callable

import jax


def _quick_gelu(x: jax.Array) -> jax.Array:
    return x * jax.nn.sigmoid(1.702 * x)


def _gelu_exact(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


def _gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


# HF `hidden_act` name -> function. gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh approximation
# (they differ only in how the constant sqrt(2/pi) is rounded); gelu is the exact erf form.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "gelu": _gelu_exact,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "quick_gelu": _quick_gelu,
    "relu": jax.nn.relu,
}


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """The function for a HF `hidden_act` name (validated by ModelConfig, so a KeyError here is a bug)."""
    return ACTIVATIONS[name]


__all__ = ["ACTIVATIONS", "activation"]
