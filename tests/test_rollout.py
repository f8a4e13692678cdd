"""Rollout: groups leave as they finish (no barrier), lock-step waits, a killed browser costs only its
episodes, task sampling, horizons and replay."""

from __future__ import annotations

import asyncio
import collections

import numpy as np
import pytest

from agent_fixtures import ENV, pool_and_engine, tiny_policy
from envs import get_suite
from jaxwebrl.agent import AgentConfig
from jaxwebrl.browser import BrowserPool, PoolConfig
from jaxwebrl.engines.jax_engine import JaxEngine
from jaxwebrl.rollout import Collector, HorizonSchedule, ReplayBuffer, RolloutConfig, TaskSampler, replay_draw_count

AGENT = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=1, max_format_errors=100,
                    max_new_tokens=4, max_context_tokens=4096)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return tiny_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def suite():
    s = get_suite("miniwob", tasks=["click-button", "click-link", "click-dialog"]).start()
    yield s
    s.stop()


def _collect(policy, suite, mode: str):
    """Group "long" (4 steps) runs beside "short" groups (1 step); returns groups in yield order."""
    cfg, params, tok = policy
    long_task, short_a, short_b = (suite.get_task(t) for t in suite.task_ids("all"))

    def agent_for(task):
        return AGENT.__class__(**{**AGENT.__dict__, "max_steps": 4 if task is long_task else 1})

    async def go():
        async with pool_and_engine(cfg, params, tok, contexts=6, slots=6) as (pool, engine):
            col = Collector(pool, engine, tok, ENV, AGENT, RolloutConfig(group_size=2, mode=mode, max_concurrent_groups=2))
            tasks = iter([(long_task, 0), (short_a, 0), (short_b, 0)])
            return [g async for g in col.stream(tasks, agent_for)], long_task.task_id, short_b.task_id

    return asyncio.run(go())




def test_async_and_lockstep_collection(policy, suite):
    # A random policy can end any episode early (a stray click submits), so the test relies on timestamps,
    # not on which group turns out slowest.
    groups, long_id, third_id = _collect(policy, suite, "async")
    finished = [g.finished for g in groups]
    assert finished == sorted(finished)  # groups leave in completion order
    first_batch = [g for g in groups if g.task_id != third_id]
    third = next(g for g in groups if g.task_id == third_id)
    assert third.started < max(g.finished for g in first_batch)  # refilled while the slower group still ran
    assert all(t.group_id == g.group_id for g in groups for t in g.trajectories)

    groups, long_id, third_id = _collect(policy, suite, "lockstep")
    first_batch = [g for g in groups if g.task_id != third_id]
    third = next(g for g in groups if g.task_id == third_id)
    # the next batch (the third task) started only after the slowest group of the first batch ended
    assert third.started >= max(g.finished for g in first_batch)


def test_killed_browser_costs_only_its_episodes(policy, suite):
    cfg, params, tok = policy

    async def go():
        engine = JaxEngine(cfg, params, num_slots=4, max_len=4096, tokenizer=tok, buckets=(256, 512, 1024, 2048, 4096))
        agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=6, max_format_errors=100,
                            max_new_tokens=24, max_context_tokens=4096)
        async with BrowserPool(PoolConfig(num_browsers=2, contexts_per_browser=2), ENV) as pool:
            await pool.wait_ready()  # both browsers up, so contexts spread over them
            col = Collector(pool, engine, tok, ENV, agent, RolloutConfig(group_size=2, max_concurrent_groups=2))
            tasks = iter([(suite.get_task(suite.task_ids("all")[0]), s) for s in range(2)])

            async def killer():
                while sum(len(s.envs) for s in pool.slots) < 4 or not any(
                        e.steps >= 1 for s in pool.slots for e in s.envs):
                    await asyncio.sleep(0.05)
                await pool.kill_browser(0)

            kill = asyncio.ensure_future(killer())
            groups, stats = await col.collect(tasks, num_groups=2)
            await kill
            after = None
            async for g in col.stream(iter([(suite.get_task(suite.task_ids("all")[0]), 7)])):
                after = g
            await engine.close()
            return groups, after

    groups, after = asyncio.run(go())
    trajs = [t for g in groups for t in g.trajectories]
    reasons = collections.Counter(t.termination for t in trajs)
    assert reasons["env_error"] >= 1, reasons
    assert sum(r for k, r in reasons.items() if k != "env_error") >= 1, reasons  # the other browser's episodes finished
    for t in trajs:
        if t.termination == "env_error":
            assert all(m == 0 for turn in t.turns for m in turn.mask)
        else:
            assert any(m == 1 for turn in t.turns for m in turn.mask)
    assert after is not None and all(t.termination != "env_error" for t in after.trajectories)


class _T:
    def __init__(self, name, difficulty):
        self.task_id, self.difficulty = name, difficulty


def test_task_sampler_ratio_horizon_and_replay():
    tasks = [_T("e1", "easy"), _T("e2", "easy"), _T("m", "medium"), _T("h", "hard")]
    sampler = TaskSampler(tasks, seeds=[1, 2, 3], ratio={"easy": 2, "medium": 5, "hard": 3}, seed=0)
    draws = collections.Counter(next(sampler)[0].difficulty for _ in range(4000))
    assert abs(draws["medium"] / 4000 - 0.5) < 0.03 and abs(draws["easy"] / 4000 - 0.2) < 0.03
    again = TaskSampler(tasks, seeds=[1, 2, 3], ratio={"easy": 2, "medium": 5, "hard": 3}, seed=0)
    first = TaskSampler(tasks, seeds=[1, 2, 3], ratio={"easy": 2, "medium": 5, "hard": 3}, seed=0)
    assert [next(again) for _ in range(20)] == [next(first) for _ in range(20)]
    with pytest.raises(ValueError, match="difficulties \\['expert'\\]"):
        TaskSampler(tasks, seeds=[1], ratio={"expert": 1})

    h = HorizonSchedule(default=15, per_difficulty=(("easy", 10), ("hard", 30)), schedule=((0, 15), (100, 30)))
    assert h.max_steps(tasks[0], 0) == 10 and h.max_steps(tasks[3], 0) == 30
    assert h.max_steps(tasks[2], 50) == 15 and h.max_steps(tasks[2], 100) == 30

    buf: ReplayBuffer[str] = ReplayBuffer(max_iterations=2, power=2.0, seed=0)
    buf.add_iteration(["old"] * 10)
    buf.add_iteration(["mid"] * 10)
    buf.add_iteration(["new"] * 10)  # "old" falls out
    assert len(buf) == 20
    drawn = collections.Counter(buf.draw(5000))
    assert "old" not in drawn
    assert abs(drawn["new"] / 5000 - 0.8) < 0.03  # weights 1 : 1/4


def _mean_draws_per_sample(new: int, requested: int, reuse: float, epochs: int, iterations: int = 60) -> float:
    """Steady state of a 4-iteration, power-1 buffer fed `new` fresh samples an iteration: how often each sample
    was drawn over its life (samples still in the buffer at the end are left out)."""
    buf: ReplayBuffer[tuple[int, int]] = ReplayBuffer(max_iterations=4, power=1.0, seed=0)
    drawn: collections.Counter = collections.Counter()
    for it in range(iterations):
        buf.add_iteration([(it, i) for i in range(new)])
        drawn.update(buf.draw(replay_draw_count(new, requested, reuse, epochs)))
    retired = [(it, i) for it in range(iterations - 4) for i in range(new)]
    return sum(drawn[k] for k in retired) / len(retired)


def test_replay_draw_keeps_each_samples_reuse_at_any_buffer_size():
    """WebGym trains each sample ~2 times (epochs included); its draw of 1,200-1,800 an iteration assumes
    about as many new samples. From 2 new samples a fixed draw of 64 trained each one 32 x epochs times in one
    iteration (the SmolLM2 local run that learned click [4] everywhere); the cap draws reuse x new / epochs."""
    assert replay_draw_count(2, 64, reuse=2.0, epochs=2) == 2
    assert replay_draw_count(2, 64) == 64  # no cap: the fixed draw
    assert replay_draw_count(0, 64, reuse=2.0, epochs=2) == 0  # nothing new: the old samples had their share
    assert replay_draw_count(3, 64, reuse=2.0, epochs=4) == 2  # ceil(1.5)
    assert replay_draw_count(3000, 1500, reuse=2.0, epochs=2) == 3000  # at least the new samples, as before
    assert replay_draw_count(1000, 1500, reuse=3.0, epochs=2) == 1500  # the cap (1,500) allows the full draw
    # over a sample's life in the buffer it is drawn reuse / epochs times on average, whatever the draw asked
    assert _mean_draws_per_sample(new=2, requested=64, reuse=2.0, epochs=2) == pytest.approx(1.0, abs=0.2)
    assert _mean_draws_per_sample(new=50, requested=1500, reuse=3.0, epochs=1) == pytest.approx(3.0, abs=0.1)
    assert _mean_draws_per_sample(new=2, requested=64, reuse=0.0, epochs=2) == pytest.approx(32.0, abs=2.0)


def test_task_sampler_learnability_follows_reward_variance():
    """Weights are max(floor, p (1 - p)) of each task's recent success rate: a task the policy always or
    never solves is drawn at the floor, one it solves half the time at 0.25, an unseen one as p = 0.5."""
    tasks = [_T("solved", "any"), _T("hopeless", "any"), _T("half", "any"), _T("new", "any")]
    sampler = TaskSampler(tasks, seeds=[1, 2, 3], seed=0, learnability=True, window=8, floor=0.05)
    sampler.record("solved", [True] * 8)
    sampler.record("hopeless", [False] * 8)
    sampler.record("half", [True, False] * 4)
    assert [sampler.weight(t) for t in tasks] == pytest.approx([0.05, 0.05, 0.25, 0.25])
    draws = collections.Counter(next(sampler)[0].task_id for _ in range(6000))
    assert abs(draws["half"] / 6000 - 0.25 / 0.6) < 0.03 and abs(draws["solved"] / 6000 - 0.05 / 0.6) < 0.02
    sampler.record("solved", [False] * 4)  # the window keeps the last 8: 4 successes, 4 failures
    assert sampler.weight(tasks[0]) == pytest.approx(0.25)
    uniform = TaskSampler(tasks, seeds=[1], seed=0)
    uniform.record("solved", [True] * 8)
    assert uniform.weight(tasks[0]) == 1.0
    with pytest.raises(ValueError, match="floor"):
        TaskSampler(tasks, seeds=[1], learnability=True, floor=0.0)


def test_per_operation_limits_hold_for_every_operation(policy, suite):
    """WebGym's separate pools: with a limit of 1 on each of allocate, navigate, execute, observe, evaluate,
    release and generate, 3 groups of 2 played together never have two of one operation in flight, and
    every operation ran (measured peaks, not assumed)."""
    from jaxwebrl.agent.limits import OPERATIONS

    cfg, params, tok = policy
    limits = {f"limit_{op}": 1 for op in OPERATIONS}

    async def go():
        async with pool_and_engine(cfg, params, tok, contexts=6, slots=6) as (pool, engine):
            col = Collector(pool, engine, tok, ENV, AGENT,
                            RolloutConfig(group_size=2, max_concurrent_groups=3, **limits))
            tasks = iter([(suite.get_task(t), 0) for t in suite.task_ids("all")])
            groups = [g async for g in col.stream(tasks, lambda task: AGENT)]
            return groups, col.limits.peak

    groups, peak = asyncio.run(go())
    assert len(groups) == 3 and all(len(g.trajectories) == 2 for g in groups)
    assert peak == {op: 1 for op in OPERATIONS}
