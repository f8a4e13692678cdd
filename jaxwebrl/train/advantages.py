"""Group advantages, rewards and the recipe-specific trajectory filters (host-side, numpy).

These run between the rollout and sample construction: they set `Trajectory.advantage` (the weight for the
NLL family) and the turn masks, and drop what a recipe drops. Everything returns new objects.
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, field
from typing import Iterable, Sequence

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


# ---- WebGym: filtered REINFORCE ------------------------------------------------------------------


def _digest(turn) -> str:  # type: ignore[no-untyped-def]
    return turn.observation_digest if turn.observation_digest is not None else turn.observation


def webgym_filter(trajectories: Sequence[Trajectory], success_threshold: float = 1.0) -> list[Trajectory]:
    """WebGym: weight = 1[R = 1] (failed trajectories dropped); a step whose next observation equals its
    own (the action changed nothing) gets mask 0. Returns trajectories with advantage 1.0."""
    out = []
    for t in trajectories:
        if t.reward < success_threshold:
            continue
        t2 = copy.deepcopy(t)
        for j, turn in enumerate(t2.turns[:-1]):
            if _digest(turn) == _digest(t2.turns[j + 1]):
                turn.response_mask = [0] * len(turn.response_ids)
        t2.advantage = 1.0
        if t2.num_trained_turns:
            out.append(t2)
    return out


# ---- BrowserAgent: rejection-sampling fine-tuning selection ----------------------------------------


def rft_select(trajectories: Sequence[Trajectory], k: int, success_threshold: float = 1.0) -> list[Trajectory]:
    """BrowserAgent RFT: per task with k rollouts keep tasks with 0 < #correct < k, drop malformed
    rollouts, and take the correct rollout with the most steps (advantage 1.0 = plain SFT weight)."""
    by_task: dict[str, list[Trajectory]] = collections.defaultdict(list)
    for t in trajectories:
        by_task[t.task_id].append(t)
    out = []
    for ts in by_task.values():
        correct = [t for t in ts if t.reward >= success_threshold]
        if not 0 < len(correct) < k:
            continue
        wellformed = [t for t in correct if all(turn.format_ok for turn in t.turns)]
        if not wellformed:
            continue
        best = max(wellformed, key=lambda t: len(t.turns))  # max keeps the first of equal lengths
        t2 = copy.copy(best)
        t2.advantage = 1.0
        out.append(t2)
    return out


# ---- OpenWebRL reward ------------------------------------------------------------------------------


def openwebrl_reward(traj: Trajectory, judge_success: bool | None) -> float:
    """+1 judged success, -1 when the episode was aborted for repeated format errors, else 0.

    The judge only runs (judge_success is not None) when the episode ended with done(answer)."""
    if traj.termination in ("format_error", "format_errors"):
        return -1.0
    if traj.termination in ("done", "answer", "task_done") and judge_success:
        return 1.0
    return 0.0


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
