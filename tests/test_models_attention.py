"""Attention backends (jaxwebrl.models.attention): the TPU Pallas splash kernel (HLO interpret mode on CPU)
equals the XLA blocked attention, forward and gradients, with packing, padding and GQA, on one device and
sharded over 8 fake devices (batch over data x fsdp, heads over tensor); the cuDNN backend's call and shape
contract; bad input stops with an error naming the field and the fix.

The cuDNN backend cannot run here: jax checks the cuDNN version when it traces the call (the CUDA plugin is
absent), so it cannot even be lowered for a GPU target on this machine. The test asserts that the backend
reaches jax's cuDNN implementation (that check fires), and runs the identical call with
implementation='xla' against the reference to check masks, GQA and layouts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwebrl.fields import ConfigError, FieldError
from jaxwebrl.models import ModelConfig, init_params
from jaxwebrl.models import attention as attn
from jaxwebrl.models.decoder import forward
from jaxwebrl.models.setup import ModelSetup

from multidevice import run_with_devices

CFG = ModelConfig(architecture="qwen3", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True, attention_block=128)
T = 256


def _batch() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row 0: two packed segments (100 + 156 tokens); row 1: one segment of 200 tokens, then padding."""
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (2, T), 0, CFG.vocab_size))
    seg = np.ones((2, T), np.int32)
    seg[0, 100:] = 2
    seg[1, 200:] = 0
    pos = np.stack([np.concatenate([np.arange(100), np.arange(T - 100)]), np.where(np.arange(T) < 200, np.arange(T), 0)])
    return tokens, pos.astype(np.int32), seg


def _loss(cfg: ModelConfig, params, tokens, pos, seg) -> tuple[jax.Array, jax.Array]:
    logits, _ = forward(cfg, params, tokens, pos, seg)
    lp = jax.nn.log_softmax(logits)
    target = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
    picked = jnp.take_along_axis(lp, target[..., None], axis=-1)[..., 0]
    return -(picked * (seg > 0)).sum() / (seg > 0).sum(), logits


def _rel(a, b) -> float:
    return max(float(jnp.abs(x - y).max() / jnp.abs(x).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_splash_equals_xla_forward_and_gradients():
    params = init_params(CFG, jax.random.key(0))
    tokens, pos, seg = _batch()
    run = lambda cfg: jax.jit(jax.grad(lambda p: _loss(cfg, p, tokens, pos, seg), has_aux=True))(params)  # noqa: E731
    ref_grads, ref_logits = run(CFG)
    grads, logits = run(CFG.replace(attention="splash"))
    real = seg > 0
    assert real.sum() == 456 and float(jnp.abs(ref_logits).max()) > 0
    fwd = float(jnp.abs(logits - ref_logits)[real].max())
    assert fwd < 1e-5, fwd
    assert float(jnp.abs(ref_grads["layers"]["wq"]).max()) > 0  # the gradient reaches the attention weights
    assert _rel(ref_grads, grads) < 1e-4, _rel(ref_grads, grads)


def _naive_attention(q, k, v, mask):
    """Reference: one [B,H,T,S] softmax over all keys, K/V heads repeated for GQA (no blocks, no tricks)."""
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    p = jax.nn.softmax(jnp.where(mask[:, None], s, -1e30), axis=-1)
    return jnp.einsum("bhts,bshd->bthd", p, v)


@pytest.mark.parametrize("T", [64, 65, 300])
def test_xla_attention_path_chosen_by_length_equals_naive_attention(T):
    """One dense block up to decoder.QUERY_BLOCK rows, blocks of query rows (skipping the masked upper
    triangle, a ragged last block) above: forward and gradients equal plain softmax attention, with packing
    and padding."""
    from jaxwebrl.models import decoder as dec

    assert (dec.query_block(T) >= T) == (T <= dec.QUERY_BLOCK)  # which path this length takes
    assert dec.query_block(64 * 1024) == 64 * 1024 // dec.MAX_QUERY_BLOCKS  # bounded number of blocks
    ks = jax.random.split(jax.random.key(T), 4)
    q, g = jax.random.normal(ks[0], (2, T, 4, 16)), jax.random.normal(ks[3], (2, T, 4, 16))
    k, v = jax.random.normal(ks[1], (2, T, 2, 16)), jax.random.normal(ks[2], (2, T, 2, 16))
    seg = np.ones((2, T), np.int32)
    seg[0, T // 3:] = 2  # two packed segments
    seg[1, T - T // 4:] = 0  # padding
    pos = np.zeros((2, T), np.int32)
    for b in range(2):
        for sid in np.unique(seg[b]):
            idx = np.where(seg[b] == sid)[0]
            pos[b, idx] = np.arange(len(idx))
    mask = dec.attention_mask(jnp.asarray(pos), jnp.asarray(seg), None)
    real = jnp.asarray(seg > 0)[:, :, None, None]

    def loss(fn, q, k, v):
        return jnp.sum(jnp.where(real, fn(q, k, v) * g, 0.0))

    ours = jax.jit(jax.value_and_grad(lambda *a: loss(lambda q, k, v: dec._attention(q, k, v, mask, 2), *a), (0, 1, 2)))
    ref = jax.jit(jax.value_and_grad(lambda *a: loss(lambda q, k, v: _naive_attention(q, k, v, mask), *a), (0, 1, 2)))
    (lo, go), (lr, gr) = ours(q, k, v), ref(q, k, v)
    assert float(jnp.abs(lr)) > 1.0 and all(float(jnp.abs(x).max()) > 0 for x in gr)
    assert abs(float(lo - lr)) < 1e-4 * abs(float(lr)), (float(lo), float(lr))
    assert _rel(gr, go) < 1e-5, _rel(gr, go)


SHARDED = r"""
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxwebrl.models import ModelConfig, init_params, logical_axes
from jaxwebrl.models.decoder import forward
from jaxwebrl.sharding import make_mesh, shard_tree
assert len(jax.devices()) == 8
cfg = ModelConfig(architecture="qwen2", vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=16, attention_bias=True, attention_block=128)
params = init_params(cfg, jax.random.key(0))
B, T = 4, 256
tokens = np.asarray(jax.random.randint(jax.random.key(1), (B, T), 0, 128))
seg = np.ones((B, T), np.int32); seg[0, 100:] = 2; seg[1, 200:] = 0; seg[2, 64:] = 3
pos = np.zeros((B, T), np.int32)
for b in range(B):
    for s in np.unique(seg[b]):
        idx = np.where(seg[b] == s)[0]; pos[b, idx] = np.arange(len(idx))
def loss(c, p):
    lg, _ = forward(c, p, tokens, pos, seg)
    lp = jax.nn.log_softmax(lg); tgt = jnp.concatenate([tokens[:, 1:], tokens[:, :1]], 1)
    return -(jnp.take_along_axis(lp, tgt[..., None], -1)[..., 0] * (seg > 0)).sum()
ref = jax.jit(jax.value_and_grad(lambda p: loss(cfg, p)))(params)
mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
sp = cfg.replace(attention="splash")
with jax.set_mesh(mesh):
    sharded = shard_tree(params, logical_axes(cfg), mesh)
    fn = jax.jit(jax.value_and_grad(lambda p: loss(sp, p)))
    text = fn.lower(sharded).as_text()
    out = fn(sharded)
assert "shard_map" in text or "sdy.manual_computation" in text, "the kernel did not run under shard_map"
assert sharded["layers"]["wq"].sharding.spec == P(None, "fsdp", "tensor", None), sharded["layers"]["wq"].sharding.spec
rel = max(float(jnp.abs(a - np.asarray(b)).max() / jnp.abs(a).max()) for a, b in zip(jax.tree.leaves(ref[1]), jax.tree.leaves(out[1])))
lossdiff = abs(float(ref[0]) - float(out[0])) / abs(float(ref[0]))
assert rel < 1e-4 and lossdiff < 1e-5, (rel, lossdiff)
print("SPLASH_SHARDED_OK", rel, lossdiff)
"""


def test_splash_sharded_over_batch_and_heads_equals_single_device():
    out = run_with_devices(SHARDED, devices=8, timeout=600)
    assert "SPLASH_SHARDED_OK" in out, out


def test_cudnn_backend_reaches_jax_cudnn_and_its_call_matches_reference(monkeypatch):
    cfg = CFG.replace(attention="cudnn", dtype="float32")  # ModelConfig does not refuse fp32; the section does
    ks = jax.random.split(jax.random.key(2), 3)
    q = jax.random.normal(ks[0], (2, T, 4, 16))
    k = jax.random.normal(ks[1], (2, T, 2, 16))
    v = jax.random.normal(ks[2], (2, T, 2, 16))
    _, pos, seg = _batch()
    with pytest.raises(RuntimeError, match="cuDNN is not detected"):
        attn.kernel_attention(cfg, q, k, v, jnp.asarray(seg))
    monkeypatch.setattr(attn, "CUDNN_IMPLEMENTATION", "xla")  # the same call, on the XLA implementation
    out = attn.kernel_attention(cfg, q, k, v, jnp.asarray(seg))
    from jaxwebrl.models.decoder import _attention, attention_mask

    ref = _attention(q, k, v, attention_mask(jnp.asarray(pos), jnp.asarray(seg), None), 2)
    real = seg > 0
    assert out.shape == (2, T, 4, 16)
    assert float(jnp.abs(out - ref)[real].max()) < 1e-5


def test_attention_config_errors_name_the_field_and_the_fix():
    with pytest.raises(FieldError, match="attention.*use one of"):
        ModelSetup(attention="flash3")
    with pytest.raises(FieldError, match="attention_block.*multiple of 128"):
        ModelSetup(attention="splash", attention_block=200)
    with pytest.raises(FieldError, match="dtype.*bfloat16"):
        ModelSetup(attention="cudnn", dtype="float32")
    big = ModelConfig(num_heads=16, num_kv_heads=2, head_dim=128, hidden_size=256, attention="splash")
    with pytest.raises(ConfigError, match=r"config\.mesh:.*num_kv_heads=2.*config\.mesh\.tensor"):
        attn.check_attention_fits(big, 16384, {"data": 1, "fsdp": 2, "tensor": 4})
    with pytest.raises(ConfigError, match=r"config\.train\.seq_len: 1000 cannot be tiled.*multiple of 512"):
        attn.check_attention_fits(big, 1000, {"data": 1, "fsdp": 8, "tensor": 1})
    attn.check_attention_fits(big, 16384, {"data": 1, "fsdp": 4, "tensor": 2})  # fits: no error
    with pytest.raises(ConfigError, match="seq_len: a length of 200 cannot be tiled"):
        forward(CFG.replace(attention="splash"), init_params(CFG, jax.random.key(0)),
                jnp.zeros((1, 200), jnp.int32), jnp.arange(200)[None])
