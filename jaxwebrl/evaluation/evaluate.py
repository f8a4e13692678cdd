"""Greedy evaluation of a policy on held-out task instances: per-task success with a confidence interval."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any, Callable, Collection, Sequence

from jaxwebrl.agent.episode import AgentConfig, EpisodeResult, run_episode
from jaxwebrl.agent.limits import OperationLimits
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory
from jaxwebrl.engines.base import Engine


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sound for small n and rates near 0 or 1)."""
    if n == 0:
        return 0.0, 0.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclasses.dataclass
class EvalReport:
    """Success per task and overall, with episode counts and 95% intervals."""

    per_task: dict[str, tuple[int, int]]  # task -> (successes, episodes)
    terminations: dict[str, int]
    mean_steps: float
    outcomes: dict[str, bool] = dataclasses.field(default_factory=dict)  # "task@seed" -> success, for pairing
    # every evaluated episode, in (task, seed) order, for the trajectory viewer (not in to_dict/eval.json)
    trajectories: list[Trajectory] = dataclasses.field(default_factory=list, repr=False)
    timeouts: dict[str, int] = dataclasses.field(default_factory=dict)  # safety limits that fired, by kind

    @property
    def successes(self) -> int:
        return sum(s for s, _ in self.per_task.values())

    @property
    def episodes(self) -> int:
        return sum(n for _, n in self.per_task.values())

    @property
    def success_rate(self) -> float:
        return self.successes / max(1, self.episodes)

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.episodes)

    def on_tasks(self, tasks: Collection[str]) -> "EvalReport":
        """This report on `tasks` only (per-task counts and paired outcomes; terminations stay the whole run's)."""
        return dataclasses.replace(self, per_task={t: v for t, v in self.per_task.items() if t in tasks},
                                   outcomes={k: v for k, v in self.outcomes.items() if k.rsplit("@", 1)[0] in tasks})

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.interval
        return {"success_rate": self.success_rate, "ci_low": lo, "ci_high": hi, "episodes": self.episodes,
                "per_task": {k: {"successes": s, "episodes": n} for k, (s, n) in self.per_task.items()},
                "terminations": self.terminations, "mean_steps": self.mean_steps, "outcomes": self.outcomes,
                "timeouts": self.timeouts}


@dataclasses.dataclass(frozen=True)
class PairedDifference:
    """Success of policy b minus policy a on the same episodes (task, seed): the fair way to compare two
    policies evaluated on one held-out set, tighter than comparing their separate intervals."""

    n: int
    b_only: int  # episodes b solved and a did not
    a_only: int
    diff: float
    ci_low: float
    ci_high: float
    p_value: float  # exact two-sided McNemar (sign) test on the discordant episodes


def paired_difference(a: EvalReport, b: EvalReport, z: float = 1.96) -> PairedDifference:
    keys = sorted(set(a.outcomes) & set(b.outcomes))
    n = len(keys)
    if n == 0:
        raise ValueError("the two reports share no (task, seed) episode; evaluate them on the same seeds")
    b_only = sum(b.outcomes[k] and not a.outcomes[k] for k in keys)
    a_only = sum(a.outcomes[k] and not b.outcomes[k] for k in keys)
    diff = (b_only - a_only) / n
    # Normal interval on the per-episode differences d in {-1, 0, 1}: var = E[d^2] - diff^2.
    var = max(0.0, (b_only + a_only) / n - diff * diff)
    half = z * math.sqrt(var / n)
    m = b_only + a_only
    tail = sum(math.comb(m, i) for i in range(min(b_only, a_only) + 1)) / 2**m if m else 1.0
    return PairedDifference(n, b_only, a_only, diff, diff - half, diff + half, min(1.0, 2 * tail))


async def evaluate(
    engine: Engine,
    tokenizer: Any,
    pool: BrowserPool,
    env_config: EnvConfig,
    tasks: Sequence[Any],
    seeds: Sequence[int],
    agent: AgentConfig,
    concurrency: int = 4,
    on_done: Callable[[], None] | None = None,
) -> EvalReport:
    """Play every (task, seed) once with greedy decoding; `concurrency` episodes at a time; `on_done` after
    each episode (a progress bar)."""
    agent = dataclasses.replace(agent, greedy=True, temperature=0.0)
    renderer, limits = PromptRenderer(tokenizer), OperationLimits()
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Any, seed: int) -> tuple[str, int, EpisodeResult]:
        async with sem:
            env = await pool.new_env(env_config)
            try:
                return task.task_id, seed, await run_episode(env, engine, tokenizer, task, seed, agent,
                                                             renderer=renderer, limits=limits)
            finally:
                await env.close()
                if on_done is not None:
                    on_done()

    results = await asyncio.gather(*(one(t, s) for t in tasks for s in seeds))
    per_task: dict[str, list[int]] = {}
    terms: dict[str, int] = {}
    steps = []
    outcomes: dict[str, bool] = {}
    timeouts: dict[str, int] = {}
    for task_id, seed, r in results:
        for kind, n in (r.trajectory.metadata.get("timeouts") or {}).items():
            timeouts[kind] = timeouts.get(kind, 0) + int(n)
        s, n = per_task.setdefault(task_id, [0, 0])
        per_task[task_id] = [s + int(r.success), n + 1]
        terms[r.trajectory.termination] = terms.get(r.trajectory.termination, 0) + 1
        steps.append(len(r.trajectory.turns))
        outcomes[f"{task_id}@{seed}"] = bool(r.success)
    return EvalReport({k: (v[0], v[1]) for k, v in per_task.items()}, terms, sum(steps) / max(1, len(steps)),
                      outcomes, [r.trajectory for _, _, r in results], timeouts)
