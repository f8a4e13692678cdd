"""Wall time per stage of a run, summed over every process that worked on its directory.

A run is stopped and resumed (a session ends, a machine is preempted): its report's stage times must still be
the whole run's. Laps are saved to `<workdir>/stage_seconds.json` when a stage ends, and the stage that is
running is saved every `flush_s` seconds by a thread, so a process killed mid-stage loses at most that much
of it (before, a killed RL stage lost all of its iterations: RESULTS.md, "Twice the RL on the named config").
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import TracebackType

STAGE_SECONDS = "stage_seconds.json"


class StageClock:
    """`now_in(stage)` says which stage the time from now on belongs to; `lap(stage)` ends it and returns its
    total. Use as a context manager, which starts and stops the saving thread."""

    def __init__(self, work: Path, flush_s: float = 30.0):
        self.path = Path(work) / STAGE_SECONDS
        self.seconds: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.flush_s = flush_s
        self.running: str | None = None
        self._t = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="stage-clock", daemon=True)

    def __enter__(self) -> "StageClock":
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:  # a stage left running by an error keeps the time it ran
            if self.running is not None:
                self._credit(self.running)

    def now_in(self, stage: str) -> None:
        """From now on the time is `stage`'s (the stage running until now gets its time so far)."""
        with self._lock:
            if self.running is not None:
                self._credit(self.running)
            else:
                self._t = time.time()
            self.running = stage

    def lap(self, stage: str) -> float:
        """Adds the time since the last save to `stage` and ends it; returns the stage's total."""
        with self._lock:
            self._credit(stage)
            self.running = None
            return self.seconds[stage]

    def _credit(self, stage: str) -> None:
        now = time.time()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._t
        self._t = now
        tmp = self.path.with_name(f".{self.path.name}.tmp")  # a kill mid-write leaves the last whole file
        tmp.write_text(json.dumps(self.seconds))
        os.replace(tmp, self.path)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_s):
            with self._lock:
                if self.running is not None:
                    self._credit(self.running)
