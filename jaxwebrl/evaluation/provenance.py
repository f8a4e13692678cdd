"""Where a figure came from: the commit, date, command, machine and its load, recorded in every run summary.

`scripts/results_tables.py` builds the README's and RESULTS.md's tables from these records, so each figure
names the run that produced it; the load average at start and end says whether the machine was shared (a
deterministic run's outcome does not depend on it, its wall time does).
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def git_commit(repo: Path = REPO) -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it ({} outside a git checkout)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        return {"commit": git("rev-parse", "--short=7", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {}


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (empty where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_start() -> dict[str, Any]:
    """The provenance of a run starting now; `run_end` adds the end."""
    import jax

    return {**git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
                        "jax": jax.__version__, "devices": [d.device_kind for d in jax.devices()]},
            "load_start": load_average()}


def run_end(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "load_end": load_average(),
            "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
