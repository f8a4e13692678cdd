"""Every recipe, loaded: the paper modules register themselves on import; look one up by name here."""

from __future__ import annotations

from typing import Any, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.data.samples import Sample
from jaxwebrl.recipes import browseragent, demonstrations_only, openwebrl, webagent_r1, webgym
from jaxwebrl.recipes.registry import RECIPES, Recipe, assign_rewards, rollout_samples

PAPERS = (webagent_r1, openwebrl, webgym, browseragent, demonstrations_only)  # each registered its recipe on import


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} is unknown; choose one of {sorted(RECIPES)}")
    return RECIPES[name]


def recipe_names() -> tuple[str, ...]:
    return tuple(RECIPES)


def run_samples(run: Any, trajectories: Sequence[Trajectory], reward_source: str | None = None,
                stats: dict[str, float] | None = None) -> list[Sample]:
    """A run config's recipe applied to rollouts (rewards assigned first when `reward_source` is given);
    `stats` gets the recipe's filter counts."""
    recipe = get_recipe(run.recipe)
    if reward_source is not None:
        assign_rewards(recipe, trajectories, reward_source, run.reward.step_discount)
    return rollout_samples(recipe, trajectories, per=run.data.per, norm=run.data.norm, max_len=run.train.seq_len,
                           group_size=run.rollout.group_size, dynamic_sampling=run.train.dynamic_sampling,
                           scale_adv_by_std=run.train.scale_adv_by_std, adv_eps=run.train.adv_eps, stats=stats)
