"""MiniWoB++ through the real pages: scripted correct bid actions succeed, wrong ones fail, seeds are
reproducible, splits are disjoint."""

from __future__ import annotations

import asyncio

import pytest

from envs import get_suite
from envs.miniwob import MiniWoBSuite
from envs.miniwob_solvers import SOLVABLE, plan, wrong_plan
from jaxwebrl.browser import EnvConfig

pytestmark = pytest.mark.timeout(240)
CFG = EnvConfig(action_space="bid")


async def run_plan(pool, suite, task: str, seed: int, wrong: bool) -> tuple[float, bool, str]:
    async with pool.episode(suite.get_task(f"miniwob.{task}"), seed, CFG) as (env, obs):
        acts = (wrong_plan if wrong else plan)(task, obs.goal, obs.elements)
        for a in acts:
            r = await env.step(a)
            assert not r.format_error, (task, a, r.feedback)
            if r.done:
                break
        ev = await env.evaluate()
        return ev.reward, ev.success, env.termination_reason or ""


@pytest.mark.parametrize("task", SOLVABLE)
def test_scripted_solutions(runner, pool, miniwob, task):
    async def go():
        results = await asyncio.gather(*(run_plan(pool, miniwob, task, seed, wrong) for seed in (1, 2)
                                         for wrong in (False, True)))
        for (reward, success, reason), (seed, wrong) in zip(results, [(s, w) for s in (1, 2) for w in (False, True)]):
            if wrong:
                assert not success, (task, seed, reward)
            else:
                assert success and reward >= 1.0 and reason == "task_done", (task, seed, reward)

    runner.run(go())


def test_same_seed_same_instance(runner, pool, miniwob):
    async def instance(task: str, seed: int) -> tuple[str, str]:
        async with pool.episode(miniwob.get_task(task), seed, CFG) as (env, obs):
            return obs.goal, obs.text

    async def go():
        for task in ("miniwob.click-checkboxes", "miniwob.choose-list", "miniwob.login-user"):
            a, b, c = await asyncio.gather(instance(task, 7), instance(task, 7), instance(task, 8))
            assert a == b
            assert a != c

    runner.run(go())


def test_timer_disabled_and_partial_reward(runner, pool, miniwob):
    async def go():
        async with pool.episode(miniwob.get_task("miniwob.click-button"), 3, CFG) as (env, obs):
            max_time = await env.session.page.evaluate("() => core.EPISODE_MAX_TIME")
            assert max_time >= 10**8
            assert not (await env.evaluate()).success  # nothing done yet

    runner.run(go())


def test_splits():
    suite = get_suite("miniwob")
    train, test = set(suite.task_ids("train")), set(suite.task_ids("test"))
    assert train and test and not train & test and len(train | test) == len(suite.task_ids())
    assert not set(MiniWoBSuite.seeds("train", 100)) & set(MiniWoBSuite.seeds("test", 100))
    with pytest.raises(ValueError, match="unknown MiniWoB"):
        MiniWoBSuite(tasks=["no-such-task"])
