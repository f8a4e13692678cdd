"""The papers' online recipes: the reward each trajectory gets, which groups count, and the paper defaults
for cutting samples. Filters, advantages and sample construction are `train.batches.trajectories_to_samples`,
shared with training from records.

| recipe       | samples    | norm          | reward / advantage                         | group filter        |
|--------------|------------|---------------|--------------------------------------------|---------------------|
| webagent_r1  | trajectory | webagent_r1   | binary success, group mean/std             | none                |
| openwebrl    | turn       | per_turn      | +1 / 0 / -1 (format penalty), group norm.  | reward variance     |
| webgym       | turn       | traj_sum      | weight 1[R=1], repetition filter, replay   | none                |
| browseragent | turn       | token_mean    | RFT: 0 < #correct < k, longest correct     | none                |
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.data.samples import Sample
from jaxwebrl.rollout.collector import Group
from jaxwebrl.train.advantages import has_reward_variance, openwebrl_reward
from jaxwebrl.train.batches import trajectories_to_samples


@dataclasses.dataclass(frozen=True)
class OnlineRecipe:
    name: str
    per: str  # the paper's sample cut (configs set data.per to it)
    norm: str  # the paper's normalisation (configs set data.norm to it)
    reward: Callable[[Trajectory], float]


def _success(t: Trajectory) -> float:
    return 1.0 if t.metadata.get("success") else 0.0


def _openwebrl(t: Trajectory) -> float:
    # The rule evaluator stands in for the judge; it is only consulted when the episode ended with an answer.
    judged = bool(t.metadata.get("success")) if t.termination == "done" else None
    return openwebrl_reward(t, judged)


RECIPES: dict[str, OnlineRecipe] = {
    "webagent_r1": OnlineRecipe("webagent_r1", "trajectory", "webagent_r1", _success),
    "openwebrl": OnlineRecipe("openwebrl", "turn", "per_turn", _openwebrl),
    "webgym": OnlineRecipe("webgym", "turn", "traj_sum", _success),
    "browseragent": OnlineRecipe("browseragent", "turn", "token_mean", _success),
}


def get_recipe(name: str) -> OnlineRecipe:
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} has no online RL loop; choose one of {sorted(RECIPES)} "
                         "(recipe='sft' or 'nnetnav' train on demonstration files with data.kind='sft')")
    return RECIPES[name]


def assign_rewards(recipe: OnlineRecipe, trajectories: Sequence[Trajectory], cfg: Any) -> None:
    """The recipe's reward, or with env.reward='raw' the environment's own (MiniWoB++: +1 / -1 / partial)."""
    raw = str(cfg.env.reward) == "raw" and recipe.name != "openwebrl"
    for t in trajectories:
        t.reward = float(t.metadata.get("raw_reward", 0.0)) if raw else recipe.reward(t)


def group_filter(recipe: OnlineRecipe, cfg: Any) -> Callable[[Group], bool]:
    """Dynamic sampling (drop groups whose rewards are all equal) when the config asks for it."""
    if not bool(cfg.train.dynamic_sampling):
        return lambda g: True

    def accept(group: Group) -> bool:
        assign_rewards(recipe, group.trajectories, cfg)
        return has_reward_variance(group.trajectories)

    return accept


def make_samples(recipe: OnlineRecipe, trajs: Sequence[Trajectory], cfg: Any) -> list[Sample]:
    """Rewards, then the shared filters/advantages/sample cut of `trajectories_to_samples`."""
    trajs = list(trajs)
    assign_rewards(recipe, trajs, cfg)
    return trajectories_to_samples(cfg, trajs, rft_k=int(cfg.rollout.group_size))
