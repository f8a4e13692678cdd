"""The compiled step: SFT overfits a tiny batch; 4 accumulated micro-batches equal one batch; GRPO runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwebrl.data.pipeline import pack_samples, to_device
from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.data.samples import build_samples
from jaxwebrl.models import init_params
from jaxwebrl.models.tiny import tiny_config
from jaxwebrl.sharding import make_mesh
from jaxwebrl.train.advantages import assign_group_advantages
from jaxwebrl.config import default_config, parse_config
from jaxwebrl.train.losses import LossConfig
from jaxwebrl.train.step import StepConfig, grads_and_metrics
from jaxwebrl.train.trainer import Trainer

MC = tiny_config("qwen3", vocab_size=128, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1, head_dim=16)


def _config(tmp_path, **train):
    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir = str(tmp_path)
    c.log.tensorboard = False
    for k, v in train.items():
        c.train[k] = v
    return c


def _trajs(n, prompt=8, resp=24, seed=0, groups=1):
    rng = np.random.default_rng(seed)
    return [Trajectory(f"t{i % groups}", [Turn(rng.integers(1, 128, prompt).tolist(), rng.integers(1, 128, resp).tolist(),
                                                response_logprobs=(-rng.random(resp) - 4).tolist())],
                       reward=float(rng.integers(0, 2))) for i in range(n)]


def test_sft_overfits_tiny_batch(tmp_path):
    c = _config(tmp_path, micro_batch=2)
    c.optim.lr = 1e-2
    (batch,) = pack_samples(build_samples(_trajs(2), per="turn"), 32, 2, shuffle=False)
    tr = Trainer(parse_config(c), params=init_params(MC, jax.random.key(0)), model_cfg=MC, checkpointing=False)
    first = tr.train_on_batch(batch)["loss"]
    for _ in range(60):
        last = tr.train_on_batch(batch)["loss"]
    assert last < 0.01 * first, (first, last)
    tr.close()


@pytest.mark.parametrize("norm", ["webagent_r1", "token_mean"])
def test_accumulation_equals_one_batch(norm):
    params = init_params(MC, jax.random.key(1))
    trajs = assign_group_advantages(_trajs(8, groups=2))
    samples = build_samples(trajs, per="trajectory", norm=norm)
    (host,) = pack_samples(samples, 32, 8, shuffle=False, mode="pad")
    mesh = make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    cfg = StepConfig(MC, LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28, beta=0.01))
    host["ref_logprobs"] = host["old_logprobs"] - 0.1
    f = jax.jit(lambda p, b: grads_and_metrics(cfg, p, b))
    g1, m1 = f(params, to_device(host, mesh, 1))
    g4, m4 = f(params, to_device(host, mesh, 4))
    assert float(m1["loss"]) == pytest.approx(float(m4["loss"]), rel=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g4)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6, atol=1e-6 * float(jnp.abs(a).max()))


def test_grpo_train_on_samples(tmp_path):
    c = _config(tmp_path, micro_batch=2, accum_steps=2, seq_len=64, epochs=2, old_logprobs="recompute")
    c.loss.kind = "grpo"
    c.loss.beta = 0.001
    c.optim.lr = 1e-3
    tr = Trainer(parse_config(c), params=init_params(MC, jax.random.key(0)), model_cfg=MC, checkpointing=False)
    samples = build_samples(assign_group_advantages(_trajs(8, groups=2)), per="turn", norm="per_turn")
    m = tr.train_on_samples(samples)
    assert m["optimizer_steps"] == 2  # 8 samples of 32 tokens in 64-token rows: 4 rows = 1 step, x 2 epochs
    assert np.isfinite(m["loss"]) and 0.05 < m["logprob_mismatch"] < 5  # engine logprobs were made up (-4..-5)
    assert tr.step == 2 and 0 <= m["clip_frac"] <= 1
    tr.close()


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_grpo_logprobs_use_the_rollout_temperature(tmp_path, temperature):
    """The JaxEngine samples at T and returns log softmax(logits / T); the trainer's GRPO logprobs use the
    same T (agent.temperature), so on-policy the importance ratio is 1 (mismatch ~ 0), not exp(a T gap)."""
    import asyncio

    from jaxwebrl.engines.base import SamplingParams
    from jaxwebrl.engines.jax_engine import JaxEngine

    params = init_params(MC, jax.random.key(0))

    async def sample() -> list:
        engine = JaxEngine(MC, params, num_slots=2, max_len=128)
        try:
            return [await engine.generate(list(range(3, 11)), SamplingParams(temperature=temperature, seed=s,
                                                                              max_new_tokens=16, ignore_eos=True))
                    for s in range(4)]
        finally:
            await engine.close()

    gens = asyncio.run(sample())
    trajs = [Trajectory("t0", [Turn(list(range(3, 11)), g.token_ids, response_logprobs=g.logprobs)], reward=float(i % 2))
             for i, g in enumerate(gens)]
    samples = build_samples(assign_group_advantages(trajs), per="turn", norm="per_turn")
    mismatch = {}
    for t in (temperature, 1.0):
        c = _config(tmp_path / str(t), micro_batch=4, accum_steps=1, seq_len=32, epochs=1, old_logprobs="recompute")
        c.loss.kind, c.loss.beta, c.agent.temperature = "grpo", 0.0, t
        tr = Trainer(parse_config(c), params=params, model_cfg=MC, checkpointing=False)
        mismatch[t] = tr.train_on_samples(samples)["logprob_mismatch"]
        tr.close()
    assert mismatch[temperature] < 1e-4 and mismatch[1.0] > max(0.01, 100 * mismatch[temperature])


def test_fit_records_zero_steps_for_a_round_with_nothing_to_train(tmp_path):
    """A rollout round whose samples were all filtered out trains nothing and its record says 0 optimizer steps
    (every history record carries the count); the rounds around it train."""
    import asyncio

    from jaxwebrl.train.loop import Round, fit

    c = _config(tmp_path, micro_batch=2, accum_steps=2, seq_len=64, epochs=1, old_logprobs="recompute")
    c.loss.kind = "grpo"
    tr = Trainer(parse_config(c), params=init_params(MC, jax.random.key(0)), model_cfg=MC, checkpointing=False)
    samples = build_samples(assign_group_advantages(_trajs(8, groups=2)), per="turn", norm="per_turn")

    class Rounds:
        name, log_prefix, checkpoint_each_round = "rounds", "", False
        records: list[dict[str, float]] = []

        def done(self, trainer):
            return 0

        def next_round(self, index):
            return Round(samples=[] if index == 1 else samples)

        def after_update(self, index, trainer, metrics):
            self.records.append(dict(metrics, step=trainer.step))

    source = Rounds()
    asyncio.run(fit(tr, source, 3, progress=False))
    assert [r["train/optimizer_steps"] for r in source.records] == [1.0, 0.0, 1.0]
    assert [r["step"] for r in source.records] == [1, 1, 2]
    tr.close()
