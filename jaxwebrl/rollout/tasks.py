"""Which task instance to play next, for how many steps, and which old samples to train on again.

- `TaskSampler`: uniform over tasks, or by a difficulty ratio (WebGym, e.g. easy:medium:hard = 2:5:3), with
  seeds drawn from the split's seed range; deterministic given its seed. With `learnability=True` a task is
  drawn with weight p(1 - p), p its recent success rate (`record`): tasks the policy always or never solves
  give GRPO groups without reward variance, so their episodes teach nothing and are drawn less.
- `HorizonSchedule`: max steps per difficulty (WebGym 10/20/30) and/or a schedule over iterations
  (OpenWebRL: 15 steps, later 30).
- `ReplayBuffer`: the last N iterations' samples, drawn with recency weight (iteration age + 1) ** -power;
  `replay_draw_count` sizes an iteration's draw so that each sample trains about as often as the paper's.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any, Generic, Iterator, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


class TaskSampler:
    """Endless (task, seed) stream. `ratio` maps difficulty -> weight; tasks need a `difficulty` attribute.

    `learnability`: within the chosen difficulty, weight each task by max(floor, p (1 - p)) where p is its
    success rate over the last `window` recorded episodes (0.5 before any), so the draws follow where the
    reward still varies. `floor` keeps every task in play, so a task that starts or stops being solved is
    noticed."""

    def __init__(self, tasks: Sequence[Any], seeds: Sequence[int], *, ratio: dict[str, float] | None = None,
                 seed: int = 0, learnability: bool = False, window: int = 24, floor: float = 0.05):
        if not tasks:
            raise ValueError("TaskSampler: no tasks to sample from; check the suite's task list and split")
        if not seeds:
            raise ValueError("TaskSampler: no seeds to sample from")
        self.tasks, self.seeds = list(tasks), list(seeds)
        self.rng = np.random.default_rng(seed)
        self.by_level: dict[str, list[Any]] = collections.defaultdict(list)
        for t in self.tasks:
            self.by_level[str(getattr(t, "difficulty", "any"))].append(t)
        if ratio:
            missing = [d for d, w in ratio.items() if w > 0 and d not in self.by_level]
            if missing:
                raise ValueError(f"TaskSampler ratio names difficulties {missing} that no task has; "
                                 f"present: {sorted(self.by_level)}")
        self.ratio = {d: w for d, w in (ratio or {}).items() if w > 0}
        if learnability and not (window >= 1 and 0.0 < floor <= 0.25):
            raise ValueError("TaskSampler: learnability needs window >= 1 and 0 < floor <= 0.25")
        self.learnability, self.floor = learnability, floor
        self.outcomes: dict[str, collections.deque[bool]] = collections.defaultdict(
            lambda: collections.deque(maxlen=window))

    def reseed(self, entropy: Any) -> None:
        """Restart the draws from `entropy` (e.g. (run seed, iteration): a round's schedule is then a function
        of the run seed, the iteration and the outcomes recorded before the round, not of earlier draws)."""
        self.rng = np.random.default_rng(entropy)

    def record(self, task_id: str, successes: Sequence[bool]) -> None:
        """Outcomes of finished episodes of `task_id` (the learnability weights read them)."""
        self.outcomes[task_id].extend(bool(s) for s in successes)

    def weight(self, task: Any) -> float:
        """The draw weight of `task` within its difficulty (1 without learnability)."""
        if not self.learnability:
            return 1.0
        seen = self.outcomes.get(task.task_id)
        p = float(np.mean(seen)) if seen else 0.5
        return max(self.floor, p * (1.0 - p))

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        return self

    def __next__(self) -> tuple[Any, int]:
        if self.ratio:
            levels = sorted(self.ratio)
            p = np.asarray([self.ratio[d] for d in levels], np.float64)
            level = levels[self.rng.choice(len(levels), p=p / p.sum())]
            pool = self.by_level[level]
        else:
            pool = self.tasks
        if self.learnability:
            w = np.asarray([self.weight(t) for t in pool], np.float64)
            task = pool[self.rng.choice(len(pool), p=w / w.sum())]
        else:
            task = pool[self.rng.integers(len(pool))]
        return task, int(self.seeds[self.rng.integers(len(self.seeds))])


@dataclasses.dataclass(frozen=True)
class HorizonSchedule:
    """Max steps for a task at an iteration: per-difficulty values win, else the last schedule entry whose
    start iteration has been reached, else `default`."""

    default: int = 15
    per_difficulty: tuple[tuple[str, int], ...] = ()  # (("easy", 10), ("medium", 20), ("hard", 30))
    schedule: tuple[tuple[int, int], ...] = ()  # ((0, 15), (100, 30)): from iteration 100 on, 30 steps

    def max_steps(self, task: Any, iteration: int) -> int:
        level = getattr(task, "difficulty", None)
        table = dict(self.per_difficulty)
        if level in table:
            return int(table[level])
        steps = self.default
        for start, value in sorted(self.schedule):
            if iteration >= start:
                steps = value
        return int(steps)


class ReplayBuffer(Generic[T]):
    """Samples of the last `max_iterations` iterations; `draw(n)` weights an item by (age + 1) ** -power."""

    def __init__(self, max_iterations: int = 4, power: float = 1.0, seed: int = 0):
        if max_iterations < 1:
            raise ValueError("ReplayBuffer.max_iterations must be >= 1")
        self.power = power
        self.iterations: collections.deque[list[T]] = collections.deque(maxlen=max_iterations)
        self.rng = np.random.default_rng(seed)

    def reseed(self, entropy: Any) -> None:
        """Restart the draws from `entropy` (deterministic runs: (run seed, iteration))."""
        self.rng = np.random.default_rng(entropy)

    def add_iteration(self, items: Sequence[T]) -> None:
        self.iterations.append(list(items))

    def __len__(self) -> int:
        return sum(len(it) for it in self.iterations)

    def draw(self, n: int) -> list[T]:
        """n items with replacement, newest iterations most likely."""
        items, weights = [], []
        for age, it in enumerate(reversed(self.iterations)):
            items += it
            weights += [(age + 1.0) ** -self.power] * len(it)
        if not items:
            return []
        p = np.asarray(weights) / np.sum(weights)
        return [items[i] for i in self.rng.choice(len(items), size=n, p=p)]


def replay_draw_count(new: int, requested: int, reuse: float = 0.0, epochs: int = 1) -> int:
    """How many samples an iteration draws from the replay buffer: `requested` (at least the `new` samples it
    collected), capped at `reuse * new / epochs` when `reuse` > 0.

    Draws are with replacement and weighted by recency, so over its life a sample is drawn on average (draws per
    iteration) / (new samples per iteration) times, and trained `epochs` times as often. WebGym sets the draw
    (1,200-1,800 an iteration) where that comes to ~2 (its table: "times each sample is trained ~2"). A fixed
    draw from a small buffer breaks that: 64 draws from 2 successes train each 32 x epochs times in one
    iteration, enough to teach a pretrained policy their last action everywhere (RESULTS.md, WebGym from
    SmolLM2). The cap keeps the paper's reuse at any scale; an iteration with no new samples draws none."""
    n = max(new, requested)
    if reuse > 0:
        n = min(n, math.ceil(reuse * new / max(epochs, 1)))
    return n
