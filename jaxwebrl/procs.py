"""Start a server process in a process group of its own, and end the whole group.

Why: a server is rarely one process. `playwright run-server` is a Python wrapper that starts the Node driver
(which starts Chromium); sglang-jax forks its scheduler and detokenizer. Killing the process we started ends
the wrapper and leaves its children running, orphaned and still listening. A new session puts the server and
everything it forks into one process group (the group id is the leader's pid), so one signal reaches them all,
also after the leader has exited. This module imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence


def start_group(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(cmd, ...)` as the leader of a new session and process group (end it with `stop_group`)."""
    if "start_new_session" in popen_kwargs or "process_group" in popen_kwargs:
        raise ValueError("start_group makes the new session itself; drop start_new_session/process_group")
    return subprocess.Popen(list(cmd), start_new_session=True, **popen_kwargs)


def group_alive(pgid: int) -> bool:
    """Whether a live process of the group exists. A zombie does not count: it holds no port or file, and where
    nothing reaps orphans (pytest as a container's pid 1) it would never go away."""
    proc = Path("/proc")
    if not proc.is_dir():  # no procfs: a signal to the group says whether any member, zombie or not, exists
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                state, _, pgrp = (entry / "stat").read_text().rpartition(")")[2].split()[:3]
            except (OSError, ValueError):  # gone meanwhile
                continue
            if int(pgrp) == pgid and state != "Z":
                return True
    return False


def stop_group(proc: subprocess.Popen[Any], grace_s: float = 30.0, kill_wait_s: float = 10.0) -> int | None:
    """End the process group `proc` leads (started by `start_group`): SIGTERM to the group, wait up to `grace_s`
    for the leader, then SIGKILL to the group (members that outlived the leader too) and wait up to `kill_wait_s`
    for the group to be gone. `grace_s=0` sends SIGKILL at once (a lost host). Returns the leader's exit code."""
    pgid = proc.pid
    if grace_s > 0 and proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(kill_wait_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"process {pgid} ({_argv(proc)}) survived SIGKILL for {kill_wait_s:.0f} s") from None
    # The members that outlived the leader are the init process's (or a subreaper's) children now: wait until
    # they are dead, so a port or file they held is free when this returns.
    deadline = time.monotonic() + kill_wait_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.returncode


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group is gone already
        pass


def _argv(proc: subprocess.Popen[Any]) -> str:
    args = proc.args
    return " ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args)
