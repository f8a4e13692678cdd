"""OpenWebRL's curated SFT trajectories: `OpenWebRL_SFT_trajectories.jsonl` (HF OpenWebRL/OpenWebRL-SFT-
Trajectories), one row per turn with "rollout_idx" and "metadata" {"task_id", "turn_index", "messages" (the
chat so far: system, user, assistant, tool ...), "images", "intent", "reward", ...}; rows are grouped by
(task_id, rollout_idx) and the longest row's `metadata.messages` is the episode (as OpenWebRL/OpenWebRL
sft/convert_to_openai_messages.py does). The canonical Stage-1 form of that script ({"tools", "messages"
with structured "tool_calls", "metadata"}) is read as well."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from jaxwebrl.importers.common import Episode, ImportedTurn, Record

VISION = "<|vision_start|><|image_pad|><|vision_end|>"
SCREENSHOT = "[screenshot]"
_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


def our_arguments(name: str, args: Any) -> Any:
    """OpenWebRL's released calls use `point_2d: [x, y]` and `done(response=...)`; our openwebrl space reads
    `x`, `y` and `done(answer=...)`. Other arguments are kept as they are."""
    if not isinstance(args, dict):
        return args
    args = dict(args)
    point = args.pop("point_2d", None)
    if isinstance(point, list) and len(point) == 2:
        args["x"], args["y"] = point
    elif point is not None:
        args["point_2d"] = point
    if name == "done" and "response" in args and "answer" not in args:
        args["answer"] = args.pop("response")
    return args


def _rewrite(text: str) -> str:
    def one(m: re.Match) -> str:
        try:
            call = json.loads(m.group(1))
            call["arguments"] = our_arguments(call["name"], call.get("arguments", {}))
        except (ValueError, KeyError, TypeError):
            return m.group(0)
        return "<tool_call>" + json.dumps(call) + "</tool_call>"

    return _CALL.sub(one, text)


def _content(rec: Record, msg: dict, where: str) -> str:
    content = msg.get("content", "")
    if content is None:
        return ""
    if isinstance(content, str):
        return content.replace(VISION, SCREENSHOT)
    if isinstance(content, list):  # OpenAI parts: text kept, images become a placeholder
        return "".join(p.get("text", "") if p.get("type") == "text" else SCREENSHOT for p in content if isinstance(p, dict))
    raise rec.error(f"field '{where}.content' must be a string or a list of parts")


def _assistant(rec: Record, msg: dict, where: str) -> str:
    text = _content(rec, msg, where)
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        if "name" not in fn:
            raise rec.error(f"missing field '{where}.tool_calls[].function.name'")
        args = fn.get("arguments", {})
        args = json.loads(args) if isinstance(args, str) else args
        text += "\n<tool_call>" + json.dumps({"name": fn["name"], "arguments": args}) + "</tool_call>"
    return _rewrite(text)


def _episode(rec: Record, skeleton: list, task_id: str, rollout: Any, reward: float, meta: dict) -> Episode:
    context: list[tuple[str, str]] = []
    turns = []
    for k, msg in enumerate(skeleton):
        where = f"messages[{k}]"
        role = rec.field("role", str, msg, where)
        if role == "assistant":
            text = _assistant(rec, msg, where)
            turns.append(ImportedTurn(list(context), text, next((c for r, c in reversed(context) if r != "system"), "")))
        else:
            text = _content(rec, msg, where)
        context.append((role, text))
    if not turns:
        raise rec.error("the episode's messages have no assistant turn: nothing to train on")
    return Episode(f"openwebrl/{task_id}", turns, reward, f"openwebrl/{task_id}/{rollout}", conversation=True,
                   metadata={"source": "openwebrl", "file": rec.path, "line": rec.line, "rollout_idx": rollout, **meta})


def _reward(meta: dict) -> float:
    r = meta.get("reward", 1.0)
    return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else 1.0


def episodes(records: Iterable[Record]) -> list[Episode]:
    rows: dict[tuple, tuple[int, Record]] = {}
    out = []
    for rec in records:
        meta = rec.field("metadata", dict)
        if "tools" in rec.data or "rollout_idx" not in rec.data:  # canonical Stage-1 episode
            msgs = rec.field("messages", list)
            out.append(_episode(rec, msgs, str(meta.get("task_id", f"line{rec.line}")), meta.get("rollout_idx", 0),
                                _reward(meta), {"intent": meta.get("intent", "")}))
            continue
        rec.field("messages", list, meta, "metadata")
        task = rec.field("task_id", (str, int), meta, "metadata")
        turn = meta.get("turn_index", 0)
        key = (task, rec.data["rollout_idx"])
        if key not in rows or turn >= rows[key][0]:
            rows[key] = (turn if isinstance(turn, int) else 0, rec)
    for (task, rollout), (_, rec) in rows.items():
        meta = rec.data["metadata"]
        out.append(_episode(rec, meta["messages"], str(task), rollout, _reward(meta), {"intent": meta.get("intent", "")}))
    return out
