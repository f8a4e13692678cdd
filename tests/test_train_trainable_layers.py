"""`train.trainable_layers`: only the top N decoder layers (and the final norm) of a text policy train.

The frozen run's gradient of the top layers must equal the full model's gradient of the same layers (the
layers below change the computation's graph, not its value), its gradient everywhere else must be exactly
zero, and an optimizer step (with weight decay, which would move a frozen weight with a zero gradient) must
leave the frozen weights bit-identical while it moves the trained ones. Scanned and unrolled layers alike.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxwebrl.config import ConfigError, default_config, parse_config
from jaxwebrl.data.pipeline import pack_samples, to_device
from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.data.samples import build_samples
from jaxwebrl.models import init_params
from jaxwebrl.models.tiny import tiny_config
from jaxwebrl.sharding import make_mesh
from jaxwebrl.train.losses import LossConfig
from jaxwebrl.train.step import StepConfig, grads_and_metrics
from jaxwebrl.train.trainer import Trainer

LAYERS = 4


def _model(scan: bool):
    return tiny_config("llama", vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=LAYERS, num_heads=2,
                       num_kv_heads=1, head_dim=16, tie_word_embeddings=True, scan_layers=scan)


def _batch(n: int = 4):
    rng = np.random.default_rng(0)
    trajs = [Trajectory(f"t{i}", [Turn(rng.integers(1, 128, 10).tolist(), rng.integers(1, 128, 14).tolist())])
             for i in range(n)]
    (host,) = pack_samples(build_samples(trajs, per="turn"), 32, n, shuffle=False, mode="pad")
    return host


@pytest.mark.parametrize("scan", [True, False])
def test_top_layers_get_the_full_models_gradient_and_the_rest_none(scan):
    mc = _model(scan)
    params = init_params(mc, jax.random.key(0))
    batch = to_device(_batch(), make_mesh({"data": 1, "fsdp": 1, "tensor": 1}), 1)
    full = StepConfig(mc, LossConfig(kind="sft"))
    top = StepConfig(mc, LossConfig(kind="sft"), trainable_layers=1)
    g_full, m_full = jax.jit(lambda p, b: grads_and_metrics(full, p, b))(params, batch)
    g_top, m_top = jax.jit(lambda p, b: grads_and_metrics(top, p, b))(params, batch)
    assert float(m_top["loss"]) == pytest.approx(float(m_full["loss"]), rel=1e-6)
    frozen = LAYERS - 1
    for name, g in g_top["layers"].items():
        g, want = np.asarray(g), np.asarray(g_full["layers"][name])
        assert np.abs(want[frozen:]).max() > 0, name  # the full model's top layer does get a gradient
        np.testing.assert_allclose(g[frozen:], want[frozen:], rtol=1e-5, atol=1e-6 * np.abs(want[frozen:]).max())
        assert not np.any(g[:frozen]), f"{name}: a frozen layer got a gradient"
    assert not np.any(np.asarray(g_top["embed"])) and np.abs(np.asarray(g_full["embed"])).max() > 0
    np.testing.assert_allclose(np.asarray(g_top["final_norm"]), np.asarray(g_full["final_norm"]), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("trainable", [2, 4])  # 4 = every layer of the model: only the embedding is frozen
def test_an_update_leaves_frozen_weights_bit_identical(tmp_path, trainable):
    mc = _model(True)
    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir, c.log.tensorboard = str(tmp_path), False
    c.loss.kind = "sft"
    c.train.micro_batch, c.train.seq_len, c.train.trainable_layers = 4, 32, trainable
    c.optim.lr, c.optim.weight_decay = 1e-2, 0.1  # decoupled weight decay moves every weight it is applied to
    before = init_params(mc, jax.random.key(1))
    trainer = Trainer(parse_config(c), params=before, model_cfg=mc, checkpointing=False)
    try:
        trainer.train_on_batch(_batch())
        after = jax.device_get(trainer.params)
    finally:
        trainer.close()
    before = jax.device_get(before)
    np.testing.assert_array_equal(after["embed"], before["embed"])
    for name in before["layers"]:
        frozen = mc.num_layers - trainable
        np.testing.assert_array_equal(after["layers"][name][:frozen], before["layers"][name][:frozen], err_msg=name)
        assert not np.array_equal(after["layers"][name][frozen:], before["layers"][name][frozen:]), f"{name}: top layers did not move"


def test_more_trainable_layers_than_the_model_has_is_refused(tmp_path):
    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir, c.log.tensorboard = str(tmp_path), False
    c.train.trainable_layers = LAYERS + 1
    mc = _model(True)
    with pytest.raises(ValueError, match=r"train\.trainable_layers=5 exceeds the model's 4 layers"):
        Trainer(parse_config(c), params=init_params(mc, jax.random.key(0)), model_cfg=mc, checkpointing=False)
    c.train.trainable_layers = -1
    with pytest.raises(ConfigError, match=r"config\.train\.trainable_layers"):
        parse_config(c)
