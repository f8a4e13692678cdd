"""BrowserAgent: SFT, then rejection-sampling fine-tuning (RFT) on the policy's own rollouts.

RFT keeps, per task with k rollouts, only tasks with 0 < #correct < k, drops malformed rollouts, and trains
on the correct rollout with the most steps at SFT weight; samples are per turn, token-mean normalised.
"""

from __future__ import annotations

import collections
import copy
from typing import Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.recipes.registry import Recipe, register_recipe
from jaxwebrl.train.advantages import register_filter


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


register_filter("rft_select", lambda ts, group_size=4, **_: rft_select(ts, group_size))
RECIPE = register_recipe(Recipe("browseragent", reward="success", filters=("rft_select",), advantage="constant",
                                per="turn", norm="token_mean"))
