"""Per-operation concurrency limits (WebGym): allocating a browser context, navigating (reset), executing
actions, observing (snapshot, text, screenshot), evaluating, releasing the context and generating each get
their own semaphore, so a burst of one operation type cannot starve the others."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncContextManager, AsyncIterator, Callable, Mapping

OPERATIONS = ("allocate", "navigate", "execute", "observe", "evaluate", "release", "generate")


class OperationLimits:
    """`async with limits.slot("generate"): ...`; a limit of 0 (or a missing one) means unlimited."""

    def __init__(self, limits: Mapping[str, int] | None = None):
        limits = dict(limits or {})
        unknown = set(limits) - set(OPERATIONS)
        if unknown:
            raise ValueError(f"unknown operation(s) {sorted(unknown)} in concurrency limits; use {OPERATIONS}")
        self.limits = limits
        self._sems = {op: asyncio.Semaphore(n) for op, n in limits.items() if n and n > 0}
        self.in_flight = {op: 0 for op in OPERATIONS}
        self.peak = {op: 0 for op in OPERATIONS}

    def slot_for(self, op: str) -> Callable[[], AsyncContextManager[None]]:
        """A zero-argument factory of `slot(op)` (what a browser env takes for its observations)."""
        return lambda: self.slot(op)

    @contextlib.asynccontextmanager
    async def slot(self, op: str) -> AsyncIterator[None]:
        sem = self._sems.get(op)
        if sem is not None:
            await sem.acquire()
        self.in_flight[op] += 1
        self.peak[op] = max(self.peak[op], self.in_flight[op])
        try:
            yield
        finally:
            self.in_flight[op] -= 1
            if sem is not None:
                sem.release()


class LockstepBarrier:
    """Lock-step baseline (benchmark only): every live episode waits here each turn until all live episodes
    arrive, so all generate together and the step waits for the slowest. Episodes `leave` when they end."""

    def __init__(self, parties: int):
        self.parties = parties
        self._arrived = 0
        self._event = asyncio.Event()

    async def wait(self) -> None:
        self._arrived += 1
        event = self._event
        self._maybe_release()
        await event.wait()

    def leave(self) -> None:
        self.parties -= 1
        self._maybe_release()

    def _maybe_release(self) -> None:
        if self._arrived >= self.parties and self._arrived > 0:
            self._event.set()
            self._event = asyncio.Event()
            self._arrived = 0
