"""The compiled step: SFT overfits a tiny batch; 4 accumulated micro-batches and one batch both equal a float64
reference; GRPO runs."""

import jax
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


# float32's unit roundoff. A float32 sum of n terms, added in any order, is within n * U * sum|terms| of the
# exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 4.2): XLA picks the order, and it differs
# with the micro-batching and with the CPU (issue 44), so float32 results are compared with that bound only.
U = 2.0**-24
RESPONSE_LENGTHS = [24, 20, 4, 2, 16, 12, 8, 24]  # micro-batches of 2 rows train 44, 6, 28 and 32 tokens


def _ragged_trajs(prompt=8, seed=0, groups=2):
    """Trajectories whose responses differ in length, so the micro-batches hold different token counts (a mean
    of per-micro-batch means differs from the batch mean)."""
    rng = np.random.default_rng(seed)
    return [Trajectory(f"t{i % groups}", [Turn(rng.integers(1, 128, prompt).tolist(), rng.integers(1, 128, n).tolist(),
                                                response_logprobs=(-rng.random(n) - 4).tolist())],
                       reward=float(rng.integers(0, 2))) for i, n in enumerate(RESPONSE_LENGTHS)]


def _float64_reference(params, host, loss: LossConfig, tmp_path):
    """The batch's GRPO loss terms and gradient in float64 on the host: the exported params in `transformers`
    (float64, PyTorch autograd) and the loss written out again. Per row r: its loss terms c_r[t] (weighted by
    norm_weight, unnormalised) and the gradient of sum_t c_r[t] in our param layout."""
    import torch
    import transformers

    from jaxwebrl.models.hf_io import export_hf, hf_layout

    export_hf(MC, params, tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float64).eval()
    named = dict(model.named_parameters())

    def ours(grads):
        out = {}
        for path, (hf, to_ours, _) in hf_layout(MC).items():
            if path.startswith("layers/"):
                out[path] = np.stack([to_ours(grads[hf.format(i=i)].numpy()) for i in range(MC.num_layers)])
            else:
                out[path] = to_ours(grads[hf].numpy())
        return out

    def aligned(key, r):  # entry t describes the token predicted at t (step._shift)
        x = np.asarray(host[key][r], np.float64)
        return torch.tensor(np.concatenate([x[1:], [0.0]]))

    terms, grads = [], []
    for r in range(len(host["tokens"])):
        tokens = torch.tensor(np.asarray(host["tokens"][r:r + 1]))
        logits = model(input_ids=tokens, position_ids=torch.tensor(np.asarray(host["positions"][r:r + 1]))).logits[0]
        targets = torch.cat([tokens[0, 1:], torch.zeros(1, dtype=tokens.dtype)])
        lp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
        adv = aligned("advantages", r)
        ratio = torch.exp(lp - aligned("old_logprobs", r))
        objective = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - loss.eps_low, 1 + loss.eps_high) * adv)
        log_r = lp - aligned("ref_logprobs", r)
        kl = torch.exp(-log_r) - 1 + log_r  # k3
        c = (loss.beta * kl - objective) * aligned("norm_weight", r) * aligned("loss_mask", r)
        terms.append(c.detach().numpy())
        grads.append(ours(dict(zip(named, torch.autograd.grad(c.sum(), list(named.values()))))))
    return np.stack(terms), grads


@pytest.mark.parametrize("norm", ["webagent_r1", "token_mean"])
def test_accumulation_equals_one_batch(norm, tmp_path):
    """One batch of 8 rows, and the same rows as 4 accumulated micro-batches of 2, give the loss and gradient of
    a float64 reference, each within the float32 bound of its sums. Both sides sum over the n trained tokens
    in an order of XLA's choosing: |loss - ref| <= n U sum_t |c_t| / D, and per param tensor
    ||g - ref|| <= n U || sum_r |grad c_r| / D || (the magnitudes per row, so the cancellation between rows of
    opposite advantage stays out of the bound). Measured: at most 0.01 of the loss bound and 0.07 of the
    gradient bounds; a dropped micro-batch or a mean of micro-batch means is off by hundreds of times them.
    Exact: the token count, and zero gradient for the embedding rows of tokens the batch does not hold."""
    from jaxwebrl.models.hf_io import flat_params

    params = init_params(MC, jax.random.key(1))
    samples = build_samples(assign_group_advantages(_ragged_trajs()), per="trajectory", norm=norm)
    (host,) = pack_samples(samples, 32, 8, shuffle=False, mode="pad")
    host["ref_logprobs"] = host["old_logprobs"] - 0.1
    mesh = make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    loss_cfg = LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28, beta=0.01)
    f = jax.jit(lambda p, b: grads_and_metrics(StepConfig(MC, loss_cfg), p, b))
    sides = {k: f(params, to_device(host, mesh, k)) for k in (1, 4)}

    terms, row_grads = _float64_reference(params, host, loss_cfg, tmp_path)
    n = int(np.asarray(host["loss_mask"]).sum())
    denom = float(np.asarray(host["norm_denom"], np.float64).sum())
    assert n == sum(RESPONSE_LENGTHS) and terms.shape == (8, 32)  # the reference saw every row
    ref_loss = terms.sum() / denom
    ref_grad = {k: sum(g[k] for g in row_grads) / denom for k in row_grads[0]}
    magnitude = {k: sum(np.abs(g[k]) for g in row_grads) / denom for k in row_grads[0]}
    unused = ~np.isin(np.arange(MC.vocab_size), np.asarray(host["tokens"]))
    assert unused.sum() > 10 and np.all(ref_grad["embed"][unused] == 0)
    for k, (grads, metrics) in sides.items():
        assert float(metrics["tokens"]) == n, k
        assert abs(float(metrics["denominator"]) - denom) <= n * U * denom, k
        assert abs(float(metrics["loss"]) - ref_loss) <= n * U * np.abs(terms).sum() / denom, (k, float(metrics["loss"]), ref_loss)
        flat = flat_params(jax.device_get(grads))
        assert sorted(flat) == sorted(ref_grad), k
        for path, want in ref_grad.items():
            err = np.linalg.norm(np.asarray(flat[path], np.float64) - want)
            assert err <= n * U * np.linalg.norm(magnitude[path]), (k, path, err, n * U * np.linalg.norm(magnitude[path]))
        np.testing.assert_array_equal(np.asarray(flat["embed"])[unused], 0.0)


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
