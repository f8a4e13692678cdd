"""BrowserAgent SFT / RFT data (TIGER-Lab/BrowserAgent): per-step records as its generators write them
({"input_seq", "output_seq"}: data_generate.py, and the RFT selection extract_rft_multi.py), or the
ms-swift form of the same steps ({"messages": [..., user, assistant]}, swift_switch.py; the
TIGER-Lab/BrowserAgent-Data release). Consecutive steps with the same objective form one episode, which ends
after a `stop` action (how extract_rft_multi.py cuts them)."""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

from jaxwebrl.importers.common import Episode, ImportedTurn, Record

_OBJECTIVE = re.compile(r"Objective:\s*(.*?)\n", re.S)
_ACTION = re.compile(r"```(.*?)```", re.S)


def _step(rec: Record) -> tuple[list[tuple[str, str]], str]:
    if "messages" in rec.data:
        msgs = rec.field("messages", list)
        context = [(rec.field("role", str, m, f"messages[{k}]"), rec.field("content", str, m, f"messages[{k}]"))
                   for k, m in enumerate(msgs)]
        if len(context) < 2 or context[-1][0] != "assistant":
            raise rec.error("field 'messages' must end with an assistant message")
        return context[:-1], context[-1][1]
    if "input_seq" not in rec.data and "output_seq" not in rec.data:
        raise rec.error("missing field 'input_seq' (or 'messages'): not a BrowserAgent step record")
    return [("user", rec.field("input_seq", str))], rec.field("output_seq", str)


def episodes(records: Iterable[Record]) -> list[Episode]:
    out: list[Episode] = []
    current: Episode | None = None
    for rec in records:
        context, response = _step(rec)
        user = next((c for r, c in reversed(context) if r == "user"), "")
        m = _OBJECTIVE.search(user)
        if m is None:
            raise rec.error("the user message has no 'Objective: ...' line, so the step's question is unknown")
        question = m.group(1).strip()
        if current is None or current.metadata["question"] != question:
            digest = hashlib.sha1(question.encode()).hexdigest()[:12]
            current = Episode(f"browseragent/{digest}", [], 1.0, metadata={
                "source": "browseragent", "file": rec.path, "line": rec.line, "question": question})
            out.append(current)
        current.turns.append(ImportedTurn(context, response, user))
        action = _ACTION.findall(response)
        if action and action[-1].strip().startswith("stop"):
            current = None  # the next step with the same question is another rollout
    for i, ep in enumerate(out):
        ep.group_id = f"{ep.task_id}#{i}"
    return out
