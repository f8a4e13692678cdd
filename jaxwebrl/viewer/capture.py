"""What the trajectory viewer needs from one agent step, recorded by the agent loop while it still has it.

A `Turn` keeps the token ids, the model's text and the raw observation text; the viewer also wants the
observation exactly as the prompt showed it (with the feedback line), the parsed action, the environment's
feedback, the element the action hit (id, role, name, bbox) and, when screenshots are on, the page as the
action found it. `turn_info` builds that as a JSON-ready dict; `run_episode` keeps one per turn in
`Trajectory.metadata["turn_info"]` (an additive, optional field: records without it still render).

Screenshots are kept as taken (PNG, base64: decoding and shrinking one costs ~60-100 ms of CPU, too much
inside the agent loop); the viewer shrinks the ones it keeps (`episodes.thumbnail`) and draws the hit element
over the picture from its bbox. `AgentConfig.viewer_screenshots=False` keeps none (memory: one PNG per turn
while a batch is held).
"""

from __future__ import annotations

import base64
from typing import Any, Sequence

TURN_INFO_KEY = "turn_info"
_ELEMENT_KEYS = ("bid", "id", "element")  # the element-id argument of the bid / webarena / webagent_r1 spaces


def element_hit(actions: Sequence[Any], elements: Sequence[Any], viewport: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """The element the first element-targeting action aimed at: by id (bid/webarena/webagent_r1 spaces),
    or, for coordinate actions (openwebrl: x, y in 0..1000 of the viewport), the smallest visible element
    under the point. None when no action targets an element; {"id", "missing": True} when the id is not on
    the page."""
    by_id = {str(el.id): el for el in elements}
    for action in actions:
        args = getattr(action, "args", {}) or {}
        for key in _ELEMENT_KEYS:
            if args.get(key) is not None:
                el = by_id.get(str(args[key]))
                return _element_dict(el) if el is not None else {"id": str(args[key]), "missing": True}
        if "x" in args and "y" in args and viewport is not None:
            try:
                px, py = float(args["x"]) / 1000 * viewport[0], float(args["y"]) / 1000 * viewport[1]
            except (TypeError, ValueError):
                continue
            under = [el for el in elements if el.visible and _contains(el.bbox, px, py)]
            if under:
                return _element_dict(min(under, key=lambda el: el.bbox[2] * el.bbox[3]))
    return None


def action_text(action: Any) -> str:
    """A parsed action as a call with its bound arguments, element first, e.g. `click(bid='12', button='left')`: the same
    for every action space (the raw text some spaces keep is the model's, not the parse)."""
    args = getattr(action, "args", {}) or {}
    keys = [k for k in _ELEMENT_KEYS if k in args] + [k for k in args if k not in _ELEMENT_KEYS]
    return f"{action.name}(" + ", ".join(f"{k}={args[k]!r}" for k in keys) + ")"


def _contains(bbox: Sequence[float], x: float, y: float) -> bool:
    bx, by, bw, bh = bbox
    return bx <= x <= bx + bw and by <= y <= by + bh


def _element_dict(el: Any) -> dict[str, Any]:
    return {"id": str(el.id), "role": el.role, "name": (el.name or el.text or "")[:200], "tag": el.tag,
            "bbox": [round(float(v), 1) for v in el.bbox]}


def screenshot_uri(png: bytes) -> str:
    """A PNG as a data URI (no decoding: this runs inside the agent loop)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def turn_info(prompt_observation: str, observation: Any, result: Any, screenshots: bool = True) -> dict[str, Any]:
    """One turn for the viewer: `prompt_observation` is the observation message as the prompt showed it,
    `observation` the page the action was taken on, `result` the environment's StepResult. With
    `screenshots`, the page's screenshot (when the observation has one) is kept as taken."""
    actions = list(getattr(result, "actions", None) or [])
    meta = getattr(observation, "metadata", None)
    viewport = None
    if meta is not None and getattr(meta, "viewport", None):
        viewport = (float(meta.viewport[0]), float(meta.viewport[1]))
    elif getattr(observation, "screenshot", None):
        viewport = png_size(observation.screenshot)
    hit = element_hit(actions, getattr(observation, "elements", []) or [], viewport)
    info: dict[str, Any] = {
        "observation": prompt_observation,
        "parsed_action": "; ".join(action_text(a) for a in actions),
        "feedback": getattr(result, "feedback", "") or "",
        "element": hit,
        "env_termination": getattr(result, "termination_reason", None),
    }
    shot = getattr(observation, "screenshot", None)
    if shot and screenshots:
        info["screenshot"], info["screenshot_size"] = screenshot_uri(shot), png_size(shot)
    return info


def png_size(png: bytes) -> tuple[float, float] | None:
    """Width and height from a PNG's IHDR chunk (no decode)."""
    if len(png) >= 24 and png[:8] == b"\x89PNG\r\n\x1a\n":
        return float(int.from_bytes(png[16:20], "big")), float(int.from_bytes(png[20:24], "big"))
    return None
