"""The section of an online run that belongs to the recipes: `reward` (the main job's `rl`, `bc` and `report`
are in `jaxwebrl.main_job.config`).

`reward.source` says where every online recipe's reward comes from, through one path: `rule` (the task's
rule evaluator, mapped by the recipe's reward function), `raw` (the environment's own reward), `judge` (the
model judge `reward.judge` describes scores every episode as it ends) or `rule_or_judge` (the rule where
the task has a rule evaluator, the judge where it has none: open-web tasks).
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.fields import FieldError, one_of
from jaxwebrl.judges.config import REWARD_JUDGE_KINDS, JudgeConfig
from jaxwebrl.judges.reward import JUDGED_SOURCES, REWARD_SOURCES


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    source: str = "rule"  # rule | raw | judge | rule_or_judge (module doc)
    judge: JudgeConfig = dataclasses.field(default_factory=JudgeConfig)  # used when source calls a judge
    # A positive reward times step_discount ** (turns - 1): a success after wasted steps is worth less than one
    # at once (1 = off, the papers' binary success).
    step_discount: float = 1.0

    def __post_init__(self) -> None:
        one_of("source", self.source, REWARD_SOURCES)
        if not 0.0 < self.step_discount <= 1.0:
            raise FieldError("step_discount", f"{self.step_discount} is not in (0, 1]",
                             "use 1 (no discount) or e.g. 0.5 (each extra step halves a success's reward)")
        if self.source not in JUDGED_SOURCES:
            return
        if self.judge.kind not in REWARD_JUDGE_KINDS:
            raise FieldError("judge.kind", f"{self.judge.kind!r} writes instructions, it does not score episodes",
                             f"use one of {REWARD_JUDGE_KINDS} with reward.source={self.source!r}")
        try:
            self.judge.require_backend()
        except FieldError as e:
            raise FieldError(f"judge.{e.field}", f"{e.problem} (reward.source={self.source!r} calls the judge)",
                             e.fix) from None

    @property
    def uses_judge(self) -> bool:
        return self.source in JUDGED_SOURCES
