"""Rollout batch -> samples by recipe: filters, rewards' advantages, sample construction in one call.

The online RL loop and `scripts/train.py` (training from trajectory records) both call
`trajectories_to_samples(config, trajectories)`; `GroupBatches` walks a fixed set of records in rollout
batches of whole groups with a resumable position.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import ml_collections

from jaxwebrl.data.records import Trajectory
from jaxwebrl.data.samples import Sample, build_samples
from jaxwebrl.train.advantages import (
    assign_group_advantages, drop_zero_variance_groups, group_by, mask_failed, rft_select, webgym_filter,
)


def trajectories_to_samples(config: ml_collections.ConfigDict, trajectories: Sequence[Trajectory],
                            rft_k: int = 4) -> list[Sample]:
    """Apply the recipe's filters and advantages, then cut samples (config.data.per / .norm).

    webagent_r1 / openwebrl: group advantages (OpenWebRL also masks infrastructure failures); optional
    dynamic sampling. webgym: weight 1[R=1], repetition filter. browseragent: RFT selection (k rollouts).
    sft / nnetnav: demonstrations as they are (weight 1)."""
    recipe = config.recipe
    trajs = list(trajectories)
    if recipe == "webgym":
        trajs = webgym_filter(trajs)
    elif recipe == "browseragent" and config.loss.kind == "sft" and config.data.kind in ("trajectories", "online"):
        trajs = rft_select(trajs, rft_k)
    elif config.loss.kind == "grpo":
        if recipe == "openwebrl":
            trajs = mask_failed(trajs)
        if config.train.dynamic_sampling:
            trajs = drop_zero_variance_groups(trajs)
        trajs = assign_group_advantages(trajs, bool(config.train.scale_adv_by_std), float(config.train.adv_eps))
    return build_samples(trajs, per=config.data.per, norm=config.data.norm, max_len=int(config.train.seq_len))


class GroupBatches:
    """Cycles over record groups, `groups_per_step` at a time; state = position (saved in checkpoints)."""

    def __init__(self, trajectories: Sequence[Trajectory], groups_per_step: int):
        self.groups = list(group_by(trajectories).values())
        self.n = groups_per_step
        self.pos = 0

    def __iter__(self) -> Iterator[list[Trajectory]]:
        return self

    def __next__(self) -> list[Trajectory]:
        out = [self.groups[(self.pos + i) % len(self.groups)] for i in range(self.n)]
        self.pos += self.n
        return [t for g in out for t in g]

    def get_state(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def set_state(self, state: dict[str, Any]) -> None:
        self.pos = int(state["pos"])
