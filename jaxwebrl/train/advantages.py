"""Advantage estimators and trajectory filters (host-side, numpy), each registered by name.

These run between the rollout and sample construction: they set `Trajectory.advantage` (the weight for the
NLL family) and the turn masks, and drop what a recipe drops. Everything returns new objects. Recipes
(`jaxwebrl.recipes.registry`) name the estimator and filters they use; a paper's own filter registers itself
from its recipe module with `register_filter` (in the spirit of Tunix's `register_advantage_estimator`).
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from jaxwebrl.data.records import Trajectory

# ---- group-normalised advantages ----------------------------------------------------------------


def group_advantages(
    rewards: Sequence[float], group_ids: Sequence[str], scale_by_std: bool = True, eps: float = 1e-6,
    present: Sequence[bool] | None = None,
) -> np.ndarray:
    """A_i = (R_i - mean_g R) / (std_g R + eps) within each group (population std, as GRPO); without
    `scale_by_std` (Dr. GRPO) only the mean is removed.

    `present[i] = False` marks a trajectory that does not exist for training (OpenWebRL: a judge timeout or
    infrastructure failure zeroes its loss mask, "removal from optimization"): its reward enters neither its
    group's mean nor its std, and its advantage is 0."""
    r = np.asarray(rewards, np.float64)
    keep = np.ones(len(r), bool) if present is None else np.asarray(present, bool)
    if keep.shape != r.shape:
        raise ValueError(f"present has {keep.size} entries for {r.size} rewards")
    out = np.zeros_like(r)
    by_group: dict[str, list[int]] = collections.defaultdict(list)
    for i, g in enumerate(group_ids):
        if keep[i]:
            by_group[g].append(i)
    for idx in by_group.values():
        x = r[idx]
        a = x - x.mean()
        if scale_by_std:
            sd = x.std() + eps
            a = a / sd if sd > 0 else a  # all-equal group: zero advantage either way
        out[idx] = a
    return out.astype(np.float32)


def is_trained(traj: Trajectory) -> bool:
    """Whether the trajectory has a trained token; one without (mask 0 everywhere) is absent from its group."""
    return traj.num_trained_turns > 0


def assign_group_advantages(
    trajectories: Sequence[Trajectory], scale_by_std: bool = True, eps: float = 1e-6,
) -> list[Trajectory]:
    """Copies of the trajectories with `advantage` set to the group-normalised reward; masked trajectories
    (no trained token, e.g. after `mask_failed`) are left out of their group's statistics and get 0."""
    adv = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories], scale_by_std, eps,
                           present=[is_trained(t) for t in trajectories])
    out = []
    for t, a in zip(trajectories, adv):
        t2 = copy.copy(t)
        t2.advantage = float(a)
        out.append(t2)
    return out


# ---- dynamic sampling (DAPO / OpenWebRL) ----------------------------------------------------------


def group_by(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    groups: dict[str, list[Trajectory]] = collections.defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t)
    return dict(groups)


def has_reward_variance(group: Sequence[Trajectory], tol: float = 1e-8) -> bool:
    """Whether the group's trained (unmasked) trajectories disagree; a masked one carries no signal."""
    r = [t.reward for t in group if is_trained(t)]
    return len(r) > 1 and (max(r) - min(r)) > tol


def drop_zero_variance_groups(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Keep only groups whose rewards are not all equal (they carry no GRPO signal)."""
    keep = {g for g, ts in group_by(trajectories).items() if has_reward_variance(ts)}
    return [t for t in trajectories if t.group_id in keep]


# ---- registries -----------------------------------------------------------------------------------

# estimator(trajectories, *, scale_by_std, eps) -> trajectories with `advantage` set
AdvantageEstimator = Callable[..., list[Trajectory]]
# filter(trajectories, *, group_size) -> the trajectories that train (masks may change)
TrajectoryFilter = Callable[..., list[Trajectory]]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}
TRAJECTORY_FILTERS: dict[str, TrajectoryFilter] = {}


def register_advantage_estimator(name: str, fn: AdvantageEstimator) -> AdvantageEstimator:
    ADVANTAGE_ESTIMATORS[name] = fn
    return fn


def register_filter(name: str, fn: TrajectoryFilter) -> TrajectoryFilter:
    TRAJECTORY_FILTERS[name] = fn
    return fn


def _with_advantage(trajectories: Sequence[Trajectory], value: float | None) -> list[Trajectory]:
    out = []
    for t in trajectories:
        t2 = copy.copy(t)
        t2.advantage = value if value is not None else t.advantage
        out.append(t2)
    return out


def _group_norm(trajectories: Sequence[Trajectory], scale_by_std: bool = True, eps: float = 1e-6, **_: Any) -> list[Trajectory]:
    return assign_group_advantages(trajectories, scale_by_std, eps)


# group_norm: (R - mean_g) / (std_g + eps), GRPO; constant: weight 1 on what the filters kept (filtered
# REINFORCE, RFT); given: the records' own advantages (demonstrations, replayed samples).
register_advantage_estimator("group_norm", _group_norm)
register_advantage_estimator("constant", lambda ts, **_: _with_advantage(ts, 1.0))
register_advantage_estimator("given", lambda ts, **_: _with_advantage(ts, None))
register_filter("drop_zero_variance", lambda ts, **_: drop_zero_variance_groups(ts))
register_filter("mask_failed", lambda ts, **_: mask_failed(ts))


@dataclass
class DynamicSamplingCollector:
    """Accumulates finished groups until `target_groups` effective (non-zero-variance) groups are held.

    The rollout loop calls `add(group)` whenever a group's last trajectory ends and stops launching new
    tasks when `done`; `take()` returns the batch and resets. `seen` / `dropped` count the cost.
    """

    target_groups: int
    group_size: int | None = None
    groups: list[list[Trajectory]] = field(default_factory=list)
    seen: int = 0
    dropped: int = 0

    def add(self, group: Sequence[Trajectory]) -> bool:
        """Offer one complete group; True if it was kept."""
        self.seen += 1
        if self.group_size is not None and len(group) != self.group_size:
            raise ValueError(f"group of {len(group)} trajectories, expected group_size={self.group_size}")
        if self.done or not has_reward_variance(group):
            self.dropped += 1
            return False
        self.groups.append(list(group))
        return True

    @property
    def done(self) -> bool:
        return len(self.groups) >= self.target_groups

    @property
    def needed(self) -> int:
        return max(0, self.target_groups - len(self.groups))

    def take(self) -> list[Trajectory]:
        out = [t for g in self.groups for t in g]
        self.groups, self.seen, self.dropped = [], 0, 0
        return out


def mask_failed(trajectories: Sequence[Trajectory], reasons: Iterable[str] = ("judge_error", "sandbox_failure", "init_failure", "env_step_error", "env_error", "timeout")) -> list[Trajectory]:
    """OpenWebRL: trajectories ended by judge timeout or infrastructure failure train nothing (mask 0).

    Mask 0 means the trajectory does not exist for the update: `assign_group_advantages` and
    `has_reward_variance` leave it out of its group, and `data.samples.build_samples` out of G_i."""
    bad = set(reasons)
    out = []
    for t in trajectories:
        if t.termination in bad:
            t = copy.deepcopy(t)
            for turn in t.turns:
                turn.response_mask = [0] * len(turn.response_ids)
        out.append(t)
    return out
