"""NNetNav demonstrations as released for instruction tuning: the JSONL written by
MurtyShikhar/NNetnav scripts/convert_to_sft.py (one record per step: "dataset", "id", "task_name",
"prompt", "output", "n_tokens", "messages" = [system, user, assistant])."""

from __future__ import annotations

from typing import Iterable

from jaxwebrl.importers.common import Episode, ImportedTurn, Record


def episodes(records: Iterable[Record]) -> list[Episode]:
    grouped: dict[str, Episode] = {}
    for rec in records:
        msgs = rec.field("messages", list)
        if len(msgs) < 2:
            raise rec.error("field 'messages' needs at least a user and an assistant message")
        context = []
        for k, m in enumerate(msgs):
            context.append((rec.field("role", str, m, f"messages[{k}]"), rec.field("content", str, m, f"messages[{k}]")))
        role, response = context[-1]
        if role != "assistant":
            raise rec.error(f"messages[{len(msgs) - 1}].role is {role!r}; the last message must be the assistant's")
        task = rec.data.get("task_name", rec.data.get("id"))
        if not isinstance(task, str) or not task:
            raise rec.error("missing field 'task_name' (or 'id'): steps cannot be grouped into trajectories")
        user = next((c for r, c in reversed(context[:-1]) if r == "user"), "")
        ep = grouped.get(task)
        if ep is None:
            ep = grouped[task] = Episode(f"nnetnav/{task}", [], 1.0, metadata={
                "source": "nnetnav", "file": rec.path, "line": rec.line, "dataset": rec.data.get("dataset", "")})
        ep.turns.append(ImportedTurn(context[:-1], response, user))
    return list(grouped.values())
