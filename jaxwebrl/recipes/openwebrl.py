"""OpenWebRL: MM-GRPO with a judged +1 / 0 / -1 reward, per-turn samples, infrastructure failures masked.

Reward: +1 when the episode ended with an answer that the judge accepts (`reward.source='judge'`: the
model judge; `'rule'`: the rule evaluator stands in for it) and every turn passed the per-turn format gate
(thinking closed, a parsable tool call), -1 when it was aborted for repeated format errors, else 0.
Trajectories ended by an infrastructure or judge failure train nothing (`mask_failed`: the sample does not exist). Each turn is a sample, normalised per turn; groups
whose rewards are all equal are dropped and resampled when `train.dynamic_sampling` is on (the paper's
configs turn it on).
"""

from __future__ import annotations

from jaxwebrl.data.records import Trajectory
from jaxwebrl.recipes.registry import Recipe, episode_success, register_recipe, register_reward

ANSWERED = ("done", "answer", "task_done")
FORMAT_ABORTS = ("format_error", "format_errors")


def openwebrl_reward(traj: Trajectory, judge_success: bool | None) -> float:
    """+1 judged success, -1 when the episode was aborted for repeated format errors, else 0.

    The judge only runs (judge_success is not None) when the episode ended with done(answer)."""
    if traj.termination in FORMAT_ABORTS:
        return -1.0
    if traj.termination in ANSWERED and judge_success:
        return 1.0
    return 0.0


def rule_judged_reward(t: Trajectory) -> float:
    """The judge's verdict when a judge scored the episode, else the rule evaluator as the judge, consulted
    only when the episode ended with an answer; a success counts only if every turn passed the format gate."""
    if t.termination != "done":
        return openwebrl_reward(t, None)
    return openwebrl_reward(t, episode_success(t) and all(turn.format_ok for turn in t.turns))


register_reward("openwebrl", rule_judged_reward)
RECIPE = register_recipe(Recipe("openwebrl", reward="openwebrl", filters=("mask_failed",), advantage="group_norm",
                                per="turn", norm="per_turn"))
