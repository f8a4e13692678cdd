"""`openwebrl` action space: OpenWebRL's 13 coordinate tools as JSON tool calls.

    <tool_call>{"name": "click", "arguments": {"x": 512, "y": 86}}</tool_call>

Tools: click(x, y, button=left|right|middle, click_type=single|double), hover(x, y), drag(x1, y1, x2, y2),
write(text), press_keys(keys), scroll(direction, amount), goto_url(url), go_back(), wait(seconds),
new_tab(), switch_tab(index), close_tab(), done(answer). Coordinates are normalised to 0..1000 of the
viewport. A response may hold several calls; they run in order. Each call returns the paper's textual
feedback (A.2), built by comparing url, tab count, scroll position, focused element and the element under
the pointer before and after the call.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from jaxwebrl.browser.actions import common, scan
from jaxwebrl.browser.actions.base import (
    never_raises,
    Action, ActionSpace, ExecResult, ParseError, ParseResult, is_number, run_safely, strip_think,
)
from jaxwebrl.browser.session import BrowserSession, InvalidAction

TOOLS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "click": (("x", "y"), {"button": "left", "click_type": "single"}),
    "hover": (("x", "y"), {}),
    "drag": (("x1", "y1", "x2", "y2"), {}),
    "write": (("text",), {}),
    "press_keys": (("keys",), {}),
    "scroll": (("direction",), {"amount": 50}),
    "goto_url": (("url",), {}),
    "go_back": ((), {}),
    "wait": ((), {"seconds": 1.0}),
    "new_tab": ((), {}),
    "switch_tab": (("index",), {}),
    "close_tab": ((), {}),
    "done": ((), {"answer": ""}),
}
COORDS = ("x", "y", "x1", "y1", "x2", "y2")
MAX_WAIT_S = 30.0
MAX_CALLS = 64  # tool calls read from one response

DESCRIPTION = """Call tools as <tool_call>{"name": ..., "arguments": {...}}</tool_call>; several calls run in order.
click(x, y, button="left", click_type="single"|"double"); hover(x, y); drag(x1, y1, x2, y2);
write(text): clear the focused input and type; press_keys(keys): a key, a combo "ctrl+a" or a list;
scroll(direction="up"|"down"|"left"|"right", amount=percent of viewport); goto_url(url); go_back();
wait(seconds); new_tab(); switch_tab(index, 0-based); close_tab(); done(answer).
Coordinates are 0..1000 of the screenshot width/height."""


def _validate(name: str, args: dict[str, Any]) -> dict[str, Any] | str:
    required, defaults = TOOLS[name]
    out = dict(defaults)
    out.update(args)
    missing = [k for k in required if k not in args]
    if missing:
        return f"'{name}' is missing argument(s) {missing}"
    unknown = set(args) - set(required) - set(defaults)
    if unknown:
        return f"'{name}' got unknown argument(s) {sorted(unknown)}"
    for k in COORDS:
        if k in out:
            v = out[k]
            if not is_number(v, 0, 1000):
                return f"'{name}' coordinate {k} must be a number in 0..1000, got {v!r}"
    if name == "click":
        if out["button"] not in ("left", "right", "middle"):
            return f"'click' button must be left, right or middle, got {out['button']!r}"
        if out["click_type"] not in ("single", "double"):
            return f"'click' click_type must be single or double, got {out['click_type']!r}"
    if name == "write" and not isinstance(out["text"], str):
        return "'write' text must be a string"
    if name == "press_keys":
        keys = out["keys"]
        if isinstance(keys, str):
            keys = [keys]
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k.strip() for k in keys):
            return "'press_keys' keys must be a key name or a non-empty list of key names"
        out["keys"] = keys
    if name == "scroll":
        if not isinstance(out["direction"], str) or out["direction"].lower() not in ("up", "down", "left", "right"):
            return f"'scroll' direction must be up, down, left or right, got {out['direction']!r}"
        amt = out["amount"]
        if not is_number(amt, 0, 1000) or amt == 0:
            return f"'scroll' amount must be a positive number (percent of the viewport), got {amt!r}"
    if name == "goto_url" and (not isinstance(out["url"], str) or not out["url"].strip()):
        return "'goto_url' needs a url string"
    if name == "wait":
        s = out["seconds"]
        if not is_number(s, 0, MAX_WAIT_S):
            return f"'wait' seconds must be a finite number in 0..{MAX_WAIT_S:g}, got {s!r}"
    if name == "switch_tab" and (not isinstance(out["index"], int) or not is_number(out["index"], 0, 1000)):
        return f"'switch_tab' index must be an integer in 0..1000, got {out['index']!r}"
    if name == "done" and not isinstance(out["answer"], str):
        out["answer"] = json.dumps(out["answer"])
    return out


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    body = strip_think(scan.bound(text, 2 * scan.MAX_RESPONSE_CHARS))
    blocks = [m.group(1) for m in itertools.islice(scan.pairs(body, "<tool_call>", "</tool_call>"), MAX_CALLS)]
    if not blocks:
        return ParseError('no tool call found; use <tool_call>{"name": ..., "arguments": {...}}</tool_call>', text[:200])
    out: list[Action] = []
    for i, block in enumerate(blocks):
        scan.METER.add(len(block))  # json.loads is linear in its input
        try:
            obj = json.loads(block.strip())
        except (ValueError, RecursionError) as exc:
            return ParseError(f"tool call {i + 1} is not valid JSON ({type(exc).__name__})", block[:200])
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return ParseError(f"tool call {i + 1} needs a string \"name\"", block[:200])
        args = obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                return ParseError(f"tool call {i + 1} has unparsable arguments", block[:200])
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return ParseError(f"tool call {i + 1} arguments must be an object", block[:200])
        name = obj["name"]
        if name not in TOOLS:
            return ParseError(f"unknown tool {name!r}; tools: {', '.join(TOOLS)}", block[:200])
        checked = _validate(name, args)
        if isinstance(checked, str):
            return ParseError(checked, block[:200])
        out.append(Action(name, checked, block.strip()))
    return out


parse = never_raises(_parse, "the tool calls")


SCALE = 1000  # coordinates are 0..SCALE of the screenshot's width and height


def to_css_pixels(x: float, y: float, viewport: tuple[float, float]) -> tuple[float, float]:
    """0..1000 screenshot coordinates -> CSS pixels of the viewport. The screenshot spans the viewport at every
    device scale factor, so the same normalised point names the same spot whatever the pixel density."""
    return x / SCALE * viewport[0], y / SCALE * viewport[1]


def to_normalised(px: float, py: float, viewport: tuple[float, float]) -> tuple[float, float]:
    """CSS pixels -> 0..1000 screenshot coordinates (demonstrations aim at an element's box centre this way)."""
    return px / viewport[0] * SCALE, py / viewport[1] * SCALE


async def _to_px(session: BrowserSession, x: float, y: float) -> tuple[float, float]:
    return to_css_pixels(x, y, await session.viewport())


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "<nothing>"
    out = f"<{info['tag']}>"
    if info.get("role") and info["role"] not in ("generic", info["tag"]):
        out += f" role={info['role']}"
    if info.get("name"):
        out += f' "{info["name"][:80]}"'
    return out


async def _nav_note(session: BrowserSession, url: str, tabs: int) -> str:
    await session.settle()
    if len(session.pages) > tabs:
        return f" A new tab was opened: {session.page.url}."
    if session.page.url != url:
        return f" Page navigated to {session.page.url}."
    return " Note: no visible navigation or new tab detected."


async def execute(session: BrowserSession, action: Action) -> ExecResult:
    """Run one tool call and return its OpenWebRL-style feedback; never raises."""
    a, n = action.args, action.name

    async def run() -> ExecResult:
        page = session.page
        url, tabs = page.url, len(session.pages)
        if n == "done":
            return ExecResult(f"Succeed: task marked as done. Response: {a['answer']}", done=True, answer=a["answer"])
        if n == "click":
            px, py = await _to_px(session, a["x"], a["y"])
            target = await session.describe_at(px, py)
            await page.mouse.click(px, py, button=a["button"], click_count=2 if a["click_type"] == "double" else 1)
            await session.await_navigation_start()  # mouse clicks do not wait for the navigation they start
            what = "'click'" if a["click_type"] == "single" else "'click' (double)"
            msg = f"Succeed: {what} on {_describe(target)} at ({a['x']:g}, {a['y']:g}) executed."
            return ExecResult(msg + await _nav_note(session, url, tabs))
        if n == "hover":
            px, py = await _to_px(session, a["x"], a["y"])
            await page.mouse.move(px, py)
            target = await session.describe_at(px, py)
            return ExecResult(f"Succeed: 'hover' on {_describe(target)} at ({a['x']:g}, {a['y']:g}) executed.")
        if n == "drag":
            x1, y1 = await _to_px(session, a["x1"], a["y1"])
            x2, y2 = await _to_px(session, a["x2"], a["y2"])
            await page.mouse.move(x1, y1)
            await page.mouse.down()
            await page.mouse.move(x2, y2, steps=8)
            await page.mouse.up()
            return ExecResult(f"Succeed: 'drag' from ({a['x1']:g}, {a['y1']:g}) to ({a['x2']:g}, {a['y2']:g}) executed.")
        if n == "write":
            focused = await session.focused_info()
            if not focused:
                return ExecResult("Failed: 'write' execution failed: no focused input field; click the field first.",
                                  failed=True)
            if not focused.get("editable"):
                return ExecResult(f"Failed: 'write' execution failed: the focused element {_describe(focused)} is not "
                                  "an editable field (input, textarea or contenteditable); click a text field first.",
                                  failed=True)
            await page.keyboard.press("ControlOrMeta+a")
            await page.keyboard.press("Delete")
            await page.keyboard.type(a["text"])
            after = await session.focused_info()
            msg = f"Succeed: 'write' typed \"{a['text']}\" into {_describe(focused)}."
            actual = after.get("value") if after else None
            if actual is not None and actual != a["text"]:
                msg += f" Note: the field's actual value is \"{actual}\", which differs from the typed text."
            return ExecResult(msg)
        if n == "press_keys":
            keys = [common.normalise_key(k) for k in a["keys"]]
            for k in keys:
                await page.keyboard.press(k)
            shown = "[" + ", ".join(f"'{k}'" for k in keys) + "]"
            msg = f"Succeed: 'press_keys' {shown} executed."
            note = await _nav_note(session, url, tabs)
            return ExecResult(msg + ("" if "no visible navigation" in note else note))
        if n == "scroll":
            amt = float(a["amount"])
            frac = amt if amt <= 1 else amt / 100
            pct = f"{frac * 100:g}%"
            vw, vh = await session.viewport()
            d = a["direction"].lower()
            dx = {"left": -1, "right": 1}.get(d, 0) * vw * frac
            dy = {"up": -1, "down": 1}.get(d, 0) * vh * frac
            moved = await session.wheel(dx, dy)
            msg = f"Succeed: 'scroll' {d} by {pct} executed."
            if not moved:
                msg += " Note: page scroll position did not change and may be at a boundary."
            return ExecResult(msg)
        if n == "goto_url":
            try:
                await session.goto(a["url"])
            except PermissionError as exc:
                return ExecResult(f"Failed: 'goto_url' execution failed: {exc}.", failed=True)
            return ExecResult(f"Succeed: 'goto_url' opened {session.page.url}.")
        if n == "go_back":
            await page.go_back(wait_until="load")
            if session.page.url == url:
                return ExecResult("Succeed: 'go_back' executed. Note: no previous page in history; the url did not change.")
            return ExecResult(f"Succeed: 'go_back' executed. Page navigated to {session.page.url}.")
        if n == "wait":
            secs = float(a["seconds"])
            await session.agent_wait(secs)
            return ExecResult(f"Succeed: 'wait' for {secs:g} seconds executed.")
        if n == "new_tab":
            await session.new_tab()
            return ExecResult(f"Succeed: 'new_tab' opened tab {session.active}.")
        if n == "switch_tab":
            await session.switch_tab(a["index"])
            return ExecResult(f"Succeed: 'switch_tab' switched to tab {session.active} ({session.page.url}).")
        if n == "close_tab":
            await session.close_tab()
            return ExecResult(f"Succeed: 'close_tab' closed the tab; now on tab {session.active} ({session.page.url}).")
        raise InvalidAction(f"unknown tool {n!r}")

    return await run_safely(run(), n)


SPACE = ActionSpace(name="openwebrl", parse=parse, execute=execute, description=DESCRIPTION, multi_call=True)
