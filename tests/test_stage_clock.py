"""A run's stage times survive a killed process (jaxwebrl.main_job.stage_clock): the running stage is saved
while it runs, and a resumed process adds to what the killed one saved."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxwebrl.main_job import stage_clock
from jaxwebrl.main_job.stage_clock import STAGE_SECONDS, StageClock

ROOT = Path(__file__).resolve().parents[1]


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


def test_each_stage_gets_the_time_it_ran_and_gaps_between_stages_count_for_none(tmp_path, monkeypatch):
    fake = FakeTime()
    monkeypatch.setattr(stage_clock, "time", fake)
    with StageClock(tmp_path, flush_s=1e9) as clock:  # no flush inside the test: only the calls below move time
        clock.now_in("demonstrations")
        fake.now += 5
        assert clock.lap("demonstrations") == 5
        assert clock.running is None
        fake.now += 2  # between stages
        clock.now_in("bc")
        fake.now += 3
        clock.now_in("rl")  # the stage running until now gets its time
        fake.now += 4
        assert clock.lap("rl") == 4
        clock.now_in("eval")
        fake.now += 6
    # leaving the block with a stage running keeps its time (an error mid-stage)
    assert json.loads((tmp_path / STAGE_SECONDS).read_text()) == {"demonstrations": 5, "bc": 3, "rl": 4, "eval": 6}
    with StageClock(tmp_path, flush_s=1e9) as again:  # a resumed process adds to the saved totals
        again.now_in("eval")
        fake.now += 1
        assert again.lap("eval") == 7


def test_a_process_killed_mid_stage_keeps_the_time_it_ran(tmp_path):
    """SIGKILL during a stage, as a preempted machine or an ended session does: the last save of the running
    stage is on disk (before, the stage's whole time was lost with the process)."""
    code = (f"import sys, threading; sys.path.insert(0, {str(ROOT)!r})\n"
            "from jaxwebrl.main_job.stage_clock import StageClock\n"
            f"with StageClock({str(tmp_path)!r}, flush_s=0.05) as clock:\n"
            "    clock.now_in('rl')\n"
            "    threading.Event().wait()\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    path = tmp_path / STAGE_SECONDS
    try:
        deadline = time.time() + 120  # an upper bound for a loaded machine; the loop ends on the file's write
        while not (path.exists() and json.loads(path.read_text()).get("rl", 0) > 0.2) and time.time() < deadline:
            assert proc.poll() is None, "the clock's process ended on its own"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    saved = json.loads(path.read_text())["rl"]
    assert saved > 0.2
    assert not list(tmp_path.glob(".*.tmp"))  # replaced whole, never half-written
    resumed = StageClock(tmp_path)
    assert resumed.seconds["rl"] == pytest.approx(saved)
