"""WebGym's task synthesis by rubric decomposition (paper §3.2, Algorithm 1 lines 7-10, Figure 2), as a tool.

A task whose rubric has at least 2 fact groups, at least one of them "large" (3 or more facts), yields one
new task per *proper* subset of its groups that contains a large group; the new task's rubric is that subset
and its difficulty the subset's fact count. The new task's wording comes from a writer (the paper prompts an
LLM with the original task and the chosen groups, E.6): `ModelTaskWriter` does that through any judge backend,
or pass any async callable.

Output: a JSON list in the `envs/tasks/*.json` format (task_id, site, difficulty, category, intent, start_url,
eval) plus `rubric`, `difficulty_facts` and `parent_task_id`. Decomposed tasks have no reference answer of
their own, so `eval.eval_types` is empty (the rule evaluator gives 0) and `judge` names the rubric judge that
scores them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from jaxwebrl.judges.backends import CallRunner, ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import parse_rubric
from jaxwebrl.judges.parsing import parse_field
from jaxwebrl.judges.webgym import difficulty, difficulty_level

LARGE_GROUP = 3
Groups = Sequence[tuple[str, Sequence[str]]]
TaskWriter = Callable[[str, Groups], Awaitable[str | None]]

TASK_WRITER_PROMPT = (
    "You write web tasks. You are given an original web task and a selection of fact groups taken from its "
    "evaluation rubric. Write a new, self-contained task for the same website that asks for exactly the facts "
    "in the selected groups: nothing from the groups that were left out, nothing new. Keep the original "
    "wording where you can.\n"
    "End with exactly one line: \"Task: <the new task>\"."
)


def decomposition_subsets(groups: Groups) -> list[tuple[int, ...]]:
    """Indices of every proper, non-empty subset of `groups` that holds a large group (empty when the task
    does not qualify: fewer than 2 groups or no large one)."""
    large = {i for i, (_, facts) in enumerate(groups) if len(facts) >= LARGE_GROUP}
    if len(groups) < 2 or not large:
        return []
    out = []
    for size in range(1, len(groups)):
        for combo in itertools.combinations(range(len(groups)), size):
            if large.intersection(combo):
                out.append(combo)
    return out


class ModelTaskWriter:
    """The E.6 task-proposal call through a judge backend; returns None when the answer has no "Task:" line."""

    def __init__(self, backend: JudgeBackend, options: JudgeOptions | None = None) -> None:
        self.runner = CallRunner(backend, options or JudgeOptions())

    def messages(self, intent: str, groups: Groups) -> list[ChatMessage]:
        listed = "\n".join(f"Group {i + 1}: {name}\nFacts:\n" + "\n".join(f"- {f}" for f in facts)
                           for i, (name, facts) in enumerate(groups))
        return [ChatMessage("system", TASK_WRITER_PROMPT),
                ChatMessage("user", f"Original task: {intent}\n\nSelected fact groups:\n{listed}")]

    async def __call__(self, intent: str, groups: Groups) -> str | None:
        call = await self.runner.call("task_writer", self.messages(intent, groups))
        return None if call.error_kind else parse_field(call.text, "Task", max_chars=1000)


async def synthesize_tasks(specs: Sequence[Mapping[str, Any]], writer: TaskWriter) -> tuple[list[dict[str, Any]], list[str]]:
    """New task specs from every qualifying spec; also returns why candidates were dropped (writer failures)."""
    jobs: list[tuple[Mapping[str, Any], tuple[int, ...], list[tuple[str, tuple[str, ...]]]]] = []
    for spec in specs:
        if not spec.get("rubric"):
            continue
        groups = list(parse_rubric(spec["rubric"]))
        for subset in decomposition_subsets(groups):
            jobs.append((spec, subset, [groups[i] for i in subset]))
    intents = await asyncio.gather(*(writer(str(spec["intent"]), chosen) for spec, _, chosen in jobs))
    out: list[dict[str, Any]] = []
    dropped: list[str] = []
    for (spec, subset, chosen), intent in zip(jobs, intents):
        tag = f"{spec['task_id']}_g{''.join(str(i + 1) for i in subset)}"
        if not intent:
            dropped.append(f"{tag}: the task writer gave no task")
            continue
        facts = difficulty(chosen)
        new = {k: spec[k] for k in ("site", "category", "start_url") if k in spec}
        new.update(task_id=tag, intent=intent, difficulty=difficulty_level(facts), difficulty_facts=facts,
                   parent_task_id=spec["task_id"],
                   rubric={"groups": [{"name": n, "facts": list(f)} for n, f in chosen]},
                   eval={"eval_types": []}, judge="webgym_rubric")
        out.append(new)
    return out, dropped


def write_task_file(tasks: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write tasks as one JSON list (the envs/tasks format); refuses to overwrite an existing file."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; synthesized tasks go to a new file (choose another name)")
    ids = [t["task_id"] for t in tasks]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate task ids among the synthesized tasks: {sorted({i for i in ids if ids.count(i) > 1})}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[\n" + ",\n".join(" " + json.dumps(t, ensure_ascii=False) for t in tasks) + "\n]\n")
    return path
