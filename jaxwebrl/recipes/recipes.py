"""The papers' online recipes as small compositions: how a batch of finished groups becomes training samples.

Each recipe names its sample cut (per trajectory / per turn), its normalisation, its group filter (dynamic
sampling) and its reward/advantage/filter step. The online loop (`online.py`) is the same for all of them.

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
from jaxwebrl.data.samples import Sample, build_samples
from jaxwebrl.rollout.collector import Group
from jaxwebrl.train.advantages import (
    assign_group_advantages, has_reward_variance, mask_failed, openwebrl_reward, rft_select, webgym_filter,
)

# Terminations whose trajectories train nothing (infrastructure failures, DESIGN principle 8).
FAILED = ("env_error", "timeout", "judge_error", "sandbox_failure", "init_failure", "env_step_error")


@dataclasses.dataclass(frozen=True)
class OnlineRecipe:
    name: str
    per: str
    norm: str
    prepare: Callable[[list[Trajectory], Any], list[Trajectory]]
    accept: Callable[[Group], bool] = lambda g: True


def _grpo(trajs: list[Trajectory], cfg: Any) -> list[Trajectory]:
    return assign_group_advantages(mask_failed(trajs, FAILED), bool(cfg.train.scale_adv_by_std), float(cfg.train.adv_eps))


def _openwebrl(trajs: list[Trajectory], cfg: Any) -> list[Trajectory]:
    for t in trajs:
        # the rule evaluator stands in for the judge; it only counts when the episode ended with an answer
        success = bool(t.metadata.get("success")) if t.termination == "done" else None
        t.reward = openwebrl_reward(_as_openwebrl_termination(t), success)
    return _grpo(trajs, cfg)


def _as_openwebrl_termination(t: Trajectory) -> Trajectory:
    if t.termination == "format_errors":
        return dataclasses.replace(t, termination="format_error")
    return t


def _openwebrl_accept(group: Group) -> bool:
    for t in group.trajectories:
        success = bool(t.metadata.get("success")) if t.termination == "done" else None
        t.reward = openwebrl_reward(_as_openwebrl_termination(t), success)
    return has_reward_variance(group.trajectories)


def _webgym(trajs: list[Trajectory], cfg: Any) -> list[Trajectory]:
    return webgym_filter([t for t in trajs if t.termination not in FAILED])


def _browseragent(trajs: list[Trajectory], cfg: Any) -> list[Trajectory]:
    return rft_select([t for t in trajs if t.termination not in FAILED], k=int(cfg.rollout.group_size))


RECIPES: dict[str, OnlineRecipe] = {
    "webagent_r1": OnlineRecipe("webagent_r1", "trajectory", "webagent_r1", _grpo),
    "openwebrl": OnlineRecipe("openwebrl", "turn", "per_turn", _openwebrl, _openwebrl_accept),
    "webgym": OnlineRecipe("webgym", "turn", "traj_sum", _webgym),
    "browseragent": OnlineRecipe("browseragent", "turn", "token_mean", _browseragent),
}


def get_recipe(name: str) -> OnlineRecipe:
    if name not in RECIPES:
        raise ValueError(f"recipe {name!r} has no online RL loop; choose one of {sorted(RECIPES)} "
                         "(use recipe='sft' or 'nnetnav' with scripts/train.py for demonstration files)")
    return RECIPES[name]


def make_samples(recipe: OnlineRecipe, trajs: Sequence[Trajectory], cfg: Any) -> tuple[list[Trajectory], list[Sample]]:
    """Reward/advantage/filter, then cut into samples with the config's (or the recipe's) cut and norm."""
    prepared = recipe.prepare(list(trajs), cfg)
    per = cfg.data.per or recipe.per
    norm = cfg.data.norm or recipe.norm
    return prepared, build_samples(prepared, per=per, norm=norm, max_len=int(cfg.train.seq_len))
