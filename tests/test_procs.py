"""jaxwebrl.procs with real processes: stopping a server ends what it forked, and one that ignores SIGTERM."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from jaxwebrl.procs import group_alive, start_group, stop_group


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for the init process to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_stop_group_ends_the_child_the_leader_forked():
    """The shape of `playwright run-server`: a wrapper whose child does the serving. Killing only the wrapper
    (what the leaking test did) leaves the child; stop_group leaves nothing of the group."""
    proc = start_group(["bash", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    assert os.getpgid(child) == proc.pid != os.getpgid(0)  # the child is in the leader's new group, not ours
    assert stop_group(proc, grace_s=5) == -15  # the leader ended by SIGTERM
    assert not _alive(child) and not group_alive(proc.pid)


def test_stop_group_kills_what_ignores_sigterm():
    proc = start_group(["bash", "-c", "trap '' TERM; echo ready; while true; do sleep 0.1; done"],
                       stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"  # the trap is set
    t0 = time.monotonic()
    assert stop_group(proc, grace_s=0.5) == -9
    assert time.monotonic() - t0 >= 0.5 and not group_alive(proc.pid)


def test_stop_group_after_the_leader_exited_ends_its_orphans():
    """A wrapper that exited (or crashed) leaves its server orphaned in the group: still ended."""
    proc = start_group(["bash", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True)
    orphan = int(proc.stdout.readline())
    proc.wait(10)
    assert proc.returncode == 0 and _alive(orphan)
    stop_group(proc, grace_s=5)
    assert not _alive(orphan)


def test_start_group_refuses_a_session_argument():
    with pytest.raises(ValueError, match="start_new_session"):
        start_group(["true"], start_new_session=False)
