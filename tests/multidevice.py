"""Run a Python snippet in a fresh interpreter with N fake CPU devices (XLA_FLAGS must precede jax import)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def device_env(devices: int) -> dict[str, str]:
    """The environment of a subprocess with `devices` fake CPU devices: the suite's XLA flags
    (tests/conftest.py) plus the device count, JAX on the CPU, the repository importable."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}".strip()
    return dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))


def run_with_devices(code: str, devices: int = 8, timeout: int = 600) -> str:
    env = device_env(devices)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return proc.stdout
