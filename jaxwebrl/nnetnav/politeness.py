"""Politeness for live sites (NNetNav §4.1: at most 10 parallel instances, 0.5 s between actions, no logins).

`Politeness.instance(origin)` holds one of the origin's instance slots for a whole episode;
`Politeness.before_action(key)` waits until `min_interval_s` has passed since the previous action of that
instance. Every grant is recorded (origin, start time, instance count), so a test can measure the limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import AsyncIterator
from urllib.parse import urlsplit


def origin_of_task(task: object) -> str:
    """scheme://host:port of the task's first allowed origin (the task id when it names none)."""
    origins = getattr(task, "allowed_origins", lambda: ())()
    for o in origins:
        parts = urlsplit(o)
        if parts.netloc:
            return f"{parts.scheme}://{parts.netloc}"
    return str(getattr(task, "task_id", task))


@dataclasses.dataclass
class PolitenessLog:
    actions: list[tuple[str, str, float]] = dataclasses.field(default_factory=list)  # (origin, instance, time)
    peak_instances: dict[str, int] = dataclasses.field(default_factory=dict)

    def min_gap_s(self) -> float | None:
        """The smallest time between two consecutive actions of one instance (None: no instance acted twice)."""
        last: dict[str, float] = {}
        gaps = []
        for _, inst, t in self.actions:
            if inst in last:
                gaps.append(t - last[inst])
            last[inst] = t
        return min(gaps) if gaps else None


class Politeness:
    def __init__(self, max_instances_per_origin: int = 10, min_interval_s: float = 0.5) -> None:
        if max_instances_per_origin < 1:
            raise ValueError(f"max_instances_per_origin={max_instances_per_origin}: must be >= 1")
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s={min_interval_s}: must be >= 0")
        self.max_instances = max_instances_per_origin
        self.min_interval_s = min_interval_s
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._active: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self.log = PolitenessLog()

    @contextlib.asynccontextmanager
    async def instance(self, origin: str) -> AsyncIterator[None]:
        sem = self._sems.setdefault(origin, asyncio.Semaphore(self.max_instances))
        async with sem:
            self._active[origin] = self._active.get(origin, 0) + 1
            self.log.peak_instances[origin] = max(self.log.peak_instances.get(origin, 0), self._active[origin])
            try:
                yield
            finally:
                self._active[origin] -= 1

    async def before_action(self, origin: str, instance: str) -> None:
        """Sleep until this instance's previous action is `min_interval_s` old, then record this one."""
        last = self._last.get(instance)
        if last is not None:
            wait = last + self.min_interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        now = time.monotonic()
        self._last[instance] = now
        self.log.actions.append((origin, instance, now))
