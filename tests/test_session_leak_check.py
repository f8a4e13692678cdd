"""The session's leak check (tests/conftest.py) fails a run whose test leaves a process running, in one pytest
process and under xdist, where a worker finds the leak and the controller reports it and fails the run. Each case
runs pytest on a one-test file in a subprocess, with this suite's conftest loaded as a plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
LEAKING = '''
import subprocess

def test_starts_a_sleep_and_leaves_it():
    subprocess.Popen(["sleep", "300"], start_new_session=True)
'''
CLEAN = '''
import subprocess

def test_starts_a_sleep_and_ends_it():
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    proc.kill()
    proc.wait()
'''


def run_pytest(tmp_path: Path, body: str, processes: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_one.py").write_text(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "-n", processes, "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


# Under xdist the line names the worker that found the process; in one process it is the process alone.
@pytest.mark.parametrize("processes,line", [("0", "  pid "), ("2", " (in gw")])
def test_a_leaked_process_fails_the_run_and_is_named(tmp_path: Path, processes: str, line: str) -> None:
    out = run_pytest(tmp_path, LEAKING, processes)
    assert "1 passed" in out.stdout, out.stdout + out.stderr  # the test itself ran and passed
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, out.stdout + out.stderr
    assert "processes left running" in out.stdout, out.stdout
    (leak,) = [text for text in out.stdout.splitlines() if "sleep 300" in text]
    assert line in leak, leak


def test_a_run_that_ends_its_processes_passes_under_xdist(tmp_path: Path) -> None:
    out = run_pytest(tmp_path, CLEAN, "2")
    assert "1 passed" in out.stdout and out.returncode == 0, out.stdout + out.stderr
    assert "processes left running" not in out.stdout
