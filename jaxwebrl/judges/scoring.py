"""EpisodeScorer: the rollout collector's per-episode hook that judges an episode the moment it ends.

The collector (`jaxwebrl.rollout.collector.Collector(scorer=...)`) awaits the scorer inside the episode's own
task, right after the browser context is closed, so each episode is judged as soon as it ends, while its
group's other episodes still run, and the group is handed over (to dynamic sampling, then training) with
judged rewards. Episodes wait only for a free slot of the scorer's `JudgeQueue` (episodes judged at once)
and of the judge's `CallRunner` (model calls in flight); there is no barrier anywhere.

Which episodes are judged follows `reward.source`: `judge` every episode, `rule_or_judge` those whose task
has no rule evaluator (`metadata['rule_evaluator'] = False`, written by the agent loop). An episode that
already trains nothing (a crashed browser: mask 0) is not sent to the judge. A judge timeout, a dead judge
server or an unparsable verdict gives termination `judge_error` and loss mask 0 (OpenWebRL A.4); the run
goes on. The judged outcome is `metadata['judged_success']`; the recipe's reward function maps it.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from jaxwebrl.data.records import Trajectory
from jaxwebrl.judges.base import Judge, TaskSpecLookup
from jaxwebrl.judges.config import JudgeConfig, make_judge
from jaxwebrl.judges.queue import JudgeQueue
from jaxwebrl.judges.reward import (
    JUDGED_SOURCES, JUDGED_SUCCESS_KEY, has_rule_evaluator, needs_judge, record_verdict,
)


class EpisodeScorer:
    """See the module doc. `await scorer(trajectory)` judges it in place when the source says so."""

    def __init__(self, judge: Judge, source: str, *, queue_concurrency: int = 16) -> None:
        if source not in JUDGED_SOURCES:
            raise ValueError(f"EpisodeScorer needs a judged reward source {JUDGED_SOURCES}, got {source!r}")
        self.judge = judge
        self.source = source
        self.queue = JudgeQueue(judge, queue_concurrency, keep_results=False)
        self.counts: collections.Counter[str] = collections.Counter()

    async def __call__(self, traj: Trajectory) -> None:
        if not needs_judge(self.source, has_rule_evaluator(traj)):  # type: ignore[arg-type]
            self.counts["rule"] += 1
            return
        if traj.num_trained_turns == 0:  # already masked (env_error): nothing of it trains, no judge call
            traj.metadata["reward_source"] = "judge"
            traj.metadata[JUDGED_SUCCESS_KEY] = False
            self.counts["not_judged"] += 1
            return
        started = time.time()
        verdict = await self.queue.submit(traj)
        record_verdict(traj, verdict)
        traj.metadata["judge"].update(started_at=started, finished_at=time.time())
        self.counts["judged"] += 1
        self.counts["calls"] += sum(max(1, c.attempts) for c in verdict.calls)
        self.counts["errors"] += verdict.error is not None
        fired = sum(c.timeouts for c in verdict.calls)
        if fired:  # every judge timeout that fired, in the episode's own record (rollout metrics sum them)
            timeouts = traj.metadata.setdefault("timeouts", {})
            timeouts["judge"] = timeouts.get("judge", 0) + fired
        self.counts["successes"] += bool(traj.metadata[JUDGED_SUCCESS_KEY])

    @property
    def max_in_flight(self) -> int:
        """Most episodes judged at once so far (measured by the queue)."""
        return self.queue.max_in_flight

    def take_metrics(self) -> dict[str, float]:
        """Counts since the last call (one rollout round), as `rollout/judge_*` metrics; resets them."""
        c, self.counts = self.counts, collections.Counter()
        judged = c["judged"]
        return {"rollout/judged": float(judged), "rollout/judge_calls": float(c["calls"]),
                "rollout/judge_errors": float(c["errors"]), "rollout/rule_scored": float(c["rule"]),
                "rollout/judge_success_rate": c["successes"] / judged if judged else 0.0,
                "rollout/judge_max_in_flight": float(self.queue.max_in_flight)}

    async def close(self) -> None:
        close = getattr(self.judge, "close", None)
        if close is not None:
            await close()


def make_scorer(source: str, cfg: JudgeConfig, *, task_specs: TaskSpecLookup | None = None,
                mesh: Any | None = None) -> EpisodeScorer | None:
    """The scorer `reward.source` asks for, with the judge `reward.judge` describes; None when no judge is
    called (`rule`, `raw`)."""
    if source not in JUDGED_SOURCES:
        return None
    return EpisodeScorer(make_judge(cfg, task_specs=task_specs, mesh=mesh), source,
                         queue_concurrency=cfg.queue_concurrency)
