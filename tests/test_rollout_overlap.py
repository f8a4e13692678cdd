"""Training overlapped with rollout (`rl.overlap`): the off-policy bound, the policy version of every sample,
and a crash in an overlapped iteration resumed without losing or repeating a batch.

The online loop runs for real (Chromium and MiniWoB++ click-test, the collector, the recipe, the Flax trainer,
Orbax checkpoints) with a SCRIPTED POLICY behind the Engine protocol (tests/recipe_fixtures.py), because
these checks need predictable episodes and a known weights version behind every answer: the engine logs the
version each answer came from, and the tests compare what the records say against that log. Each answer
takes 0.1 s, like a generation. The update of a round waits (in its worker thread) until a group of the next
batch has finished, so the overlap the tests check is there every time, not by chance.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import json
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

from jaxwebrl.config import ConfigError, apply_variants, parse_config, validate_config, with_changes
from jaxwebrl.data.records import read_trajectories
from recipe_fixtures import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[1]


class LoggedScript(ScriptedPolicy):
    """The scripted policy, 0.1 s per answer, stamping the version it holds and logging (session, version)."""

    def __init__(self, tokenizer: Any, roles: Sequence[str], version: int = 0, bump_every_answer: bool = False):
        super().__init__(tokenizer, "bid", "bid", roles)
        self.version = version
        self.bump = bump_every_answer  # a new version after every answer: each turn of an episode differs
        self.answers: list[tuple[str, int]] = []
        self.published: list[int] = [version]

    async def generate(self, prompt_ids: Sequence[int], params: Any, *, session_id: str | None = None) -> Any:
        await asyncio.sleep(0.1)
        gen = await super().generate(prompt_ids, params, session_id=session_id)
        self.answers.append((session_id or "", gen.policy_version))
        if self.bump:
            self.version += 1
        return gen

    async def update_weights(self, weights: Any, version: int) -> None:
        await super().update_weights(weights, version)
        self.published.append(version)


def overlap_config(workdir: Path, **changes: Any):
    """The main job's smoke variant on click-test with the scripted policy's tiny model, overlap on."""
    spec = importlib.util.spec_from_file_location("grpo_local", ROOT / "configs" / "grpo_local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.quick = True
    base = {"workdir": str(workdir), "model.source": "tiny", "model.path": "", "model.shape": {}, "bc.enabled": False,
            "report.enabled": False, "log.progress": False, "tasks.train": "click-test", "rl.overlap": True,
            "train.old_logprobs": "engine", "rl.replay_demonstrations": 0, "train.dynamic_sampling": False,
            "rl.schedule": "async", "engine.deterministic": False,  # the throughput mode's overlap (completion order)
            "rollout.group_size": 2, "rollout.groups_per_iteration": 2, "rollout.max_concurrent_groups": 2,
            "rollout.max_groups_per_iteration": 40, "rollout.task_sampling": "uniform", "agent.max_steps": 3,
            "env.contexts_per_browser": 4, "agent.max_context_tokens": 8192, "train.seq_len": 8192,
            "engine.max_len": 8192, "checkpoint.async_save": False, "checkpoint.dir": str(workdir / "rl" / "checkpoints")}
    run = with_changes(parse_config(apply_variants(c)), **{**base, **changes})
    validate_config(run, 1)
    return run


class Crash(Exception):
    """The process dying in the middle of an update (nothing after it runs, nothing more reaches the disk)."""


def run_online(run, engines: list[LoggedScript], trained: list[list[tuple[int, int]]], crash_round: int | None = None,
               resume: bool = False) -> list[dict]:
    """`fit` of the online loop. Each update first waits until a group of the next batch has finished (the
    overlap is under way), records (sample version, trainer step) of what it trains, and at `crash_round`
    raises `Crash` instead of training."""
    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.train.loop import fit
    from jaxwebrl.train.trainer import Trainer

    trainer = Trainer(with_changes(run, **{"checkpoint.resume": resume}), total_steps=100)
    rl_dir = Path(run.workdir) / "rl"
    rl_dir.mkdir(parents=True, exist_ok=True)

    def engine_factory(cfg, *, tokenizer, version, **_):
        engines.append(LoggedScript(tokenizer, ["solve", "idle"], version=version))
        return engines[-1]

    async def go() -> list[dict]:
        async with OnlineRL(run, trainer, rl_dir / "history.jsonl", engine_factory=engine_factory) as rl:
            original, loop, ended = trainer.train_on_samples, asyncio.get_running_loop(), [0]
            record = rl.sampler.record

            def count_group(*args: Any) -> None:  # the collector hands every kept-or-rejected group to the sampler
                ended[0] += 1
                record(*args)

            rl.sampler.record = count_group

            def groups_ended() -> int:  # read on the event loop: kept or rejected, plus dropped as stale
                async def read() -> int:
                    return ended[0] + rl.collector.dropped_stale
                return asyncio.run_coroutine_threadsafe(read(), loop).result()

            def train(samples, *args, **kwargs):
                assert threading.current_thread() is not threading.main_thread()  # the event loop stays free
                it = len(rl.history)  # this round (a resumed run's history holds the rounds done)
                trained.append([(s.policy_version, trainer.step) for s in samples])
                if it + 1 < run.rl.iterations:  # a next batch is playing: let one of its groups end first
                    seen, deadline = groups_ended(), time.time() + 120
                    while groups_ended() == seen and time.time() < deadline:
                        time.sleep(0.05)
                    assert groups_ended() > seen, "no group of the next batch ended during the update"
                if crash_round == it:
                    raise Crash
                return original(samples, *args, **kwargs)

            trainer.train_on_samples = train
            await fit(trainer, rl, run.rl.iterations, progress=False)
            return rl.history

    try:
        return asyncio.run(go())
    finally:
        trainer.close()


def lag(version: int, step: int, published: Sequence[int]) -> int:
    """Weight updates between `version` and the policy at `step`."""
    return sum(version < v <= step for v in published)


def check_versions(rollouts, engines: list[LoggedScript]) -> None:
    """Every turn's recorded version is the one the engine answered it with; a trajectory's is its oldest."""
    answered = collections.defaultdict(list)
    for e in engines:
        for session, version in e.answers:
            answered[session].append(version)
    played = [t for t in rollouts if t.turns]  # an episode whose reset failed (env_error) sampled nothing
    assert played
    for t in played:
        turns = [turn.policy_version for turn in t.turns]
        assert turns == answered[t.metadata["episode_id"]], t.metadata["episode_id"]
        assert t.policy_version == min(turns)


def test_overlap_lag_versions_and_crash_resume(tmp_path):
    run = overlap_config(tmp_path, **{"rl.iterations": 3, "rollout.max_policy_lag": 1})
    engines: list[LoggedScript] = []
    trained: list[list[tuple[int, int]]] = []
    with pytest.raises(Crash):
        run_online(run, engines, trained, crash_round=1)
    history_file = tmp_path / "rl" / "history.jsonl"
    assert [json.loads(line)["iteration"] for line in history_file.read_text().splitlines()] == [0]
    crashed = read_trajectories(tmp_path / "rl" / "rollouts.jsonl")
    crashed_groups = {t.group_id for t in crashed if t.metadata["iteration"] == 1}
    assert crashed_groups  # round 1's batch was collected (during round 0's update) and written before the crash
    check_versions(crashed, engines)

    history = run_online(run, engines, trained, resume=True)  # a new trainer, engine, pool: only the disk is shared
    records = [json.loads(line) for line in history_file.read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2]  # none lost, none repeated
    assert [h["iteration"] for h in history] == [0, 1, 2]
    from jaxwebrl.train.checkpoint import Checkpointer

    meta = Checkpointer(str(tmp_path / "rl" / "checkpoints")).read_meta()
    assert meta["run"]["rounds"] == 3
    # the state holds exactly the logged updates: round 0 once, rounds 1 and 2 once each after the resume
    assert meta["step"] == sum(int(r["metrics"]["train/optimizer_steps"]) for r in records) > 0
    rollouts = read_trajectories(tmp_path / "rl" / "rollouts.jsonl")
    per_iteration = collections.Counter(t.metadata["iteration"] for t in rollouts)
    assert sorted(per_iteration) == [0, 1, 2]
    assert not crashed_groups & {t.group_id for t in rollouts}  # the crashed round's batch was collected again
    ids = [t.metadata["episode_id"] for t in rollouts]
    assert len(ids) == len(set(ids))
    check_versions(rollouts, engines)

    # No sample trained on a policy more than max_policy_lag updates newer than its own; overlap made some 1 old.
    published = sorted({v for e in engines for v in e.published})
    lags = [lag(v, step, published) for batch in trained for v, step in batch]
    assert trained[0] and len(trained) == 4  # rounds 0, 1 (crashed), 1, 2
    assert max(lags) == 1 and min(lags) == 0
    assert all(r["metrics"]["rollout/policy_lag_max"] <= 1 for r in records)
    # round 1 was collected again on the restored policy (its overlapped batch died with the crash); round 2
    # played while round 1 trained
    assert records[1]["metrics"]["rollout/policy_lag_max"] == 0 and records[2]["metrics"]["rollout/policy_lag_max"] == 1


def test_lag_zero_drops_what_the_update_overtook(tmp_path):
    run = overlap_config(tmp_path, **{"rl.iterations": 2, "rollout.max_policy_lag": 0})
    engines: list[LoggedScript] = []
    trained: list[list[tuple[int, int]]] = []
    history = run_online(run, engines, trained)
    published = sorted({v for e in engines for v in e.published})
    assert len(trained) == 2 and all(trained)
    assert all(lag(v, step, published) == 0 for batch in trained for v, step in batch)
    # the groups of round 1 that finished while round 0 trained were one update old: dropped, and replaced
    assert history[1]["metrics"]["rollout/groups_stale"] >= 1
    assert history[1]["metrics"]["rollout/policy_lag_max"] == 0


def test_turn_versions_inside_one_episode(tmp_path):
    """An engine whose version moves after every answer: each turn records its own version, the trajectory and
    its per-turn samples the right ones, and the version the episode began on (999 here) only when no turn
    was generated."""
    from envs import get_suite
    from jaxwebrl.browser import BrowserPool
    from jaxwebrl.data.samples import build_samples
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
    from jaxwebrl.rollout import Collector

    run = overlap_config(tmp_path, **{"rl.overlap": False})
    make_tiny_checkpoint(tmp_path / "tok", tiny_config("qwen3", vocab_size=512))
    tok = load_tokenizer(str(tmp_path / "tok"))
    suite = get_suite("miniwob", tasks=["click-test"]).start()

    async def go():
        engine = LoggedScript(tok, ["idle", "idle"], version=5, bump_every_answer=True)
        env_cfg = run.browser_env()
        async with BrowserPool(run.env.pool_config(), env_cfg) as pool:
            col = Collector(pool, engine, tok, env_cfg, run.agent, run.rollout, policy_version=lambda: 999,
                            policy_lag=lambda version: 0)
            groups, _ = await col.collect(iter([(suite.get_task("miniwob.click-test"), 0)]), num_groups=1)
        return groups[0], engine

    try:
        group, engine = asyncio.run(go())
    finally:
        suite.stop()
    trajs = group.trajectories
    assert all(len(t.turns) == run.agent.max_steps for t in trajs)  # idle: the horizon ends them
    check_versions(trajs, [engine])
    assert sorted(v for t in trajs for v in (turn.policy_version for turn in t.turns)) == list(range(5, 5 + 2 * 3))
    assert group.policy_version == 5
    for t in trajs:
        samples = build_samples([t], per="turn")
        assert [s.policy_version for s in samples] == [turn.policy_version for turn in t.turns]
        assert build_samples([t], per="trajectory")[0].policy_version == min(turn.policy_version for turn in t.turns)


def test_overlap_needs_the_samplers_logprobs():
    spec = importlib.util.spec_from_file_location("grpo_local", ROOT / "configs" / "grpo_local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.rl.overlap, c.train.old_logprobs = True, "recompute"
    with pytest.raises(ConfigError, match="config.rl.overlap: .* set train.old_logprobs='engine'"):
        parse_config(c)
    c.train.old_logprobs = "engine"
    assert parse_config(c).rl.overlap


def test_mixed_batch_keeps_the_samplers_logprobs(tmp_path):
    """train.old_logprobs='engine' with samples that have the sampler's logprobs beside samples that have none
    (demonstrations): the first keep theirs, only the second are scored by the pre-update policy."""
    import jax

    from jaxwebrl.data.records import Trajectory, Turn
    from jaxwebrl.data.samples import build_samples
    from jaxwebrl.models import init_params
    from jaxwebrl.models.tiny import tiny_config
    from jaxwebrl.train.trainer import Trainer

    mc = tiny_config("qwen3", vocab_size=128, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1, head_dim=16)
    run = with_changes(parse_config(apply_variants(_grpo_tiny())), **{
        "workdir": str(tmp_path), "train.old_logprobs": "engine", "train.seq_len": 32, "train.micro_batch": 2,
        "train.epochs": 1, "log.tensorboard": False})
    trainer = Trainer(run, params=init_params(mc, jax.random.key(0)), model_cfg=mc, checkpointing=False)
    rng = np.random.default_rng(0)
    sampled = Trajectory("t", [Turn(rng.integers(1, 128, 6).tolist(), [5, 6, 7], [-0.5, -1.5, -2.5])], group_id="a",
                         advantage=1.0)
    demo = Trajectory("t", [Turn(rng.integers(1, 128, 6).tolist(), [8, 9], None)], group_id="b", advantage=1.0)
    seen: list[np.ndarray] = []
    captured: list[dict] = []
    score, step = trainer._score, trainer._step

    def scored(params, dev):  # the first call scores with the policy (the second, if any, the reference)
        out = score(params, dev)
        seen.append(np.asarray(out))
        return out

    def stepped(state, dev):
        captured.append(jax.device_get(dev))
        return step(state, dev)

    trainer._score, trainer._step = scored, stepped
    trainer.train_on_samples(build_samples([sampled, demo], per="turn"))
    trainer.close()
    assert seen and captured  # the pre-update policy scored the batch; one step trained it
    old, mask, tokens = (np.asarray(captured[0][k]).reshape(-1) for k in ("old_logprobs", "loss_mask", "tokens"))
    recomputed = seen[0].reshape(-1)
    trained = np.flatnonzero(mask)
    assert len(trained) == 5 and np.isfinite(old).all()
    engine_tokens = [i for i in trained if tokens[i] in (5, 6, 7)]
    demo_tokens = [i for i in trained if tokens[i] in (8, 9)]
    assert sorted(old[engine_tokens].tolist()) == [-2.5, -1.5, -0.5]  # the sampler's, not recomputed
    np.testing.assert_array_equal(old[demo_tokens], recomputed[demo_tokens])
    assert not np.allclose(recomputed[engine_tokens], old[engine_tokens])


def _grpo_tiny():
    from jaxwebrl.config import default_config

    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.loss.kind = "grpo"
    c.optim.lr = 1e-3
    return c
