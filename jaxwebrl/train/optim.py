"""Optimizer: global-norm clipping then AdamW with a weight-decay mask and a learning-rate schedule."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

from jaxwebrl.fields import FieldError, at_least, one_of, positive

SCHEDULES = ("constant", "warmup_cosine", "warmup_constant")
# Parameters that never decay: norms and biases (decaying them only hurts; standard practice).
_NO_DECAY_SUFFIXES = ("norm", "bq", "bk", "bv", "bo")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The `optim` config section (hashable: the compiled step is cached by it)."""

    lr: float = 1e-3
    schedule: str = "constant"  # SCHEDULES
    warmup_steps: int = 0
    warmup_ratio: float = 0.0  # used when warmup_steps is 0: a fraction of the run's steps
    final_lr_ratio: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # global-norm clipping (0 = off)

    def __post_init__(self) -> None:
        positive("lr", self.lr, "set a positive learning rate")
        one_of("schedule", self.schedule, SCHEDULES)
        at_least("warmup_steps", self.warmup_steps, 0)
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise FieldError("warmup_ratio", f"{self.warmup_ratio} is not in [0, 1)", "use e.g. 0.05, or 0")
        at_least("max_grad_norm", self.max_grad_norm, 0.0)


def make_schedule(lr: float, schedule: str, total_steps: int, warmup_steps: int = 0, final_lr_ratio: float = 0.0) -> optax.Schedule:
    """constant | warmup_cosine (linear warmup, cosine to lr*final_lr_ratio) | warmup_constant."""
    if schedule == "constant":
        return optax.constant_schedule(lr)
    if schedule == "warmup_constant":
        if warmup_steps <= 0:
            return optax.constant_schedule(lr)
        return optax.join_schedules(
            [optax.linear_schedule(0.0, lr, warmup_steps), optax.constant_schedule(lr)], [warmup_steps]
        )
    if schedule == "warmup_cosine":
        return optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=lr, warmup_steps=max(warmup_steps, 0),
            decay_steps=max(total_steps, warmup_steps + 1), end_value=lr * final_lr_ratio,
        )
    raise ValueError(f"schedule {schedule!r} is unknown; use one of {SCHEDULES}")


def decay_mask(params: Any) -> Any:
    """True for matrices (projections, embeddings), False for norms and biases."""

    def one(path: tuple[Any, ...], _: Any) -> bool:
        name = str(getattr(path[-1], "key", path[-1]))
        return not name.endswith(_NO_DECAY_SUFFIXES)

    return jax.tree_util.tree_map_with_path(one, params)


def make_optimizer(optim: OptimConfig, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """optax chain from the `config.optim` block (lr, schedule, warmup_steps|warmup_ratio, b1, b2, eps,
    weight_decay, max_grad_norm)."""
    warmup = int(optim.warmup_steps)
    if optim.warmup_ratio and not warmup:
        warmup = int(round(optim.warmup_ratio * total_steps))
    sched = make_schedule(float(optim.lr), str(optim.schedule), total_steps, warmup, float(optim.final_lr_ratio))
    parts = []
    if float(optim.max_grad_norm or 0) > 0:
        parts.append(optax.clip_by_global_norm(float(optim.max_grad_norm)))
    parts.append(optax.adamw(
        sched, b1=float(optim.b1), b2=float(optim.b2), eps=float(optim.eps),
        weight_decay=float(optim.weight_decay), mask=decay_mask,
    ))
    return optax.chain(*parts), sched
