"""`webgym` action space: WebGym's coordinate mode, i.e. Qwen3-VL's own `computer_use` tool (the prompt WebGym
starts from, QwenLM-Team 2025) on 0..1000 screenshot coordinates, plus WebGym's navigation action.

    <tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [512, 86]}}</tool_call>

Actions: left_click / right_click / middle_click / double_click (coordinate), mouse_move (coordinate),
type (text: into the focused field, which is cleared first), key (keys: pressed together, e.g.
["ctrl", "a"]), scroll (pixels: positive up, negative down; optional coordinate to scroll at), wait (time,
seconds), answer (text: ends the episode with it), terminate (status: ends it), and WebGym's extension
go_back and visit_url (url). WebGym's exact prompt (its appendix E.1) is not in the paper text; the names
above are Qwen3-VL's. Execution and feedback are OpenWebRL's executor (`actions/openwebrl.py`): the same
coordinate mapping at any viewport and device scale factor, the same textual feedback, and bad input
(outside 0..1000, NaN, missing arguments) is an `Invalid action:` feedback, never a crash.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from jaxwebrl.browser.actions import openwebrl, scan
from jaxwebrl.browser.actions.base import (
    Action, ActionSpace, ExecResult, ParseError, ParseResult, is_number, never_raises, run_safely, strip_think,
)
from jaxwebrl.browser.session import BrowserSession

TOOL = "computer_use"
CLICKS = {"left_click": ("left", "single"), "right_click": ("right", "single"), "middle_click": ("middle", "single"),
          "double_click": ("left", "double")}
ACTIONS = (*CLICKS, "mouse_move", "type", "key", "scroll", "wait", "answer", "terminate", "go_back", "visit_url")
MAX_SCROLL_PX = 10_000

DESCRIPTION = """Call the computer_use tool as <tool_call>{"name": "computer_use", "arguments": {"action": ..., ...}}</tool_call>.
Actions: left_click, right_click, middle_click, double_click and mouse_move need coordinate [x, y] (0..1000 of the
screenshot width and height); type(text) types into the focused field; key(keys) presses keys together, e.g.
["ctrl", "a"]; scroll(pixels, positive up, negative down; coordinate optional); wait(time seconds);
go_back(); visit_url(url); answer(text) gives the final answer and ends the task; terminate(status) ends it."""


def _coordinate(args: dict[str, Any], key: str = "coordinate") -> tuple[float, float] | str:
    value = args.get(key)
    if not isinstance(value, list) or len(value) != 2:
        return f"{key} must be [x, y], got {value!r}"
    if not all(is_number(v, 0, 1000) for v in value):
        return f"{key} must be two numbers in 0..1000, got {value!r}"
    return float(value[0]), float(value[1])


def _translate(args: dict[str, Any]) -> Action | str:
    """One computer_use call -> the openwebrl action it runs as (or why it cannot)."""
    kind = args.get("action")
    if kind not in ACTIONS:
        return f"unknown computer_use action {kind!r}; actions: {', '.join(ACTIONS)}"
    raw = json.dumps({"name": TOOL, "arguments": args})
    if kind in CLICKS or kind == "mouse_move":
        xy = _coordinate(args)
        if isinstance(xy, str):
            return f"'{kind}' {xy}"
        if kind == "mouse_move":
            return Action("hover", {"x": xy[0], "y": xy[1]}, raw)
        button, click_type = CLICKS[kind]
        return Action("click", {"x": xy[0], "y": xy[1], "button": button, "click_type": click_type}, raw)
    if kind == "type":
        return Action("write", {"text": args["text"]}, raw) if isinstance(args.get("text"), str) else \
            "'type' needs text (a string)"
    if kind == "key":
        keys = args.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
            return "'key' needs keys: a non-empty list of key names, e.g. [\"ctrl\", \"a\"]"
        return Action("press_keys", {"keys": ["+".join(k.strip() for k in keys)]}, raw)
    if kind == "scroll":
        px = args.get("pixels")
        if not is_number(px, -MAX_SCROLL_PX, MAX_SCROLL_PX) or px == 0:
            return f"'scroll' pixels must be a non-zero number in -{MAX_SCROLL_PX}..{MAX_SCROLL_PX}, got {px!r}"
        out: dict[str, Any] = {"pixels": float(px)}
        if "coordinate" in args:
            xy = _coordinate(args)
            if isinstance(xy, str):
                return f"'scroll' {xy}"
            out["x"], out["y"] = xy
        return Action("scroll_pixels", out, raw)
    if kind == "wait":
        secs = args.get("time", 1.0)
        if not is_number(secs, 0, openwebrl.MAX_WAIT_S):
            return f"'wait' time must be a finite number in 0..{openwebrl.MAX_WAIT_S:g}, got {secs!r}"
        return Action("wait", {"seconds": float(secs)}, raw)
    if kind == "answer":
        text = args.get("text")
        return Action("done", {"answer": text}, raw) if isinstance(text, str) else "'answer' needs text (a string)"
    if kind == "terminate":
        return Action("done", {"answer": str(args.get("status", ""))}, raw)
    if kind == "go_back":
        return Action("go_back", {}, raw)
    url = args.get("url")
    return Action("goto_url", {"url": url}, raw) if isinstance(url, str) and url.strip() else "'visit_url' needs a url"


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    body = strip_think(scan.bound(text, 2 * scan.MAX_RESPONSE_CHARS))
    blocks = [m.group(1) for m in itertools.islice(scan.pairs(body, "<tool_call>", "</tool_call>"), openwebrl.MAX_CALLS)]
    if not blocks:
        return ParseError('no tool call found; use <tool_call>{"name": "computer_use", "arguments": {"action": ...}}'
                          "</tool_call>", text[:200])
    out: list[Action] = []
    for i, block in enumerate(blocks):
        scan.METER.add(len(block))
        try:
            obj = json.loads(block.strip())
        except (ValueError, RecursionError) as exc:
            return ParseError(f"tool call {i + 1} is not valid JSON ({type(exc).__name__})", block[:200])
        if not isinstance(obj, dict) or obj.get("name") != TOOL or not isinstance(obj.get("arguments"), dict):
            return ParseError(f'tool call {i + 1} must be {{"name": "{TOOL}", "arguments": {{"action": ...}}}}',
                              block[:200])
        action = _translate(obj["arguments"])
        if isinstance(action, str):
            return ParseError(action, block[:200])
        out.append(action)
    return out


parse = never_raises(_parse, "the computer_use calls")


async def execute(session: BrowserSession, action: Action) -> ExecResult:
    """Run one translated call with OpenWebRL's executor (and its feedback); pixel scrolls here."""
    if action.name != "scroll_pixels":
        return await openwebrl.execute(session, action)
    a = action.args

    async def run() -> ExecResult:
        page = session.page
        if "x" in a:
            px, py = openwebrl.to_css_pixels(a["x"], a["y"], await session.viewport())
            await page.mouse.move(px, py)
        moved = await session.wheel(0, -a["pixels"])  # Qwen: positive scrolls up
        d = "up" if a["pixels"] > 0 else "down"
        msg = f"Succeed: 'scroll' {d} by {abs(a['pixels']):g} pixels executed."
        if not moved:
            msg += " Note: page scroll position did not change and may be at a boundary."
        return ExecResult(msg)

    return await run_safely(run(), "scroll")


SPACE = ActionSpace(name="webgym", parse=parse, execute=execute, description=DESCRIPTION, multi_call=True)
