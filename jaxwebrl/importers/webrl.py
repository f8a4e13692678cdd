"""WebRL / WebAgent-R1 behaviour-cloning data: the LLaMA-Factory ShareGPT file `web_policy_sft`
(THUDM/WebRL LLaMA-Factory/data/dataset_info.json: formatting "sharegpt", messages column "conversations"),
the 9,460 public trajectories WebAgent-R1 clones (paper §3.1, "following Qi et al. (2025)")."""

from __future__ import annotations

import re
from typing import Any, Iterable

from jaxwebrl.importers.common import Episode, ImportedTurn, Record

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
         "observation": "user", "function_call": "assistant"}
_INSTRUCTION = re.compile(r"Task Instruction:\s*(.*)")


def episodes(records: Iterable[Record]) -> list[Episode]:
    out = []
    for rec in records:
        conv = rec.field("conversations", list)
        if not conv:
            raise rec.error("field 'conversations' is empty")
        context: list[tuple[str, str]] = []
        system = rec.data.get("system")
        if isinstance(system, str) and system:
            context.append(("system", system))
        turns, last_user = [], ""
        for k, msg in enumerate(conv):
            who = rec.field("from", str, msg, f"conversations[{k}]")
            text = rec.field("value", str, msg, f"conversations[{k}]")
            if who not in ROLES:
                raise rec.error(f"conversations[{k}].from is {who!r}; expected one of {sorted(ROLES)}")
            role = ROLES[who]
            if role == "assistant":
                turns.append(ImportedTurn(list(context), text, last_user))
            elif role == "user":
                last_user = text
            context.append((role, text))
        if not turns:
            raise rec.error("no 'gpt' message in 'conversations': nothing to train on")
        first_user = next((c for r, c in context if r == "user"), "")
        m = _INSTRUCTION.search(first_user)
        instruction = m.group(1).strip() if m else ""
        task_id = f"webrl/{instruction[:80]}" if instruction else f"webrl/line{rec.line}"
        out.append(Episode(task_id, turns, 1.0, f"{task_id}#{rec.line}", conversation=True,
                           metadata={"source": "webrl", "file": rec.path, "line": rec.line, "instruction": instruction}))
    return out


def trace_episodes(records: Iterable[Record]) -> list[Episode]:
    """WebRL rollout traces (THUDM/WebRL scripts/process_data.py `trace_process` / `build_policy_data`): one
    step per line {"trace_id", "index", "target", "html", "response" (or "fixed_response"), "score"?}; a file
    may hold several traces (grouped by trace_id, ordered by index). The policy's chat is rebuilt the way
    `build_policy_data` lays it out: the first user turn "Task Instruction: <target>\\n\\nRound 0\\n\\n<html>",
    then "Round k\\n\\n<html>" after each response."""
    traces: dict[Any, list[tuple[int, Record]]] = {}
    for rec in records:
        rec.field("target", str)
        rec.field("html", str)
        if "fixed_response" not in rec.data:
            rec.field("response", str)
        key = rec.data.get("trace_id", rec.path)
        index = rec.data.get("index", len(traces.get(key, [])))
        traces.setdefault(key, []).append((index if isinstance(index, int) else 0, rec))
    out = []
    for key, steps in traces.items():
        steps.sort(key=lambda s: s[0])
        first = steps[0][1]
        target = first.data["target"]
        context: list[tuple[str, str]] = []
        turns = []
        for k, (_, rec) in enumerate(steps):
            html = rec.data["html"]
            user = f"Task Instruction: {target}\n\nRound {k}\n\n{html}" if k == 0 else f"Round {k}\n\n{html}"
            context.append(("user", user))
            response = rec.data.get("fixed_response", rec.data.get("response"))
            turns.append(ImportedTurn(list(context), response, html))
            context.append(("assistant", response))
        score = steps[-1][1].data.get("score", 0.0)
        reward = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else 0.0
        task_id = f"webrl/{target[:80]}"
        out.append(Episode(task_id, turns, reward, f"{task_id}#{key}", conversation=True,
                           metadata={"source": "webrl_traces", "file": first.path, "line": first.line,
                                     "trace_id": key, "instruction": target}))
    return out
