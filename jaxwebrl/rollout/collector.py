"""Many episodes at once, in groups of G trajectories per task, with no global barrier.

Each trajectory of a group runs in its own browser context; episodes advance independently; the engine
batches whatever requests are waiting. A group leaves for training as soon as its last trajectory ends
(`stream` yields groups in completion order, refilling the freed capacity at once). Groups whose oldest token
is more than `max_policy_lag` weight updates behind the policy they will train (`policy_lag`) are dropped as
they finish (off-policy limit). `mode="lockstep"`
keeps the classic synchronous loop (all environments step together, wait for the slowest, next batch only
when the whole batch ended) as the benchmark baseline.

`collect_scheduled` is the deterministic schedule (`rl.schedule='deterministic'`): group i of a round is
fixed by the caller's schedule (task, seed, group id, each member's sampling seed), groups still play
concurrently, but the round is the shortest prefix 0..j of the schedule that holds `num_groups` accepted
groups (or all `max_groups`), returned in schedule order: which groups train, and in what order, never
depends on which finished first. Groups started past the prefix are cancelled and discarded.

An optional `scorer` (an async per-episode hook, e.g. `jaxwebrl.judges.EpisodeScorer` for a judged reward)
runs inside each episode's own task the moment the episode ends and its browser context is closed, so the
group is handed over already scored (dynamic sampling sees judged rewards) and scoring one episode overlaps
with its siblings still playing; its time is the episode's `judge` timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from transformers import PreTrainedTokenizerBase

from jaxwebrl.agent.episode import AgentConfig, EpisodeResult, run_episode
from jaxwebrl.agent.limits import LockstepBarrier, OperationLimits
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.browser.task import Task
from jaxwebrl.data.records import Trajectory
from jaxwebrl.engines.base import Engine
from jaxwebrl.rollout.config import RolloutConfig

@dataclasses.dataclass
class Group:
    """G trajectories of one task instance, collected together."""

    task_id: str
    seed: int
    group_id: str
    episodes: list[EpisodeResult]
    started: float
    finished: float

    @property
    def trajectories(self) -> list:
        return [e.trajectory for e in self.episodes]

    @property
    def rewards(self) -> list[float]:
        return [e.trajectory.reward for e in self.episodes]

    @property
    def policy_version(self) -> int:
        return min(e.trajectory.policy_version for e in self.episodes)


@dataclasses.dataclass
class CollectStats:
    groups: int = 0
    dropped_stale: int = 0
    rejected: int = 0
    episodes: int = 0
    successes: int = 0  # over every episode played, accepted or not (the policy's sampled success rate)
    # episodes the infrastructure ended (a browser crashed or its server was lost): masked, and neither a
    # success nor a failure of the policy
    env_errors: int = 0
    wall_s: float = 0.0
    time: dict[str, float] = dataclasses.field(default_factory=dict)

    def add(self, group: Group) -> None:
        self.episodes += len(group.episodes)
        self.successes += sum(bool(e.success) for e in group.episodes)
        self.env_errors += sum(is_env_error(e.trajectory) for e in group.episodes)
        for e in group.episodes:
            for k, v in e.timings.items():
                self.time[k] = self.time.get(k, 0.0) + v

    @property
    def success_rate(self) -> float:
        """Successes over the episodes the policy played to an outcome (env_error episodes left out)."""
        return self.successes / max(1, self.episodes - self.env_errors)


def is_env_error(trajectory: Trajectory) -> bool:
    """Whether the infrastructure, not the policy, ended the episode (browser crashed, hung or lost)."""
    return trajectory.termination == "env_error"


@dataclasses.dataclass(frozen=True)
class ScheduledGroup:
    """Group `index` of a round's logical schedule: what it plays and the seeds its members sample with."""

    index: int
    task: Task
    seed: int
    group_id: str
    sample_seeds: tuple[int, ...]  # one per member: its engine requests are seeded from it (and the turn)
    agent: AgentConfig | None = None


@dataclasses.dataclass
class ScheduledRound:
    """The played prefix of a round's schedule, in schedule order, with which groups were accepted."""

    groups: list[Group]
    accepted: list[bool]
    stats: CollectStats
    cancelled: int  # groups started past the prefix and discarded (a throughput figure: it depends on timing)


TaskStream = Iterator[tuple[Task, int]]
# scorer(trajectory): scores one finished episode in place (reward inputs, termination, masks); never raises.
EpisodeScorer = Callable[[Trajectory], Awaitable[Any]]


class Collector:
    """Runs groups of episodes against one pool and one engine."""

    def __init__(
        self,
        pool: BrowserPool,
        engine: Engine,
        tokenizer: PreTrainedTokenizerBase,
        env_config: EnvConfig,
        agent: AgentConfig,
        rollout: RolloutConfig,
        policy_version: Callable[[], int] = lambda: 0,
        scorer: EpisodeScorer | None = None,
        policy_lag: Callable[[int], int] | None = None,
    ):
        """`policy_version()` is the version new episodes start on; `policy_lag(version)` how many weight
        updates separate `version` from the policy a group finishing now will train (default: the difference
        of the two versions, for callers that count versions one per update)."""
        agent.validate()
        self.scorer = scorer
        self.pool, self.engine, self.tokenizer = pool, engine, tokenizer
        self.env_config, self.agent, self.rollout = env_config, agent, rollout
        self.renderer = PromptRenderer(tokenizer)
        self.limits = OperationLimits(dict(rollout.limits))
        self.policy_version = policy_version
        self.policy_lag = policy_lag or (lambda version: self.policy_version() - version)
        self._group_counter = itertools.count()
        self._sample_seed = itertools.count(1)
        self.dropped_stale = 0

    async def _episode(
        self, task: Task, seed: int, group_id: str, agent: AgentConfig, barrier: LockstepBarrier | None,
        sample_seed: int | None = None, episode_id: str | None = None,
    ) -> EpisodeResult:
        async with self.limits.slot("allocate"):
            env = await self.pool.new_env(self.env_config, observe_slot=self.limits.slot_for("observe"))
        if sample_seed is None and not agent.greedy:
            sample_seed = next(self._sample_seed)
        try:
            result = await run_episode(
                env, self.engine, self.tokenizer, task, seed, agent, renderer=self.renderer, limits=self.limits,
                group_id=group_id, sample_seed=None if agent.greedy else sample_seed,
                policy_version=self.policy_version(), barrier=barrier, episode_id=episode_id,
            )
        finally:
            async with self.limits.slot("release"):
                await env.close()
        if self.scorer is not None:  # judged now, while the group's other episodes still play
            t0 = time.perf_counter()
            await self.scorer(result.trajectory)
            result.timings["judge"] = time.perf_counter() - t0
        return result

    async def run_group(
        self, task: Task, seed: int, agent: AgentConfig | None = None, size: int | None = None,
        barrier: LockstepBarrier | None = None,
    ) -> Group:
        """G episodes of the same task instance, each in its own context, concurrently."""
        agent = agent or self.agent
        size = size or self.rollout.group_size
        group_id = f"{task.task_id}/{seed}/{next(self._group_counter)}"
        t0 = time.perf_counter()
        episodes = await asyncio.gather(*(self._episode(task, seed, group_id, agent, barrier) for _ in range(size)))
        return Group(task.task_id, seed, group_id, list(episodes), t0, time.perf_counter())

    async def run_scheduled(self, group: ScheduledGroup) -> Group:
        """One scheduled group: its members' sampling seeds and episode ids are the schedule's."""
        agent = group.agent or self.agent
        t0 = time.perf_counter()
        episodes = await asyncio.gather(*(
            self._episode(group.task, group.seed, group.group_id, agent, None, sample_seed=s,
                          episode_id=f"{group.group_id}/{m}")
            for m, s in enumerate(group.sample_seeds)))
        return Group(group.task.task_id, group.seed, group.group_id, list(episodes), t0, time.perf_counter())

    async def collect_scheduled(
        self, schedule: Callable[[int], ScheduledGroup], num_groups: int,
        accept: Callable[[Group], bool] = lambda g: True, max_groups: int | None = None,
    ) -> ScheduledRound:
        """The deterministic round (module doc): groups `schedule(0)`, `schedule(1)`, ... played
        `max_concurrent_groups` at a time and started in index order, until a finished prefix 0..j of the
        schedule holds `num_groups` accepted groups or all `max_groups` (default 4x) finished. `accept(group)`
        must depend on that group alone (it runs as each group finishes)."""
        limit = max_groups or num_groups * 4
        t0 = time.perf_counter()
        finished: dict[int, tuple[Group, bool]] = {}
        running: dict[asyncio.Future[Group], int] = {}
        started = 0

        def prefix_end() -> int | None:
            """The end of the round's prefix, once it is decided (every group in it finished)."""
            kept = 0
            for i in range(limit):
                if i not in finished:
                    return None
                kept += finished[i][1]
                if kept >= num_groups:
                    return i + 1
            return limit

        try:
            end = None
            while end is None:
                while started < limit and len(running) < self.rollout.max_concurrent_groups:
                    running[asyncio.ensure_future(self.run_scheduled(schedule(started)))] = started
                    started += 1
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    group = fut.result()
                    finished[running.pop(fut)] = (group, accept(group))
                end = prefix_end()
        finally:
            for fut in running:
                fut.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        played = [finished[i] for i in range(end)]
        stats = CollectStats()
        for group, ok in played:
            stats.groups += 1
            stats.add(group)
            stats.rejected += not ok
        stats.wall_s = time.perf_counter() - t0
        return ScheduledRound([g for g, _ in played], [ok for _, ok in played], stats,
                              cancelled=len(running) + len(finished) - end)

    async def stream(
        self, tasks: TaskStream, agent_for: Callable[[Task], AgentConfig] | None = None
    ) -> AsyncIterator[Group]:
        """Yield groups as each one completes; keeps `max_concurrent_groups` in flight until `tasks` runs out.
        Stale groups (off-policy limit) are dropped here."""
        if self.rollout.mode == "lockstep":
            async for g in self._stream_lockstep(tasks, agent_for):
                yield g
            return
        running: set[asyncio.Task[Group]] = set()
        exhausted = False

        def refill() -> None:
            nonlocal exhausted
            while not exhausted and len(running) < self.rollout.max_concurrent_groups:
                try:
                    task, seed = next(tasks)
                except StopIteration:
                    exhausted = True
                    return
                agent = agent_for(task) if agent_for else None
                running.add(asyncio.ensure_future(self.run_group(task, seed, agent)))

        refill()
        try:
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                fresh = []
                for fut in done:
                    running.discard(fut)
                    group = fut.result()
                    if self.policy_lag(group.policy_version) > self.rollout.max_policy_lag:
                        self.dropped_stale += 1
                    else:
                        fresh.append(group)
                refill()  # after counting the stale ones: they do not use up a `collect` budget
                for group in fresh:
                    yield group
        finally:
            for fut in running:
                fut.cancel()

    async def _stream_lockstep(
        self, tasks: TaskStream, agent_for: Callable[[Task], AgentConfig] | None
    ) -> AsyncIterator[Group]:
        while True:
            batch = list(itertools.islice(tasks, self.rollout.max_concurrent_groups))
            if not batch:
                return
            barrier = LockstepBarrier(len(batch) * self.rollout.group_size)
            groups = await asyncio.gather(*(
                self.run_group(t, s, agent_for(t) if agent_for else None, barrier=barrier) for t, s in batch
            ))
            for g in groups:
                yield g

    async def collect(
        self,
        tasks: TaskStream,
        num_groups: int,
        accept: Callable[[Group], bool] = lambda g: True,
        max_groups: int | None = None,
        agent_for: Callable[[Task], AgentConfig] | None = None,
    ) -> tuple[list[Group], CollectStats]:
        """Collect until `num_groups` groups pass `accept` (dynamic sampling) or `max_groups` were tried
        (groups dropped as stale are played again and do not count)."""
        stats, kept, t0 = CollectStats(), [], time.perf_counter()
        stale_before = self.dropped_stale
        limit = max_groups or num_groups * 4

        def budget() -> Iterator[tuple[Task, int]]:
            started = 0
            while started < limit + self.dropped_stale - stale_before:
                try:
                    yield next(tasks)
                except StopIteration:
                    return
                started += 1

        stream = self.stream(budget(), agent_for)
        try:
            async for group in stream:
                stats.groups += 1
                stats.add(group)
                if accept(group):
                    kept.append(group)
                    if len(kept) >= num_groups:
                        break
                else:
                    stats.rejected += 1
        finally:
            await stream.aclose()
        stats.wall_s = time.perf_counter() - t0
        stats.dropped_stale = self.dropped_stale - stale_before
        return kept, stats
