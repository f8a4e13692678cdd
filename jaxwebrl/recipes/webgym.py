"""WebGym: filtered REINFORCE. Only successful trajectories train (weight 1[R = 1]); a step whose next
observation equals its own (the action changed nothing) is masked out; samples are per turn with the
trajectory-sum normalisation; replay of recent iterations and per-difficulty horizons come from the
`rollout` config section.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.recipes.registry import Recipe, register_recipe
from jaxwebrl.train.advantages import register_filter


def _digest(turn: Turn) -> Any:
    return turn.observation_digest if turn.observation_digest is not None else turn.observation


def webgym_filter(trajectories: Sequence[Trajectory], success_threshold: float = 1.0, **_: Any) -> list[Trajectory]:
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


register_filter("webgym_repetition", webgym_filter)
RECIPE = register_recipe(Recipe("webgym", reward="success", filters=("webgym_repetition",), advantage="constant",
                                per="turn", norm="traj_sum"))
