"""Where a figure came from: the commit, date, command, machine and its load, recorded in every run summary.

`scripts/results_tables.py` builds the README's and RESULTS.md's tables from these records, so each figure
names the run that produced it; the load average at start and end says whether the machine was shared (a
deterministic run's outcome does not depend on it, its wall time does). The CPU model, the instruction-set
extensions XLA:CPU compiles for, and the jax / jaxlib versions say which runs can be bit-identical at all: the
deterministic schedule holds on one machine kind and build; the same config, seed and data rounded differently
on another VM, whose CPU and builds were not recorded, so the cause is not known (RESULTS.md, "Same seed,
same run"). A run from a pretrained model also records the sha256 of the converted weights it started from
(`base_model`, from the conversion record `jaxwebrl.models.pretrained` keeps beside them).
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


# Instruction-set extensions that change what XLA:CPU and its matmul libraries compile to (x86 `flags`, Arm
# `Features` in /proc/cpuinfo), and with it the order of a float reduction.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
             "asimd", "sve", "sve2", "bf16", "i8mm")


def cpu_from_cpuinfo(text: str) -> dict[str, Any]:
    """The CPU model and its ISA_FLAGS from /proc/cpuinfo's text (first processor; x86 or Arm fields)."""
    first = text.strip().split("\n\n")[0]  # all cores of a VM are one kind: the first block is enough
    fields: dict[str, str] = {}
    for line in first.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or fields.get("CPU part", "")
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    return {"model": model, "isa": [f for f in ISA_FLAGS if f in flags]}


def cpu() -> dict[str, Any]:
    """This machine's CPU (`cpu_from_cpuinfo`; where there is no /proc/cpuinfo, `platform.processor()`)."""
    try:
        return cpu_from_cpuinfo(Path("/proc/cpuinfo").read_text())
    except OSError:
        return {"model": platform.processor(), "isa": []}


def machine_line(machine: dict[str, Any]) -> str:
    """'2 CPUs (AMD EPYC; avx2, fma), jax 0.10.2 / jaxlib 0.10.2': a summary's `machine` as report.md prints it
    (a summary written before `cpu` was recorded gives '2 CPUs, jax ...')."""
    out = f"{machine.get('cpus')} CPUs"
    if machine.get("cpu"):
        cpu = machine["cpu"]
        out += f" ({cpu.get('model') or 'model unknown'}; {', '.join(cpu.get('isa', [])) or 'no listed ISA extensions'})"
    if machine.get("jax"):
        out += f", jax {machine['jax']}" + (f" / jaxlib {machine['jaxlib']}" if machine.get("jaxlib") else "")
    return out


def base_model_line(base: dict[str, Any]) -> str:
    """'base model smollm2 (weights sha256 a672150fb4f9, converted by gguf 0.19.0, numpy 2.4.6)': the
    pretrained checkpoint a summary's `base_model` names, from its conversion record."""
    if not base.get("weights_sha256"):
        return f"base model {base.get('name', '?')} (no conversion record)"
    tools = ", ".join(f"{k} {v}" for k, v in base.get("converter", {}).items())
    return f"base model {base.get('name', '?')} (weights sha256 {base['weights_sha256'][:12]}, converted by {tools})"


def run_start() -> dict[str, Any]:
    """The provenance of a run starting now; `run_end` adds the end."""
    import jax
    import jaxlib

    return {**git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "platform": platform.platform(),
                        "cpu": cpu(), "jax": jax.__version__,
                        "jaxlib": jaxlib.__version__, "devices": [d.device_kind for d in jax.devices()]},
            "load_start": load_average()}


def run_end(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "load_end": load_average(),
            "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
