"""One registry of recipes: a recipe is a name plus the registered parts it composes.

A `Recipe` names its reward (how a finished episode is scored), the trajectory filters that run on a
rollout batch (in order), its advantage estimator, and the paper's sample cut and loss normalisation. Each
part is looked up by name in a small registry (`REWARDS` here; `TRAJECTORY_FILTERS` and
`ADVANTAGE_ESTIMATORS` in `jaxwebrl.train.advantages`), so adding a paper is one module in this package that
registers its parts and its recipe, plus a config (and a line in `papers.py`, which loads them all and
looks recipes up by name). Nothing else in the code branches on a recipe's name.

Demonstrations (`data.kind='sft'`) train as they are: filters and advantages apply to rollouts
(`data.kind='trajectories'` from saved records, or `'online'`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.data.samples import Sample, build_samples
from jaxwebrl.train.advantages import ADVANTAGE_ESTIMATORS, TRAJECTORY_FILTERS, has_reward_variance

# reward(trajectory) -> float, from what the episode recorded (its outcome, `episode_success`; termination).
RewardFn = Callable[[Trajectory], float]
REWARDS: dict[str, RewardFn] = {}


def register_reward(name: str, fn: RewardFn) -> RewardFn:
    REWARDS[name] = fn
    return fn


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    reward: str  # REWARDS key
    filters: tuple[str, ...]  # TRAJECTORY_FILTERS keys, applied in order to a rollout batch
    advantage: str  # ADVANTAGE_ESTIMATORS key
    per: str  # the paper's sample cut (configs set data.per to it)
    norm: str  # the paper's normalisation (configs set data.norm to it)
    online: bool = True  # has an online RL loop (False: trains on demonstration files only)


RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    for part, table in ((recipe.reward, REWARDS), (recipe.advantage, ADVANTAGE_ESTIMATORS)):
        if part not in table:
            raise ValueError(f"recipe {recipe.name!r} names {part!r}, which is not registered")
    for f in recipe.filters:
        if f not in TRAJECTORY_FILTERS:
            raise ValueError(f"recipe {recipe.name!r} names filter {f!r}, which is not registered")
    RECIPES[recipe.name] = recipe
    return recipe


# ---- rewards every recipe may use ----------------------------------------------------------------


def was_judged(t: Trajectory) -> bool:
    """Whether a model judge scored this episode (`reward.source` judge / rule_or_judge on a task without a
    rule evaluator); `jaxwebrl.judges.record_verdict` marks it."""
    return t.metadata.get("reward_source") == "judge" and "judged_success" in t.metadata


def episode_success(t: Trajectory) -> bool:
    """The episode's outcome every recipe's reward maps: the judge's verdict when a judge scored it, else the
    rule evaluator's `success` (one path for `reward.source` rule | judge | rule_or_judge)."""
    return bool(t.metadata["judged_success"] if was_judged(t) else t.metadata.get("success"))


def success_reward(t: Trajectory) -> float:
    """Binary task success (the papers' outcome reward), judged or by the rule."""
    return 1.0 if episode_success(t) else 0.0


def raw_reward(t: Trajectory) -> float:
    """The environment's own reward (MiniWoB++: +1 / -1 / partial)."""
    return float(t.metadata.get("raw_reward", 0.0))


register_reward("success", success_reward)
register_reward("raw", raw_reward)


# ---- applying a recipe -----------------------------------------------------------------------------


def assign_rewards(recipe: Recipe, trajectories: Sequence[Trajectory], source: str = "rule",
                   step_discount: float = 1.0) -> None:
    """Set each trajectory's reward: the recipe's (`source` rule / judge / rule_or_judge: its reward function maps
    `episode_success`, which is the judge's verdict where one was recorded), or the environment's raw one.

    `step_discount` < 1 (`reward.step_discount`) scales a positive reward by step_discount ** (turns - 1): a
    success reached after clicks that changed nothing is worth less than the same success at once, so the
    group's advantages tell them apart (greedy evaluation gets no second attempt). Penalties stay as they are."""
    fn = REWARDS["raw"] if source == "raw" else REWARDS[recipe.reward]
    for t in trajectories:
        r = fn(t)
        t.reward = r * step_discount ** max(0, len(t.turns) - 1) if r > 0 else r


def accept_group(recipe: Recipe, trajectories: Sequence[Trajectory], *, dynamic_sampling: bool,
                 reward_source: str = "rule", step_discount: float = 1.0) -> bool:
    """Dynamic sampling: keep a finished group only when its rewards differ (else it teaches GRPO nothing),
    judged after the recipe's filters, so a member that will not train (e.g. masked by an infrastructure
    failure) does not count as variance."""
    if not dynamic_sampling:
        return True
    assign_rewards(recipe, trajectories, reward_source, step_discount)
    return has_reward_variance(apply_filters(recipe.filters, trajectories, group_size=len(trajectories)))


def _trained_turns(trajs: Sequence[Trajectory]) -> int:
    return sum(t.num_trained_turns for t in trajs)


def apply_filters(names: Sequence[str], trajectories: Sequence[Trajectory], *, group_size: int,
                  stats: dict[str, float] | None = None) -> list[Trajectory]:
    """Run trajectory filters in order. `stats` (when given) gets, per filter, how many trajectories and
    trained turns went in and came out (`recipe/<filter>/...`): the record that a paper's filter fired."""
    trajs = list(trajectories)
    for name in names:
        before, turns_before = len(trajs), _trained_turns(trajs)
        trajs = TRAJECTORY_FILTERS[name](trajs, group_size=group_size)
        if stats is not None:
            for key, value in (("trajectories_in", before), ("trajectories_out", len(trajs)),
                               ("turns_in", turns_before), ("turns_out", _trained_turns(trajs))):
                stats[f"recipe/{name}/{key}"] = stats.get(f"recipe/{name}/{key}", 0.0) + value
    return trajs


def rollout_samples(recipe: Recipe, trajectories: Sequence[Trajectory], *, per: str, norm: str, max_len: int,
                    group_size: int, dynamic_sampling: bool = False, scale_adv_by_std: bool = True,
                    adv_eps: float = 1e-6, stats: dict[str, float] | None = None) -> list[Sample]:
    """Rewarded rollouts -> the recipe's filters -> dynamic sampling (optional) -> advantages -> samples.
    `stats` (when given) gets the filters' counts (see `apply_filters`) and the sample count."""
    names = list(recipe.filters) + (["drop_zero_variance"] if dynamic_sampling else [])
    trajs = apply_filters(names, trajectories, group_size=group_size, stats=stats)
    trajs = ADVANTAGE_ESTIMATORS[recipe.advantage](trajs, scale_by_std=scale_adv_by_std, eps=adv_eps)
    samples = build_samples(trajs, per=per, norm=norm, max_len=max_len)
    if stats is not None:
        stats["recipe/trajectories_trained"] = float(sum(t.num_trained_turns > 0 for t in trajs))
        stats["recipe/samples"] = float(len(samples))
    return samples
