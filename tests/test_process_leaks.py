"""The session's leak check (tests/process_leaks.py, run by conftest at the session's end) sees what issue 45's
leak was: a wrapper killed alone, its child orphaned (parent 1) and still running. Here the wrapper is a
Python process that starts `sleep` as its child, as `playwright run-server`'s wrapper starts Node."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import process_leaks

WRAPPER = "import subprocess, sys; c = subprocess.Popen(['sleep', '300']); print(c.pid, flush=True); c.wait()"


def test_an_orphaned_child_of_a_killed_wrapper_is_found_and_killed():
    marker = os.environ[process_leaks.MARKER_VAR]
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER], stdout=subprocess.PIPE, text=True)
    assert wrapper.stdout is not None
    child = int(wrapper.stdout.readline())
    wrapper.kill()  # the old test's mistake: the wrapper ends, its child lives on
    wrapper.wait(10)
    wrapper.stdout.close()
    try:
        found = {p.pid: p for p in process_leaks.session_processes(os.getpid(), marker)}
        assert child in found, found
        assert found[child].cmdline == "sleep 300" and found[child].ppid != wrapper.pid
        process_leaks.kill([found[child]])
        deadline = time.monotonic() + 10  # a safety limit: the SIGKILLed process leaves the list when it is reaped
        while child in {p.pid for p in process_leaks.session_processes(os.getpid(), marker)}:
            assert time.monotonic() < deadline, f"pid {child} still running after SIGKILL"
            time.sleep(0.05)
    finally:
        try:
            os.kill(child, 9)
        except ProcessLookupError:
            pass


def test_a_process_outside_the_session_is_not_counted():
    """Without the marker in its environment and not below pytest, a process is someone else's."""
    env = {k: v for k, v in os.environ.items() if k != process_leaks.MARKER_VAR}
    other = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    try:
        # Still our child by parent chain: counted. The marker alone is checked with a fake root below.
        assert other.pid in {p.pid for p in process_leaks.session_processes(os.getpid(), "no-such-marker")}
        assert other.pid not in {p.pid for p in process_leaks.session_processes(-1, os.environ[process_leaks.MARKER_VAR])}
    finally:
        other.kill()
        other.wait(10)
