"""Per-token log-probabilities: the one definition the trainer and the sampler share, so the engine's
logprobs and the trainer's recomputed ones agree (DESIGN.md principle 1)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def token_logprobs(logits: jax.Array, targets: jax.Array, temperature: float | jax.Array = 1.0) -> jax.Array:
    """log softmax(logits / temperature)[targets], in float32. logits [..., V], targets int[...]."""
    logits = logits.astype(jnp.float32) / temperature
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return picked - logz


def token_logprobs_and_entropy(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`token_logprobs(logits, targets)` and the entropy of softmax(logits) (no gradient), float32, in one
    pass over the vocabulary: the entropy reuses the log-normaliser (H = logZ - sum p * logits) instead of
    materialising a second log-softmax, which the train step paid for on every [B, T, V] logits."""
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    sg, sg_logz = jax.lax.stop_gradient(logits), jax.lax.stop_gradient(logz)
    ent = sg_logz - jnp.sum(jnp.exp(sg - sg_logz[..., None]) * sg, axis=-1)
    return picked - logz, ent


def entropy(logits: jax.Array) -> jax.Array:
    """Entropy of softmax(logits) per position, float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)
