"""Router: one Engine in front of several, so rollouts scale out to many SGLang servers (DESIGN.md 6).

Placement: a request with a `session_id` (an episode) goes where that session went before, so the
server's prefix (radix) cache holds the earlier turns; otherwise, and for a session's first request, the
engine with the fewest outstanding requests wins (ties go round-robin). An engine that is unreachable
is skipped until it answers `health()` again, and its sessions move elsewhere.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any, Sequence

from jaxwebrl.engines.base import Engine, EngineUnavailableError, Generation, ImageInput, SamplingParams, WeightsSource


class Router:
    """Least-outstanding-requests routing with per-session stickiness; implements `Engine`."""

    def __init__(self, engines: Sequence[Engine], *, max_sessions: int = 100_000, name: str = "router") -> None:
        if not engines:
            raise ValueError("Router needs at least one engine")
        self.engines = list(engines)
        self.name = name
        self.outstanding = [0] * len(self.engines)
        self.routed = [0] * len(self.engines)
        self.down: set[int] = set()
        self._sessions: collections.OrderedDict[str, int] = collections.OrderedDict()
        self._max_sessions = max_sessions
        self._rr = itertools.count()
        self._latest: tuple[WeightsSource, int] | None = None

    def pick(self, session_id: str | None = None) -> int:
        """Index of the engine for the next request of `session_id` (and remember it for the session)."""
        up = [i for i in range(len(self.engines)) if i not in self.down]
        if not up:
            raise EngineUnavailableError(f"router {self.name!r}: all {len(self.engines)} engines are down")
        if session_id is not None and session_id in self._sessions and self._sessions[session_id] in up:
            self._sessions.move_to_end(session_id)
            return self._sessions[session_id]
        low = min(self.outstanding[i] for i in up)
        ties = [i for i in up if self.outstanding[i] == low]
        choice = ties[next(self._rr) % len(ties)]
        if session_id is not None:
            self._sessions[session_id] = choice
            self._sessions.move_to_end(session_id)
            while len(self._sessions) > self._max_sessions:  # oldest episodes are long finished
                self._sessions.popitem(last=False)
        return choice

    def end_session(self, session_id: str) -> None:
        """Forget an episode's placement once it is over."""
        self._sessions.pop(session_id, None)

    def session_engine(self, session_id: str) -> int | None:
        return self._sessions.get(session_id)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> Generation:
        """Route, and on EngineUnavailableError mark that engine down and try the next one."""
        while True:
            i = self.pick(session_id)
            self.outstanding[i] += 1
            self.routed[i] += 1
            try:
                extra = {"images": images} if images else {}  # text-only engines need not know the argument
                return await self.engines[i].generate(prompt_ids, params, session_id=session_id, **extra)
            except EngineUnavailableError:
                self.down.add(i)
                if session_id is not None:
                    self._sessions.pop(session_id, None)
            finally:
                self.outstanding[i] -= 1

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Every engine that is up, concurrently. An unreachable one is marked down and gets these weights
        when `health()` brings it back; any other error is raised after all have finished."""
        self._latest = (weights, version)
        up = [i for i in range(len(self.engines)) if i not in self.down]
        results = await asyncio.gather(*(self.engines[i].update_weights(weights, version) for i in up),
                                       return_exceptions=True)
        for i, r in zip(up, results):
            if isinstance(r, EngineUnavailableError):
                self.down.add(i)
            elif isinstance(r, BaseException):
                raise r
        if len(self.down) == len(self.engines):
            raise EngineUnavailableError(f"router {self.name!r}: no engine took weights version {version}")

    async def health(self) -> dict[str, Any]:
        """Health of every engine; brings engines that answer again back into rotation."""
        out: dict[str, Any] = {}
        for i, engine in enumerate(self.engines):
            try:
                out[engine.name] = await engine.health()
                if i in self.down and self._latest is not None:  # it missed updates while it was down
                    await engine.update_weights(*self._latest)
                self.down.discard(i)
            except EngineUnavailableError as exc:
                self.down.add(i)
                out[engine.name] = {"ok": False, "error": str(exc)}
        if len(self.down) == len(self.engines):
            raise EngineUnavailableError(f"router {self.name!r}: all engines are down: {out}")
        return {"ok": True, "engines": out, "outstanding": list(self.outstanding), "routed": list(self.routed)}

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines), return_exceptions=True)
