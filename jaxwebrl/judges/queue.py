"""JudgeQueue: judge each episode as soon as it ends, under the queue's own concurrency limit, no barrier.

The rollout loop calls `submit(trajectory)` when an episode finishes and keeps rolling out; verdicts come back
in completion order from `results()` (or all at once from `join()`). Judging therefore overlaps with the
episodes still running (WebGym's no-barrier rule applied to the judge). The limit here bounds episodes being
judged at once; `JudgeOptions.concurrency` separately bounds model calls (a WebGym rubric makes one call per
fact). A judge that raises despite the protocol still yields a judge_error verdict.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable, Iterable

from jaxwebrl.data.records import Trajectory
from jaxwebrl.judges.base import Judge, Verdict, judge_error


class JudgeQueue:
    def __init__(self, judge: Judge, concurrency: int = 8,
                 on_verdict: Callable[[Trajectory, Verdict], None] | None = None, keep_results: bool = True) -> None:
        """`on_verdict` runs the moment each verdict is ready (e.g. write the reward into the trajectory).
        `keep_results=False`: callers await `submit`'s task instead of `results()`, and nothing is kept (a
        long run's rollout loop would otherwise hold every judged trajectory)."""
        if concurrency < 1:
            raise ValueError(f"JudgeQueue concurrency={concurrency}: must be >= 1")
        self.judge = judge
        self.on_verdict = on_verdict
        self.concurrency = concurrency
        self._sem: asyncio.Semaphore | None = None
        self._done: asyncio.Queue[tuple[Trajectory, Verdict]] | None = None
        self._tasks: set[asyncio.Task[Verdict]] = set()
        self.submitted = 0
        self.finished = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.judge_errors = 0
        self.keep_results = keep_results
        self._yielded = 0

    def _loop_state(self) -> tuple[asyncio.Semaphore, asyncio.Queue[tuple[Trajectory, Verdict]]]:
        if self._sem is None or self._done is None:
            self._sem, self._done = asyncio.Semaphore(self.concurrency), asyncio.Queue()
        return self._sem, self._done

    def submit(self, trajectory: Trajectory) -> "asyncio.Task[Verdict]":
        """Start judging `trajectory` now (waiting only for a free slot); returns the task of its verdict."""
        task = asyncio.get_running_loop().create_task(self._run(trajectory))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.submitted += 1
        return task

    async def _run(self, trajectory: Trajectory) -> Verdict:
        sem, done = self._loop_state()
        async with sem:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                verdict = await self.judge.judge(trajectory)
            except Exception as exc:  # noqa: BLE001 - a judge bug must not end the run
                verdict = judge_error("engine_error", f"judge raised {type(exc).__name__}: {exc}")
            finally:
                self.in_flight -= 1
        self.finished += 1
        self.judge_errors += verdict.error is not None
        if self.on_verdict is not None:
            self.on_verdict(trajectory, verdict)
        if self.keep_results:
            await done.put((trajectory, verdict))
        return verdict

    @property
    def pending(self) -> int:
        return self.submitted - self.finished

    async def results(self) -> AsyncIterator[tuple[Trajectory, Verdict]]:
        """(trajectory, verdict) in completion order, until every episode submitted so far has been yielded
        (episodes submitted while iterating are included); each result is yielded once."""
        if not self.keep_results:
            raise RuntimeError("this JudgeQueue keeps no results (keep_results=False); await submit()'s task")
        _, done = self._loop_state()
        while self._yielded < self.submitted:
            item = await done.get()
            self._yielded += 1
            yield item

    async def join(self) -> list[tuple[Trajectory, Verdict]]:
        return [item async for item in self.results()]


async def rollout_and_judge(episodes: Iterable[Awaitable[Trajectory]], queue: JudgeQueue) -> list[tuple[Trajectory, Verdict]]:
    """Run episode coroutines concurrently and submit each to `queue` the moment it ends; all verdicts."""
    async def one(ep: Awaitable[Trajectory]) -> None:
        queue.submit(await ep)

    await asyncio.gather(*(one(e) for e in episodes))
    return await queue.join()
