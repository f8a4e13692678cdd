"""The benchmarks' one timing helper. Every comparison times its sides with these, so each side's clock
starts and stops at the same place:

- `call_timed(fn)` / `await_timed(awaitable)`: seconds of one call (or awaited run) and its result;
- `per_step(step, n, warmup)`: seconds per call of a one-step callable after untimed warm-up calls;
- interleaved rounds: the sides of a comparison take turns (`alternate`, order reversed every round), so
  load from other jobs on a shared machine hits every side alike and their ratio stays meaningful
  (`summary`). A side is a callable `run(n) -> seconds for n steps` (`timed` makes one from a one-step
  callable); a side that needs another interpreter (Tunix's venv) runs in a `Worker` process that times
  its steps when asked (`serve`).

Worker protocol (lines on the child's stdin/stdout; other output is ignored):
  child -> parent  `BENCH-WORKER READY <json>`      after setup and warm-up (json: anything to report)
  parent -> child  `RUN <n>`                        child -> parent `BENCH-WORKER TIME <seconds>`
  parent -> child  `EXIT`
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar

PREFIX = "BENCH-WORKER "
T = TypeVar("T")


def call_timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds one call of `fn` takes (it must block until its result is ready), and the result."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


async def await_timed(run: Awaitable[T]) -> tuple[float, T]:
    """Seconds from now until `run` (a coroutine not yet started) completes, and its result."""
    t0 = time.perf_counter()
    out = await run
    return time.perf_counter() - t0, out


def per_step(step: Callable[[], Any], n: int, warmup: int = 1) -> float:
    """Seconds per call of `step` over `n` timed calls, after `warmup` untimed ones (compiles, caches)."""
    for _ in range(warmup):
        step()
    return timed(step)(n) / n


def timed(step: Callable[[], Any]) -> Callable[[int], float]:
    """A side from a one-step callable (which must block until its result is ready)."""

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return time.perf_counter() - t0

    return run


def serve(step: Callable[[], Any], info: Mapping[str, Any] | None = None) -> None:
    """Child side of a Worker: announce readiness, then time `n` calls of `step` per RUN request."""
    run = timed(step)
    print(PREFIX + "READY " + json.dumps(dict(info or {})), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "EXIT":
            return
        if cmd[0] == "RUN":
            print(PREFIX + f"TIME {run(int(cmd[1]))!r}", flush=True)


class Worker:
    """A benchmark side in another process (e.g. another venv's interpreter) that serves timing requests."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None):
        from jaxwebrl.procs import start_group  # the parent's side only: the worker's venv may lack jaxwebrl

        self.argv = list(argv)
        self.proc = start_group(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=None if env is None else dict(env))
        self.info: dict[str, Any] = json.loads(self._expect("READY"))

    def _expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PREFIX + word):
                return line[len(PREFIX + word):].strip()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        tail = err.strip().splitlines()[-1] if err.strip() else "no output"
        raise RuntimeError(f"benchmark worker {self.argv[:2]} exited (rc {self.proc.wait()}) before {word}: {tail}")

    def __call__(self, n: int) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"RUN {n}\n")
        self.proc.stdin.flush()
        return float(self._expect("TIME"))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("EXIT\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                from jaxwebrl.procs import stop_group

                stop_group(self.proc, grace_s=10)  # the worker and anything it started


def alternate(sides: Mapping[str, Callable[[int], float]], rounds: int, steps: int) -> dict[str, list[float]]:
    """Seconds per step of every side in every round; the sides take turns, order reversed each round."""
    names = list(sides)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names if r % 2 == 0 else names[::-1]:
            out[n].append(sides[n](steps) / steps)
    return out


def summary(times: Mapping[str, list[float]], ours: str, other: str) -> dict[str, float]:
    """Median seconds per step of each side and the median over rounds of the per-round speed ratio
    (other's time / ours: > 1 means ours is faster), the figure robust to load that changes between rounds."""
    ratios = [o / u for u, o in zip(times[ours], times[other])]
    return {f"{ours}_step_s": statistics.median(times[ours]), f"{other}_step_s": statistics.median(times[other]),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
