"""One process of tests/test_multihost.py: `multihost_worker.py PROCESS_ID NUM_PROCESSES PORT WORKDIR`.

With NUM_PROCESSES=2 each process owns 4 fake CPU devices (XLA_FLAGS set by the launcher), joins the other
through `jax.distributed.initialize` on loopback, and on the 8-device mesh (data=2, fsdp=4):
  (b) agrees with the other host on the round's shape (jaxwebrl.train.hosts: one allgather) although the
      hosts hold different numbers and lengths of batches, pads, and runs the agreed steps;
  (a) those sharded steps: the params are written to WORKDIR/params_multi.npz for comparison with
      NUM_PROCESSES=1, which runs the same global batches on one device (WORKDIR/params_single.npz);
  (c) saves the state with the project's Orbax Checkpointer from both processes and restores it;
  (d) runs `Trainer.train_on_samples` on one rollout batch per host of different sizes and lengths (host 0:
      ten short samples with the sampler's logprobs, host 1: one long sample without), which must agree and
      finish on both hosts with the same global metrics; then a round in which no host has a sample, which
      every host leaves without a step.

`multihost_worker.py PROCESS_ID 2 PORT WORKDIR online` instead runs (e): two iterations of the online loop
(`OnlineRL` through `train.loop.fit`) on each host: its own MiniWoB++ server, its own Chromium, its own
JaxEngine on a host-local copy of the params, and rollouts of its own. The hosts produce different numbers
of samples on purpose: host 0 plays one step per episode, host 1 three (samples are per turn); in the second
iteration every group of host 0 is filtered out (the worker empties its samples after the real rollouts, as
a filter dropping every group would). The hosts agree on each update's batches (train/hosts.py), so nobody
waits in a collective another skipped, and both engines end up serving the same updated params.
"""

from __future__ import annotations

import json
import sys

import numpy as np

PID, NPROC, PORT, WORKDIR = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
MODE = sys.argv[5] if len(sys.argv) > 5 else "steps"  # steps: (a)-(d); online: (e)

import jax  # noqa: E402

if NPROC > 1:  # a crashed peer aborts the survivor after the heartbeat timeout (longer online: browsers and
    # compiles share two cores, and a starved heartbeat thread must not pass for a dead peer)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{PORT}", num_processes=NPROC, process_id=PID,
                               initialization_timeout=60, heartbeat_timeout_seconds=120 if MODE == "online" else 20,
                               shutdown_timeout_seconds=30)

from jax.experimental import multihost_utils  # noqa: E402

from jaxwebrl.data.pipeline import empty_rows, to_device  # noqa: E402
from jaxwebrl.models import ModelConfig, init_params  # noqa: E402
from jaxwebrl.sharding import make_mesh  # noqa: E402
from jaxwebrl.train.checkpoint import Checkpointer  # noqa: E402
from jaxwebrl.train.hosts import RoundPlan, agree_round, conform  # noqa: E402
from jaxwebrl.train.losses import LossConfig  # noqa: E402
from jaxwebrl.train.optim import OptimConfig, make_optimizer  # noqa: E402
from jaxwebrl.train.step import StepConfig, abstract_state, init_state, make_train_step  # noqa: E402

MC = ModelConfig(architecture="qwen3", vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=2,
                 num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)
ROWS_PER_HOST = 4  # micro_batch 8 over 2 hosts, accum 1


def host_batches(host: int) -> list[dict[str, np.ndarray]]:
    """What each host's rollouts packed into: host 0 two batches of 128 tokens, host 1 one of 256."""
    rng = np.random.default_rng(100 + host)
    shapes = [128, 128] if host == 0 else [256]
    out = []
    for T in shapes:
        b = empty_rows(ROWS_PER_HOST, T)
        for r in range(ROWS_PER_HOST):
            n = int(rng.integers(T // 2, T + 1))
            b["tokens"][r, :n] = rng.integers(0, MC.vocab_size, n)
            b["segment_ids"][r, :n] = 1
            b["positions"][r, :n] = np.arange(n)
            b["loss_mask"][r, 1:n] = 1
            b["advantages"][r, 1:n] = 1.0  # SFT: weight 1 on every trained token
            b["norm_weight"][r, 1:n] = 1.0
            b["norm_denom"][r, 1:n] = 1.0
        out.append(b)
    return out


def trainer_round() -> dict:
    """(d): one GRPO update through the Trainer from host-local samples of different counts and lengths."""
    from jaxwebrl.config import default_config, parse_config
    from jaxwebrl.data.samples import Sample
    from jaxwebrl.train.trainer import Trainer

    c = default_config()
    c.workdir = f"{WORKDIR}/run"
    c.model.source = "inline"
    c.model.shape = {k: getattr(MC, k) for k in ("architecture", "vocab_size", "hidden_size", "intermediate_size",
                                                 "num_layers", "num_heads", "num_kv_heads", "head_dim", "qk_norm")}
    c.mesh = {"data": 2, "fsdp": 4, "tensor": 1}
    c.train.seq_len, c.train.micro_batch, c.train.accum_steps, c.train.epochs = 256, 8, 1, 1
    c.loss.kind = "grpo"
    trainer = Trainer(parse_config(c), checkpointing=False)
    rng = np.random.default_rng(7 + PID)
    lengths = [int(n) for n in rng.integers(40, 100, 10)] if PID == 0 else [200]
    samples = []
    for n in lengths:
        mask = np.zeros(n, np.int32)
        mask[n // 2:] = 1
        samples.append(Sample(tokens=rng.integers(0, MC.vocab_size, n).astype(np.int32), loss_mask=mask,
                              advantages=np.where(mask, rng.normal(), 0.0).astype(np.float32),
                              old_logprobs=np.where(mask, -4.0, 0.0).astype(np.float32),
                              norm_weight=mask.astype(np.float32), norm_denom=mask.astype(np.float32),
                              has_old_logprobs=PID == 0))
    m = trainer.train_on_samples(samples)
    empty = trainer.train_on_samples([])  # every host's samples filtered out: all agree on no step
    return {"optimizer_steps": m["optimizer_steps"], "seq_len": m["seq_len"], "loss": m["loss"],
            "tokens": m["tokens"], "samples": m["samples"], "empty_round_steps": empty["optimizer_steps"]}


def online_config():
    """A small online GRPO run on MiniWoB++ over the 8-device mesh; the horizon differs by host.

    The recipe trains every sampled turn with advantage 1 (the registry's `constant` estimator, as
    BrowserAgent's RFT does after its filter): a random policy succeeds at nothing, so group-normalised
    advantages would all be 0 and the update would leave the params where they were."""
    from jaxwebrl.config import default_config, parse_config
    from jaxwebrl.recipes.registry import Recipe, register_recipe

    register_recipe(Recipe("multihost_check", reward="success", filters=(), advantage="constant", per="turn",
                           norm="token_mean"))
    c = default_config()
    c.recipe, c.workdir, c.seed = "multihost_check", f"{WORKDIR}/online", 0
    c.model.source, c.model.path = "hf", f"{WORKDIR}/tiny"  # written by the launcher, read by every host
    c.mesh = {"data": 2, "fsdp": 4, "tensor": 1}
    c.tasks.suite, c.tasks.train = "miniwob", "click-test"
    c.env.action_space, c.env.text_mode, c.env.text_budget_chars = "bid", "axtree", 200
    c.env.page_metadata, c.env.relative_urls, c.env.contexts_per_browser = False, True, 4
    c.agent.strategy, c.agent.prompt_format = "compress_past", "bid"
    c.agent.system_prompt = "You are a web agent. Answer with exactly one action, e.g. click('12')"
    c.agent.max_steps = 1 if PID == 0 else 3  # host 1 plays three turns per episode: more samples
    c.agent.max_context_tokens, c.agent.max_new_tokens, c.agent.max_format_errors = 1024, 8, 100
    c.data.kind, c.data.per, c.data.norm = "online", "turn", "token_mean"
    c.train.seq_len, c.train.micro_batch, c.train.accum_steps, c.train.epochs = 1024, 8, 1, 1
    c.train.dynamic_sampling = False
    c.rollout.group_size, c.rollout.groups_per_iteration, c.rollout.max_concurrent_groups = 2, 2, 2
    c.engine.num_slots, c.engine.max_len = 4, 1024
    c.loss.kind, c.loss.beta = "grpo", 0.0
    c.rl.iterations, c.rl.eval_every = 2, 0
    c.viewer.rollouts_per_iteration = 0
    c.log.progress = False
    return parse_config(c)


def online() -> dict:
    """(e): see the module docstring. Writes each host's engine params (and host 0 the trainer's, gathered)."""
    import asyncio
    from pathlib import Path

    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.train.hosts import host_local
    from jaxwebrl.train.loop import fit
    from jaxwebrl.train.trainer import Trainer

    run = online_config()
    trainer = Trainer(run, total_steps=10)
    init = host_local(trainer.params)

    class AllFilteredOnHost0(OnlineRL):
        async def next_round(self, it: int):
            work = await super().next_round(it)
            if PID == 0 and it == 1:  # the rollouts ran; every group is filtered out
                work.samples, work.metrics["train/samples_used"] = [], 0.0
            return work

    rl_dir = Path(WORKDIR) / "rl"  # shared by the hosts; each writes its own records (train/hosts.host_path)
    rl_dir.mkdir(parents=True, exist_ok=True)

    async def go():
        async with AllFilteredOnHost0(run, trainer, rl_dir / "history.jsonl") as rl:
            await fit(trainer, rl, run.rl.iterations, progress=False)
            return rl.history, jax.device_get(rl.engine.weights()), rl.engine.version

    history, engine_params, engine_version = asyncio.run(go())
    final = host_local(trainer.params)
    flat = lambda tree: {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(tree)}
    np.savez(f"{WORKDIR}/engine_params_{PID}.npz", **flat(engine_params))
    if PID == 0:
        np.savez(f"{WORKDIR}/trainer_params.npz", **flat(final))
        np.savez(f"{WORKDIR}/trainer_params_init.npz", **flat(init))
    keys = ("train/samples_used", "train/optimizer_steps", "train/seq_len", "train/loss", "train/tokens",
            "rollout/episodes", "policy_version")
    rounds = [{k: h["metrics"].get(k) for k in keys} for h in history]
    trainer.close()
    return {"rounds": rounds, "engine_version": engine_version, "trainer_step": trainer.step}


def main() -> None:
    if MODE == "online":
        report = online()
        multihost_utils.sync_global_devices("done")
        print("WORKER_REPORT " + json.dumps(report), flush=True)
        jax.distributed.shutdown()
        return
    tx, sched = make_optimizer(OptimConfig(lr=1e-3, max_grad_norm=0.0), 10)
    cfg = StepConfig(MC, LossConfig(kind="sft"))
    params = jax.tree.map(np.asarray, init_params(MC, jax.random.key(0)))
    if NPROC > 1:
        assert len(jax.devices()) == 8 and len(jax.local_devices()) == 4 and jax.process_count() == 2
        mesh = make_mesh({"data": 2, "fsdp": 4, "tensor": 1})
        local = host_batches(PID)
        plan = agree_round(max(b["tokens"].shape[1] for b in local), len(local), True)  # (b): one allgather
        batches = conform(local, plan, ROWS_PER_HOST)
    else:  # the same global batches on one device: rows of host 0, then host 1 (the mesh's device order)
        mesh = make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, jax.devices()[:1])
        plan = RoundPlan(256, 2, False)
        per_host = [conform(host_batches(h), plan, ROWS_PER_HOST) for h in range(2)]
        batches = [{k: np.concatenate([per_host[0][i][k], per_host[1][i][k]]) for k in per_host[0][i]}
                   for i in range(plan.num_batches)]
    state = init_state(params, tx, mesh, MC)
    step = make_train_step(cfg, tx, mesh, sched)
    losses = []
    for b in batches:
        with jax.set_mesh(mesh):
            state, m = step(state, to_device(b, mesh, 1))
        losses.append(float(m["loss"]))
    gathered = multihost_utils.process_allgather(state["params"], tiled=True) if NPROC > 1 else jax.device_get(state["params"])
    flat = {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_leaves_with_path(gathered)}
    report = {"plan": [plan.seq_len, plan.num_batches], "steps": len(losses), "losses": losses}
    if NPROC > 1:  # (c) Orbax save from both processes, restore into the same shardings
        ckpt = Checkpointer(f"{WORKDIR}/ckpt", async_save=True)
        ckpt.save(len(losses), state, {"host": PID}, {"note": "multihost test"})
        ckpt.wait()
        restored, _, meta = ckpt.restore(abstract_state(MC, tx, mesh))
        ckpt.close()
        same = jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                            multihost_utils.process_allgather(restored["params"], tiled=True), gathered)
        wq = restored["params"]["layers"]["wq"]
        report.update(restored_equal=all(jax.tree.leaves(same)), restored_step=int(np.asarray(restored["step"].addressable_data(0))),
                      restored_spec=str(wq.sharding.spec), addressable_shards=len(wq.addressable_shards), meta=meta)
        report["trainer"] = trainer_round()
        multihost_utils.sync_global_devices("done")
    if NPROC == 1:
        np.savez(f"{WORKDIR}/params_init.npz", **{jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(params)})
    if PID == 0:
        np.savez(f"{WORKDIR}/params_{'multi' if NPROC > 1 else 'single'}.npz", **flat)
    print("WORKER_REPORT " + json.dumps(report), flush=True)
    if NPROC > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
