"""Per-row token sampling inside the jitted decode step: every slot has its own temperature, top-k, top-p,
greedy flag and RNG stream, so requests with different settings share one compiled program.

RNG: the key of a row is fold_in(key(seed), n) for its n-th generated token, so a seeded request samples
the same tokens whatever else is in the batch and whichever slot it gets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxwebrl.models import token_logprobs

_MIN_TEMPERATURE = 1e-6


def row_keys(seeds: jax.Array, counters: jax.Array) -> jax.Array:
    """One PRNG key per row from uint32 seeds and int32 token counters."""
    return jax.vmap(lambda s, c: jax.random.fold_in(jax.random.key(s), c))(seeds, counters)


def filter_logits(scaled: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Mask (to -inf) what top-k, then top-p over the renormalised survivors, removes. [S, V] rows."""
    vocab = scaled.shape[-1]
    desc = jnp.flip(jnp.sort(scaled, axis=-1), axis=-1)
    k = jnp.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    rank = jnp.arange(vocab)[None, :]
    desc = jnp.where(rank < k[:, None], desc, -jnp.inf)
    probs = jax.nn.softmax(desc, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
    keep = (rank < k[:, None]) & ((before < top_p[:, None]) | (rank == 0))
    threshold = jnp.min(jnp.where(keep, desc, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(scaled >= threshold, scaled, -jnp.inf)


def sample(
    logits: jax.Array,
    keys: jax.Array,
    temperature: jax.Array,
    top_k: jax.Array,
    top_p: jax.Array,
    greedy: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Sampled token ids int32[S] and their logprobs float32[S] (log softmax(logits/T), T=1 if greedy)."""
    logits = logits.astype(jnp.float32)
    greedy = greedy | (temperature < _MIN_TEMPERATURE)
    temp = jnp.where(greedy, 1.0, jnp.maximum(temperature, _MIN_TEMPERATURE))
    scaled = logits / temp[:, None]
    # an all-greedy step (evaluation, greedy requests) skips the filter's sort and the draw's Gumbel noise over
    # the vocabulary (`sample` on 8 x 49,152 logits: about 20 ms -> 4 ms, loaded CPU); a row's key is a function of its seed and
    # token count, so skipping a draw changes no later one
    all_greedy = jnp.all(greedy)
    needs_filter = jnp.any(((top_k > 0) & (top_k < logits.shape[-1])) | (top_p < 1.0)) & ~all_greedy
    filtered = jax.lax.cond(needs_filter, filter_logits, lambda s, *_: s, scaled, top_k, top_p)
    drawn = jax.lax.cond(all_greedy, lambda k, f: jnp.zeros(f.shape[:1], jnp.int32),
                         lambda k, f: jax.vmap(jax.random.categorical)(k, f).astype(jnp.int32), keys, filtered)
    tokens = jnp.where(greedy, jnp.argmax(logits, axis=-1), drawn).astype(jnp.int32)
    return tokens, token_logprobs(logits, tokens, temp[:, None])
