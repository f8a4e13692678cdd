"""From a Verdict to the reward a recipe trains on: the seam for `reward.source = rule | raw | judge | rule_or_judge`.

- rule: the rule evaluator's reward (the trajectory's own `reward`); no judge is called. raw (the
  environment's own reward) calls no judge either.
- judge: the judge's reward (its paper's rule, e.g. OpenWebRL's +1 / 0 / -1).
- rule_or_judge: the rule's reward where the task has a rule evaluator, the judge's where it has none
  (open-web tasks).

A verdict with `error = "judge_error"` gives reward 0, termination `judge_error` and loss mask 0 on every
turn (OpenWebRL A.4: "samples hit by judge timeout ... have their loss mask zeroed"); the run goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxwebrl.data.records import Trajectory
from jaxwebrl.judges.base import JUDGE_ERROR, Verdict

RewardSource = Literal["rule", "raw", "judge", "rule_or_judge"]
REWARD_SOURCES = ("rule", "raw", "judge", "rule_or_judge")
JUDGED_SOURCES = ("judge", "rule_or_judge")  # the sources that call a judge
# Trajectory.metadata keys: whether the task has a rule evaluator (written by the agent loop; absent = it has),
# and the judged outcome the recipes' reward functions read (written by `record_verdict`).
RULE_EVALUATOR_KEY = "rule_evaluator"
JUDGED_SUCCESS_KEY = "judged_success"


@dataclasses.dataclass(frozen=True)
class RewardDecision:
    reward: float
    train: bool  # False: every response token of the episode gets loss mask 0
    termination: str | None  # set: replaces the trajectory's termination (judge_error)
    source: Literal["rule", "judge"]


def needs_judge(source: RewardSource, has_rule: bool) -> bool:
    """Whether an episode must be judged (so the loop submits only those to the JudgeQueue)."""
    if source not in REWARD_SOURCES:
        raise ValueError(f"reward source {source!r}: use one of {REWARD_SOURCES}")
    return source == "judge" or (source == "rule_or_judge" and not has_rule)


def has_rule_evaluator(traj: Trajectory) -> bool:
    """Whether the episode's task has a rule evaluator (what `rule_or_judge` routes on)."""
    return bool(traj.metadata.get(RULE_EVALUATOR_KEY, True))


def record_verdict(traj: Trajectory, verdict: Verdict) -> Trajectory:
    """Write a judgment into the trajectory (in place): `apply_decision` (reward, judge_error -> termination and
    mask 0, `metadata['judge']`) plus `metadata['judged_success']`, the outcome the recipes' reward functions
    map into their paper's reward (`jaxwebrl.recipes.registry.episode_success`)."""
    apply_decision(traj, reward_from_verdict(verdict, source="judge"), verdict)
    traj.metadata[JUDGED_SUCCESS_KEY] = verdict.ok and verdict.label == "success"
    return traj


def reward_from_verdict(verdict: Verdict | None, *, source: RewardSource = "judge",
                        rule_reward: float | None = None) -> RewardDecision:
    """The recipe's reward for one episode; `rule_reward` is None when the task has no rule evaluator."""
    if not needs_judge(source, rule_reward is not None):
        if rule_reward is None:
            raise ValueError("reward source 'rule' needs the rule evaluator's reward; this task has none "
                             "(use reward source 'judge' or 'rule_or_judge' for tasks without a rule evaluator)")
        return RewardDecision(float(rule_reward), True, None, "rule")
    if verdict is None:
        raise ValueError(f"reward source {source!r} needs a judge verdict for this episode; submit it to the judge")
    if verdict.error is not None:
        return RewardDecision(0.0, False, JUDGE_ERROR, "judge")
    return RewardDecision(float(verdict.reward), True, None, "judge")


def apply_decision(traj: Trajectory, decision: RewardDecision, verdict: Verdict | None = None) -> Trajectory:
    """Write the decision into the trajectory (in place; returned for chaining): reward, termination, masks,
    and the verdict record under `metadata['judge']`."""
    traj.reward = decision.reward
    if decision.termination is not None:
        traj.metadata.setdefault("termination_before_judge", traj.termination)
        traj.termination = decision.termination
    if not decision.train:
        for turn in traj.turns:
            turn.response_mask = [0] * len(turn.response_ids)
    traj.metadata["reward_source"] = decision.source
    if verdict is not None:
        traj.metadata["judge"] = verdict.to_dict()
    return traj
