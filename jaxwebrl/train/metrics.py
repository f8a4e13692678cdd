"""Training metrics: throughput and MFU, written as TensorBoard events (tensorboardX) and JSONL."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Mapping

import jax


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """The `log` config section."""

    every: int = 1
    dir: str = ""  # '' = <workdir>/logs
    tensorboard: bool = True
    progress: bool = True  # progress bars on the console


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """The `hardware` config section: what MFU is measured against."""

    peak_flops: float = 0.0  # per chip; 0 = from PEAK_FLOPS by device kind

# Dense bf16 peak FLOP/s per chip (vendor figures). Matched against `device.device_kind`, lower-cased.
PEAK_FLOPS: dict[str, float] = {
    "tpu v4": 275e12,
    "tpu v5 lite": 197e12,  # v5e
    "tpu v5e": 197e12,
    "tpu v5p": 459e12,
    "tpu v5": 459e12,
    "tpu v6 lite": 918e12,  # v6e (Trillium)
    "tpu v6e": 918e12,
    "h200": 989e12,
    "h100": 989e12,
    "a100": 312e12,
    "l4": 121e12,
    "cpu": 1e12,  # nominal, so MFU is defined on CPU test runs; not meaningful there
}


def peak_flops_per_chip(override: float = 0.0, device: Any | None = None) -> float:
    if override:
        return float(override)
    kind = (device or jax.devices()[0]).device_kind.lower()
    for name in sorted(PEAK_FLOPS, key=len, reverse=True):
        if name in kind:
            return PEAK_FLOPS[name]
    return PEAK_FLOPS["cpu"]


def mfu(tokens_per_s: float, flops_per_token: float, num_chips: int, peak_per_chip: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the chips' peak."""
    return tokens_per_s * flops_per_token / max(num_chips * peak_per_chip, 1.0)


class MetricsWriter:
    """Scalars to `<dir>/metrics.jsonl` and TensorBoard event files; only process 0 writes."""

    def __init__(self, logdir: str, tensorboard: bool = True):
        self.logdir = logdir
        self.enabled = jax.process_index() == 0
        self._tb = None
        self._jsonl = None
        if self.enabled:
            os.makedirs(logdir, exist_ok=True)
            self._jsonl = open(os.path.join(logdir, "metrics.jsonl"), "a")
            if tensorboard:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(logdir)

    def write(self, step: int, metrics: Mapping[str, float], prefix: str = "train") -> None:
        if not self.enabled:
            return
        clean = {k: float(v) for k, v in metrics.items()}
        assert self._jsonl is not None
        named = {(f"{prefix}/{k}" if prefix else k): v for k, v in clean.items()}
        self._jsonl.write(json.dumps({"step": int(step), "time": time.time(), **named}) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for k, v in named.items():
                self._tb.add_scalar(k, v, int(step))

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
