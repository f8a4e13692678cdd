"""Find the processes a test session started, directly or not, that are still running (read from /proc).

A process counts as the session's when its parent chain reaches the pytest process, or when its environment
carries the session's marker (`MARKER_VAR`, set by tests/conftest.py before any test runs and inherited by
every child): an orphan whose parent was killed (the Node driver behind a killed `playwright run-server`
wrapper) has the init process as its parent, but still the marker.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

MARKER_VAR = "JAXWEBRL_TEST_SESSION"
PROC = Path("/proc")


@dataclasses.dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.cmdline}"


def _read(pid: int) -> tuple[Proc, bytes] | None:
    """The process and its initial environment, or None when it is gone or not ours to read."""
    base = PROC / str(pid)
    try:
        stat = (base / "stat").read_text()
        environ = (base / "environ").read_bytes()
        argv = (base / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
    head, _, rest = stat.rpartition(")")
    fields = rest.split()
    comm = head.partition("(")[2]
    cmdline = argv.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{comm}]"
    return Proc(pid, int(fields[1]), fields[0], cmdline), environ


def session_processes(root_pid: int, marker: str) -> list[Proc]:
    """Live (not zombie) processes other than `root_pid` that descend from it or carry `MARKER_VAR=marker`."""
    tag = f"{MARKER_VAR}={marker}".encode()
    procs: dict[int, Proc] = {}
    marked: set[int] = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == root_pid:
            continue
        read = _read(int(entry.name))
        if read is None:
            continue
        proc, environ = read
        procs[proc.pid] = proc
        if tag in environ.split(b"\0"):
            marked.add(proc.pid)

    def descends(pid: int) -> bool:
        seen: set[int] = set()
        while pid in procs and pid not in seen:
            seen.add(pid)
            pid = procs[pid].ppid
        return pid == root_pid

    return sorted((p for p in procs.values() if p.state != "Z" and (p.pid in marked or descends(p.pid))),
                  key=lambda p: p.pid)


def leftover_processes(root_pid: int, marker: str, settle_s: float = 10.0) -> list[Proc]:
    """The session's processes still alive after up to `settle_s`: a process ended just before the session's
    end (a browser whose close returned) may take a moment to exit, so wait for the set to empty first."""
    deadline = time.monotonic() + settle_s
    left = session_processes(root_pid, marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = session_processes(root_pid, marker)
    return left


def kill(procs: list[Proc]) -> None:
    """SIGKILL each process (so a reported leak does not outlive the run that reported it)."""
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
