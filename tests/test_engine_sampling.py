"""The decode step's per-row sampler (jaxwebrl/engines/sampling.py) against values computed here: greedy rows
take the argmax with its log-softmax logprob; a sampled row draws the same token whether its neighbours are
greedy (the all-greedy shortcut is off) or sampled; top-k 1 is the argmax; an all-greedy batch matches."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxwebrl.engines.sampling import row_keys, sample

V = 97


def _logits(rows: int) -> jnp.ndarray:
    return jnp.asarray(np.random.default_rng(0).normal(size=(rows, V)) * 3, jnp.float32)


def _run(logits, greedy, top_k=None, temperature=None):
    rows = logits.shape[0]
    keys = row_keys(jnp.arange(rows, dtype=jnp.uint32) + 7, jnp.full((rows,), 3, jnp.int32))
    top_k = jnp.full((rows,), -1, jnp.int32) if top_k is None else jnp.asarray(top_k, jnp.int32)
    temperature = jnp.ones((rows,), jnp.float32) if temperature is None else jnp.asarray(temperature, jnp.float32)
    tok, lp = jax.jit(sample)(logits, keys, temperature, top_k, jnp.ones((rows,), jnp.float32),
                              jnp.asarray(greedy, bool))
    return np.asarray(tok), np.asarray(lp)


def test_all_greedy_rows_take_the_argmax_with_its_logprob() -> None:
    logits = _logits(4)
    tok, lp = _run(logits, [True] * 4)
    ref = jax.nn.log_softmax(logits, axis=-1)
    np.testing.assert_array_equal(tok, np.argmax(np.asarray(logits), axis=-1))
    np.testing.assert_allclose(lp, np.asarray(ref)[np.arange(4), tok], rtol=1e-6)


def test_a_sampled_row_draws_the_same_token_beside_greedy_rows_as_beside_sampled_ones() -> None:
    logits = jnp.asarray(np.random.default_rng(1).normal(size=(4, V)) * 0.5, jnp.float32)  # flat: draws vary
    mixed, mixed_lp = _run(logits, [True, False, True, False])
    sampled, sampled_lp = _run(logits, [False] * 4)
    assert mixed[1] == sampled[1] and mixed[3] == sampled[3]
    np.testing.assert_allclose(mixed_lp[[1, 3]], sampled_lp[[1, 3]], rtol=1e-6)
    argmax = np.argmax(np.asarray(logits), axis=-1)
    assert mixed[0] == argmax[0] and mixed[2] == argmax[2]
    assert (sampled != argmax).any()  # the sampled rows really sampled (not the argmax everywhere)


def test_top_k_one_and_zero_temperature_are_the_argmax() -> None:
    logits = _logits(3)
    argmax = np.argmax(np.asarray(logits), axis=-1)
    tok, _ = _run(logits, [False] * 3, top_k=[1, 1, -1], temperature=[1.0, 0.7, 0.0])
    np.testing.assert_array_equal(tok, argmax)
