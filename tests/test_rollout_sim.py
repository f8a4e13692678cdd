"""The discrete-event model of collection (jaxwebrl.rollout.sim) against cases computed independently."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from jaxwebrl.rollout.sim import Workload, simulate


def fixed(n_steps: int):
    return lambda rng, n: np.full(n, n_steps)


def test_without_variance_or_contention_the_barriers_cost_nothing():
    w = Workload(episodes=64, envs=8, cpus=1000, cpu_s=0.1, gen_s=0.2, gpu_slots=1000, latency_median_s=1.0,
                 latency_p90_s=1.0, latency_max_s=1.0, lengths=fixed(3))
    per_episode = (0.1 + 1.0) + 3 * (0.2 + 0.1 + 1.0)  # reset, then three steps
    for mode in ("async", "lockstep"):
        r = simulate(w, mode)
        assert r.steps == 64 * 3
        assert r.wall_s == pytest.approx(8 * per_episode)


def test_lockstep_pays_the_slowest_page_of_every_step():
    """Waiting only (no CPU or inference cost), computed independently: lock-step time is the sum over steps of
    the slowest of the environments' waits; asynchronous time is list scheduling, every episode (the sum of
    its own waits) going to the environment that frees first."""
    import heapq

    n_env, steps, batches = 32, 4, 6
    w = Workload(episodes=n_env * batches, envs=n_env, cpus=1e9, cpu_s=0.0, gen_s=0.0, gpu_slots=10**6,
                 latency_median_s=1.0, latency_p90_s=3.0, latency_max_s=20.0, lengths=fixed(steps))
    sigma = math.log(3.0) / 1.2815515655446004
    rng = np.random.default_rng(1)
    waits = lambda *shape: np.minimum(20.0, np.exp(sigma * rng.standard_normal(shape)))  # noqa: E731
    lock_ref = np.mean([waits(batches * (steps + 1), n_env).max(axis=1).sum() for _ in range(200)])
    async_ref = []
    for _ in range(200):
        free = [0.0] * n_env
        for episode in waits(n_env * batches, steps + 1).sum(axis=1):  # the reset is a page wait too
            heapq.heappush(free, heapq.heappop(free) + episode)
        async_ref.append(max(free))
    lock = np.mean([simulate(dataclasses.replace(w, seed=s), "lockstep").wall_s for s in range(20)])
    asyn = np.mean([simulate(dataclasses.replace(w, seed=s), "async").wall_s for s in range(20)])
    assert lock == pytest.approx(lock_ref, rel=0.05)
    assert asyn == pytest.approx(np.mean(async_ref), rel=0.05)
    assert lock / asyn > 2.5  # the barrier's price under this tail


def test_cpu_bound_work_takes_its_cpu_time_in_either_mode():
    w = Workload(episodes=8, envs=4, cpus=1, cpu_s=1.0, gen_s=0.0, gpu_slots=100, latency_median_s=0.001,
                 latency_p90_s=0.001, latency_max_s=0.001, lengths=fixed(3))
    for mode in ("async", "lockstep"):
        r = simulate(w, mode)
        assert r.wall_s == pytest.approx(8 * 4 * 1.0, rel=0.01)  # 8 episodes x (reset + 3 steps) x 1 CPU-second
        assert r.cpu_busy == pytest.approx(1.0, rel=0.01)
    half = simulate(dataclasses.replace(w, cpus=0.5), "async")  # half a core (a loaded machine): twice as long
    assert half.wall_s == pytest.approx(2 * 8 * 4 * 1.0, rel=0.01)


def test_inference_holds_its_slots_and_queues_the_rest():
    # 4 environments ask at once; 2 requests in flight at most, 1 s each: the step takes two waves
    w = Workload(episodes=4, envs=4, cpus=100, cpu_s=0.0, gen_s=1.0, gpu_slots=2, latency_median_s=0.001,
                 latency_p90_s=0.001, latency_max_s=0.001, lengths=fixed(1))
    for mode in ("async", "lockstep"):
        r = simulate(w, mode)
        assert r.wall_s == pytest.approx(2.002) and r.gen_busy == pytest.approx(2.0 / 2.002)
    with pytest.raises(ValueError, match="mode 'sync'"):
        simulate(w, "sync")
