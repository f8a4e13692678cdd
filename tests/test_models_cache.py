"""KV-cache decoding, packing and the NNX module agree with the plain full forward."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxwebrl.models import Decoder, forward, init_cache, init_layer_cache, init_params
from jaxwebrl.models.decoder import stack_layers, unstack_layers
from jaxwebrl.models.tiny import tiny_config


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_prefill_then_single_steps_equal_full_forward(arch):
    cfg = tiny_config(arch)
    params = init_params(cfg, jax.random.key(1), std=0.2)
    rng = np.random.default_rng(0)
    T, prompt = 14, 6
    tokens = jnp.asarray(rng.integers(0, cfg.vocab_size, (2, T)))
    positions = jnp.broadcast_to(jnp.arange(T), (2, T))
    full, _ = forward(cfg, params, tokens, positions)

    cache = init_cache(cfg, batch=2, max_len=32)
    # Prefill padded to a bucket of 8: the pad tokens write junk at positions 6, 7 that decoding overwrites.
    padded = jnp.concatenate([tokens[:, :prompt], jnp.zeros((2, 2), tokens.dtype)], axis=1)
    logits, cache = forward(cfg, params, padded, jnp.broadcast_to(jnp.arange(8), (2, 8)), cache=cache)
    np.testing.assert_allclose(logits[:, :prompt], full[:, :prompt], atol=1e-5)
    step = jax.jit(lambda c, t, p: forward(cfg, params, t, p, cache=c))
    for t in range(prompt, T):
        logits, cache = step(cache, tokens[:, t : t + 1], jnp.full((2, 1), t))
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize("scan", [True, False])
def test_decode_over_a_span_of_the_cache_equals_full_forward(scan: bool):
    """The sampler's decode step: the cache carried through scanned or unrolled layers, attention limited to
    the first `attend_len` entries of a longer cache (rows never reach past it)."""
    cfg = tiny_config("qwen3").replace(scan_layers=scan)
    params = init_params(cfg, jax.random.key(4), std=0.2)
    T, prompt, span = 12, 5, 16
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, cfg.vocab_size, (2, T)))
    full, _ = forward(cfg, params, tokens, jnp.broadcast_to(jnp.arange(T), (2, T)))
    cache = init_cache(cfg, batch=2, max_len=64)
    _, cache = forward(cfg, params, tokens[:, :prompt], jnp.broadcast_to(jnp.arange(prompt), (2, prompt)), cache=cache)
    step = jax.jit(lambda c, t, p: forward(cfg, params, t, p, cache=c, attend_len=span), donate_argnums=0)
    for t in range(prompt, T):
        logits, cache = step(cache, tokens[:, t : t + 1], jnp.full((2, 1), t))
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)
    assert not np.asarray(cache["k"][:, :, :, T:]).any()  # nothing written past the last position


def test_per_layer_cache_and_params_equal_full_forward():
    """The sampler's layout (one cache array and one params tree per layer, layers unrolled): prefill, then
    single steps over the whole cache, each equal to the plain full forward; stack_layers inverts the split."""
    cfg = tiny_config("qwen3")
    params = init_params(cfg, jax.random.key(5), std=0.2)
    split = unstack_layers(params)
    assert len(split["layers"]) == cfg.num_layers
    jax.tree.map(np.testing.assert_array_equal, stack_layers(split), params)
    T, prompt = 12, 5
    tokens = jnp.asarray(np.random.default_rng(5).integers(0, cfg.vocab_size, (2, T)))
    full, _ = forward(cfg, params, tokens, jnp.broadcast_to(jnp.arange(T), (2, T)))
    cache = init_layer_cache(cfg, batch=2, length=T)
    logits, cache = forward(cfg, split, tokens[:, :prompt], jnp.broadcast_to(jnp.arange(prompt), (2, prompt)),
                            cache=cache)
    np.testing.assert_allclose(logits, full[:, :prompt], atol=1e-5)
    step = jax.jit(lambda c, t, p: forward(cfg, split, t, p, cache=c), donate_argnums=0)
    for t in range(prompt, T):
        logits, cache = step(cache, tokens[:, t : t + 1], jnp.full((2, 1), t))
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)
    assert all(np.asarray(k[:, :, T - 1]).any() for k in cache["k"])  # every layer's array was written
    with pytest.raises(AssertionError, match="per-layer"):  # the two layouts do not mix
        forward(cfg, params, tokens[:, :1], jnp.zeros((2, 1), jnp.int32), cache=init_layer_cache(cfg, 2, T))


def test_slots_advance_independently():
    """Rows of one cache at different positions each match their own full forward (sampler slots)."""
    cfg = tiny_config("qwen3")
    params = init_params(cfg, jax.random.key(2), std=0.2)
    a = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (1, 9)))
    b = jnp.asarray(np.random.default_rng(2).integers(0, cfg.vocab_size, (1, 5)))
    full_a, _ = forward(cfg, params, a, jnp.arange(9)[None])
    full_b, _ = forward(cfg, params, b, jnp.arange(5)[None])
    cache = init_cache(cfg, batch=2, max_len=16)
    _, cache = forward(cfg, params, jnp.concatenate([a[:, :8], jnp.pad(b[:, :4], ((0, 0), (0, 4)))]),
                       jnp.broadcast_to(jnp.arange(8), (2, 8)), cache=cache)
    logits, _ = forward(cfg, params, jnp.asarray([[a[0, 8]], [b[0, 4]]]), jnp.asarray([[8], [4]]), cache=cache)
    np.testing.assert_allclose(logits[0, 0], full_a[0, 8], atol=1e-5)
    np.testing.assert_allclose(logits[1, 0], full_b[0, 4], atol=1e-5)


@pytest.mark.parametrize("la,lb", [(7, 5), (230, 170)])  # the second crosses query blocks (QUERY_BLOCK=128)
def test_packed_segments_equal_separate_sequences(la: int, lb: int):
    cfg = tiny_config("qwen2")
    params = init_params(cfg, jax.random.key(3), std=0.2)
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, cfg.vocab_size, la), rng.integers(0, cfg.vocab_size, lb)
    packed = jnp.asarray(np.concatenate([a, b, [0, 0]])[None])
    seg = jnp.asarray([[1] * la + [2] * lb + [0, 0]])
    pos = jnp.asarray([list(range(la)) + list(range(lb)) + [0, 0]])
    logits, _ = forward(cfg, params, packed, pos, seg)
    ref_a, _ = forward(cfg, params, jnp.asarray(a[None]), jnp.arange(la)[None])
    ref_b, _ = forward(cfg, params, jnp.asarray(b[None]), jnp.arange(lb)[None])
    # fp32 summation order differs between the two layouts: 1.1e-5 seen at 230 tokens
    np.testing.assert_allclose(logits[0, :la], ref_a[0], atol=5e-5)
    np.testing.assert_allclose(logits[0, la:la + lb], ref_b[0], atol=5e-5)
    assert np.isfinite(np.asarray(logits)).all()  # fully masked pad rows stay finite


def test_remat_and_unrolled_layers_give_same_logits_and_grads():
    cfg = tiny_config("llama", num_layers=3)
    params = init_params(cfg, jax.random.key(4), std=0.2)
    tokens = jnp.asarray(np.random.default_rng(4).integers(0, cfg.vocab_size, (2, 10)))
    pos = jnp.broadcast_to(jnp.arange(10), (2, 10))

    def loss(p, c):
        return forward(c, p, tokens, pos)[0].mean()

    base = jax.grad(loss)(params, cfg)
    for variant in (cfg.replace(remat=True), cfg.replace(scan_layers=False), cfg.replace(remat=True, scan_layers=False)):
        other = jax.grad(loss)(params, variant)
        for x, y in zip(jax.tree.leaves(base), jax.tree.leaves(other)):
            np.testing.assert_allclose(x, y, atol=1e-6)


def test_nnx_module_carries_logical_axes_and_matches_forward():
    cfg = tiny_config("qwen3")
    model = Decoder(cfg, rngs=nnx.Rngs(params=0))
    axes = {path: v.logical_axes for path, v in nnx.iter_graph(model) if isinstance(v, nnx.Param)}
    assert axes[("params", "layers", "wq")] == ("layers", "embed", "heads", "head_dim")
    assert axes[("params", "embed")] == ("vocab", "embed")
    tokens = jnp.asarray([[1, 2, 3]])
    pos = jnp.arange(3)[None]
    np.testing.assert_array_equal(model(tokens, pos)[0], forward(cfg, model.param_dict(), tokens, pos)[0])
