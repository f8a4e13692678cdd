"""What RL had to learn from, task by task, read back from <workdir>/rl/rollouts.jsonl.

GRPO's advantage is a reward minus its group's mean, so a group whose members all succeed or all fail
contributes nothing: RL can only move a task through the groups on it whose rewards differ. Whether a task
improved under RL (its greedy success before and after, on held-out seeds) is therefore read beside how many
such groups the run met on it. rollouts.jsonl records every group played, kept or not
(`jaxwebrl.main_job.online`), so this is a count of what the run saw, not an estimate.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Collection, Mapping


@dataclasses.dataclass(frozen=True)
class TaskSignal:
    """One task's RL groups: how many were played, trained on, and had rewards that differ."""

    groups: int = 0  # groups played on the task
    trained: int = 0  # groups the recipe kept for its updates
    varied: int = 0  # groups whose members' rewards differ: the only ones with a nonzero GRPO advantage
    episodes: int = 0
    successes: int = 0  # sampled (not greedy) successes in those episodes

    def __add__(self, other: TaskSignal) -> TaskSignal:
        return TaskSignal(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


def read_signal(rollouts: Path) -> dict[str, TaskSignal]:
    """task -> TaskSignal from one run's rollouts.jsonl (one JSON trajectory a line, grouped by group_id)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    with rollouts.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                groups[row["group_id"]].append(row)
            except (json.JSONDecodeError, KeyError) as e:
                raise ValueError(f"{rollouts}:{n}: not a saved trajectory with a group_id ({e}); the file is "
                                 "written by the RL stage (`main_job.save_rollouts`)") from e
    out: dict[str, TaskSignal] = defaultdict(TaskSignal)
    for members in groups.values():
        rewards = [float(m["reward"]) for m in members]
        meta = members[0].get("metadata") or {}
        out[members[0]["task_id"]] += TaskSignal(
            groups=1, trained=int(meta.get("group_kept", True)), varied=int(max(rewards) > min(rewards)),
            episodes=len(members), successes=sum(_succeeded(m) for m in members))
    return dict(out)


def _succeeded(row: Mapping) -> bool:
    """The episode's own success flag (a shaped or judged reward is not success); a positive reward where an
    older file lacks the flag."""
    return bool((row.get("metadata") or {}).get("success", float(row["reward"]) > 0))


def sum_signals(signals: Collection[Mapping[str, TaskSignal]]) -> dict[str, TaskSignal]:
    """Task by task sum of several runs' signals (e.g. the seeds of one config)."""
    out: dict[str, TaskSignal] = defaultdict(TaskSignal)
    for signal in signals:
        for task, s in signal.items():
            out[task] += s
    return dict(out)


def _greedy(per_task: Mapping[str, tuple[int, int]], tasks: Collection[str]) -> str:
    s = sum(per_task.get(t, (0, 0))[0] for t in tasks)
    n = sum(per_task.get(t, (0, 0))[1] for t in tasks)
    return f"{s}/{n} ({s / n:.0%})" if n else "-"


def signal_table(signal: Mapping[str, TaskSignal], greedy: Mapping[str, Mapping[str, tuple[int, int]]],
                 subsets: Mapping[str, Collection[str]] | None = None) -> str:
    """Markdown: per task the groups played, trained on and with differing rewards, the sampled success in
    them, then each policy's greedy success on the held-out seeds (`greedy`: policy -> task -> (successes,
    episodes), e.g. BC and RL); then the same summed over each subset of tasks and over all of them."""
    names = list(greedy)
    lines = ["| task | groups played | trained on | rewards differ | sampled success | "
             + " | ".join(f"{n} (greedy)" for n in names) + " |", "|---|---|---|---|---|" + "---|" * len(names)]
    rows = [(t, [t]) for t in sorted(set(signal) | {t for g in greedy.values() for t in g})]
    rows += [(f"**{label}**", sorted(tasks)) for label, tasks in (subsets or {}).items()]
    rows.append(("**all tasks**", sorted(set(signal) | {t for g in greedy.values() for t in g})))
    for label, tasks in rows:
        s = sum((signal.get(t, TaskSignal()) for t in tasks), TaskSignal())
        sampled = f"{s.successes}/{s.episodes} ({s.successes / s.episodes:.0%})" if s.episodes else "-"
        lines.append(f"| {label} | {s.groups} | {s.trained} | {s.varied} | {sampled} | "
                     + " | ".join(_greedy(greedy[n], tasks) for n in names) + " |")
    return "\n".join(lines)


SIGNAL_NOTE = ("GRPO learns from a group only where its members' rewards differ (\"rewards differ\"); a task "
               "with few such groups had little to learn from, whatever its greedy success. Groups are counted "
               "from rl/rollouts.jsonl (every group played, kept or not); sampled success is RL's own "
               "exploration on training seeds, greedy success the held-out test seeds.")
