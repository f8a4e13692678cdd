"""The `rollout` and `tasks` config sections: how episodes are grouped and scheduled, and what they play.

`tasks` names the suite (a registered task suite, see `jaxwebrl.rollout.suites`), the training and
held-out tasks and how many seeds each split draws from. `rollout` sizes the groups, the concurrency of
each browser/engine operation, the task sampling, the horizon and replay.
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.agent.limits import OPERATIONS
from jaxwebrl.fields import FieldError, at_least, checked_pairs, comma_list, one_of

MODES = ("async", "lockstep")  # lockstep: the synchronous baseline of the benchmarks
TASK_SAMPLING = ("uniform", "learnability")


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 4  # G trajectories per task instance
    mode: str = "async"
    max_concurrent_groups: int = 2  # groups in flight; each holds `group_size` browser contexts
    max_policy_lag: int = 1  # drop groups whose oldest token is more than this many weight updates old
    groups_per_iteration: int = 4  # accepted groups per update
    max_groups_per_iteration: int = 0  # give up after this many tried (0 = 4x groups_per_iteration)
    # Per-operation concurrency (0 = unlimited; WebGym: separate pools per operation).
    limit_allocate: int = 0  # opening a browser context for an episode
    limit_navigate: int = 0  # the task's reset (load the start page)
    limit_execute: int = 0  # running the parsed actions
    limit_observe: int = 0  # snapshot, text and screenshot after reset and every step
    limit_evaluate: int = 0  # the rule evaluator at the end
    limit_release: int = 0  # closing the episode's context
    limit_generate: int = 0  # engine requests
    task_sampling: str = "uniform"  # uniform | learnability (draw tasks by p(1-p) of recent success)
    horizon_per_difficulty: str = ""  # e.g. 'easy:10,medium:20,hard:30' (WebGym)
    horizon_schedule: str = ""  # e.g. '0:15,100:30': from iteration 100 on, 30 steps (OpenWebRL)
    replay_iterations: int = 0  # WebGym replay: keep the last N iterations' samples (0 = off)
    replay_power: float = 1.0  # recency weight (age + 1) ** -power
    replay_samples: int = 0  # samples drawn per update from the replay buffer (0 = as many as collected)
    # times each sample trains on average over its life in the buffer, epochs included (WebGym's table: ~2);
    # caps an iteration's draw at reuse x its new samples / epochs (0 = no cap; rollout.tasks.replay_draw_count)
    replay_reuse: float = 0.0

    def __post_init__(self) -> None:
        one_of("mode", self.mode, MODES)
        one_of("task_sampling", self.task_sampling, TASK_SAMPLING)
        for name in ("group_size", "max_concurrent_groups", "groups_per_iteration"):
            at_least(name, getattr(self, name), 1)
        for name in ("max_policy_lag", "max_groups_per_iteration", "replay_iterations", "replay_samples",
                     "replay_reuse", *(f"limit_{op}" for op in OPERATIONS)):
            at_least(name, getattr(self, name), 0)
        self.per_difficulty_steps()
        self.schedule_steps()

    @property
    def limits(self) -> tuple[tuple[str, int], ...]:
        return tuple((op, getattr(self, f"limit_{op}", 0)) for op in OPERATIONS if getattr(self, f"limit_{op}", 0) > 0)

    def per_difficulty_steps(self) -> tuple[tuple[str, int], ...]:
        return tuple(checked_pairs("horizon_per_difficulty", self.horizon_per_difficulty, int).items())

    def schedule_steps(self) -> tuple[tuple[int, int], ...]:
        table = checked_pairs("horizon_schedule", self.horizon_schedule, int)
        try:
            return tuple((int(k), v) for k, v in table.items())
        except ValueError:
            raise FieldError("horizon_schedule", f"{self.horizon_schedule!r} has a non-integer iteration",
                             "write it as 'iteration:steps,...', e.g. '0:15,100:30'") from None


@dataclasses.dataclass(frozen=True)
class TasksConfig:
    suite: str = "miniwob"  # a registered suite (jaxwebrl.rollout.suites): miniwob | local_sites | yours
    train: str = ""  # comma-separated task names ('' = the suite's train split)
    eval: str = ""  # held-out tasks for evaluation ('' = the training tasks, on held-out seeds)
    train_seeds: int = 1000  # task instances to draw training episodes from
    eval_seeds: int = 10  # held-out instances per evaluation task
    difficulty_ratio: str = ""  # e.g. 'easy:2,medium:5,hard:3' (WebGym); '' = uniform over tasks
    # A suite's variant, passed as its `mode` ('' = the suite's default). MiniWoB++: 'jaxwebrl' (ours) or
    # 'browsergym' (browsergym-miniwob's seeding, page without the goal text, 332x214 viewport, success rule).
    suite_mode: str = ""

    def __post_init__(self) -> None:
        from jaxwebrl.rollout.suites import suite_names

        one_of("suite", self.suite, suite_names())
        at_least("train_seeds", self.train_seeds, 1)
        at_least("eval_seeds", self.eval_seeds, 1)
        self.ratio()

    def suite_kwargs(self) -> dict[str, object]:
        """Keyword arguments for the suite's constructor."""
        out: dict[str, object] = {"tasks": self.train_names} if self.train else {}
        if self.suite_mode:
            out["mode"] = self.suite_mode
        return out

    @property
    def train_names(self) -> list[str]:
        return comma_list(self.train)

    @property
    def eval_names(self) -> list[str]:
        return comma_list(self.eval)

    def ratio(self) -> dict[str, float]:
        return checked_pairs("difficulty_ratio", self.difficulty_ratio, float)
