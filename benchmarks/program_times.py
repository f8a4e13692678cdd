"""Where a JaxEngine's time goes, by program kind (prefill, decode, the prefix cache's page loads and stores,
row copies, cache resizes): every compiled program call is timed to completion, per kind.

    with ProgramTimes() as times:
        ...                      # run the engine
    times.snapshot()             # {'decode': (calls, seconds), 'prefill': (...), ...}

Each call is waited for (`jax.block_until_ready`) before the next starts, so the calls no longer overlap with
the host's work: the sum is an upper bound of the engine's device time, and a run timed this way is a
little slower than one that is not. `bench_engine.py --program-times` reports it per round beside the
untouched timing of the same round's work.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import jax

from jaxwebrl.engines import jax_programs


class ProgramTimes:
    """While active, counts the calls and the wall seconds to completion of every `CountedProgram`, per kind."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self._original: Any = None

    def __enter__(self) -> "ProgramTimes":
        original = self._original = jax_programs.CountedProgram.__call__
        times = self

        def timed(program: jax_programs.CountedProgram, *args: Any) -> Any:
            start = time.perf_counter()
            out = original(program, *args)
            jax.block_until_ready(out)
            kind = program.key[1]
            times.seconds[kind] += time.perf_counter() - start
            times.calls[kind] += 1
            return out

        jax_programs.CountedProgram.__call__ = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        jax_programs.CountedProgram.__call__ = self._original  # type: ignore[method-assign]

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """kind -> (calls, seconds) so far."""
        return {k: (self.calls[k], self.seconds[k]) for k in self.calls}


def since(before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    """The calls and seconds between two snapshots, per kind, largest time first."""
    out = {k: (n - before.get(k, (0, 0.0))[0], s - before.get(k, (0, 0.0))[1]) for k, (n, s) in after.items()}
    return dict(sorted(((k, v) for k, v in out.items() if v[0]), key=lambda kv: -kv[1][1]))


def describe(per_kind: dict[str, tuple[int, float]]) -> str:
    """'decode 99 x 146 ms = 14.5 s (48%), ...' for one run."""
    total = sum(s for _, s in per_kind.values()) or 1.0
    return ", ".join(f"{k} {n} x {1e3 * s / n:.0f} ms = {s:.1f} s ({100 * s / total:.0f}%)" for k, (n, s) in per_kind.items())
