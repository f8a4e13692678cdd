"""WebRL / WebAgent-R1 behaviour-cloning data: the LLaMA-Factory ShareGPT file `web_policy_sft`
(THUDM/WebRL LLaMA-Factory/data/dataset_info.json: formatting "sharegpt", messages column "conversations"),
the 9,460 public trajectories WebAgent-R1 clones (paper §3.1, "following Qi et al. (2025)")."""

from __future__ import annotations

import re
from typing import Iterable

from jaxwebrl.data.importers.common import Episode, ImportedTurn, Record

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
