"""`bid` action space: BrowserGym-style calls on element ids (used for MiniWoB++ and NNetNav).

    click('12', button='left')  dblclick('12')  hover('12')  fill('12', 'text')  clear('12')  focus('12')
    press('12', 'Enter')  select_option('12', 'Option')  check('12')  uncheck('12')
    scroll(0, 200)  keyboard_press('Enter')  keyboard_type('abc')  goto('url')  go_back()  go_forward()
    new_tab()  tab_focus(0)  tab_close()  noop(wait_ms=500)  send_msg_to_user('answer')

Several calls (one per line) are executed in order; execution stops at the first invalid call.
`send_msg_to_user` ends the episode with its text as the answer.
"""

from __future__ import annotations

import re
from typing import Any

from jaxwebrl.browser.actions import common, scan
from jaxwebrl.browser.actions.base import (
    never_raises,
    Action, ActionSpace, ExecResult, ParseError, ParseResult, is_number, last_fenced, parse_calls, run_safely,
    strip_think,
)
from jaxwebrl.browser.session import BrowserSession

# name -> (positional parameter names, required count, defaults)
SIGNATURES: dict[str, tuple[tuple[str, ...], int, dict[str, Any]]] = {
    "click": (("bid", "button"), 1, {"button": "left"}),
    "dblclick": (("bid",), 1, {}),
    "hover": (("bid",), 1, {}),
    "fill": (("bid", "value"), 2, {}),
    "clear": (("bid",), 1, {}),
    "focus": (("bid",), 1, {}),
    "press": (("bid", "key_comb"), 2, {}),
    "select_option": (("bid", "options"), 2, {}),
    "check": (("bid",), 1, {}),
    "uncheck": (("bid",), 1, {}),
    "scroll": (("delta_x", "delta_y"), 2, {}),
    "keyboard_press": (("key",), 1, {}),
    "keyboard_type": (("text",), 1, {}),
    "goto": (("url",), 1, {}),
    "go_back": ((), 0, {}),
    "go_forward": ((), 0, {}),
    "new_tab": ((), 0, {}),
    "tab_focus": (("index",), 1, {}),
    "tab_close": ((), 0, {}),
    "noop": (("wait_ms",), 0, {"wait_ms": 1000}),
    "send_msg_to_user": (("text",), 1, {}),
}
# a whole line holding one call; blank runs stop at newlines and `.*` backtracks only within its line
_LINE = re.compile(r"^[^\S\n]*(" + "|".join(SIGNATURES) + r")[^\S\n]*\(.*\)[^\S\n]*$", re.M)
#: Range of each numeric argument: pixels of scroll, milliseconds of noop, tab index.
NUMERIC = {"delta_x": (-100_000, 100_000), "delta_y": (-100_000, 100_000), "wait_ms": (0, 10_000),
           "index": (0, 1_000)}

DESCRIPTION = "\n".join(f"{n}({', '.join(p)})" for n, (p, _, _) in SIGNATURES.items())


def _bind(name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any] | str:
    params, required, defaults = SIGNATURES[name]
    if len(args) > len(params):
        return f"{name}() takes at most {len(params)} argument(s), got {len(args)}"
    bound = dict(defaults)
    bound.update(zip(params, args))
    for k, v in kwargs.items():
        if k not in params:
            return f"{name}() got an unexpected argument {k!r}"
        bound[k] = v
    missing = [p for p in params[:required] if p not in bound]
    if missing:
        return f"{name}() is missing argument(s) {missing}"
    for k in ("bid",):
        if k in bound and not str(bound[k]).strip().isdigit():
            return f"{name}() needs a numeric element id like '12', got {bound[k]!r}"
        if k in bound:
            bound[k] = str(bound[k]).strip()
    for k, (lo, hi) in NUMERIC.items():
        if k in bound and not is_number(bound[k], lo, hi):
            return f"{name}() argument {k} must be a finite number in {lo}..{hi}, got {bound[k]!r}"
    if "index" in bound and not isinstance(bound["index"], int):
        return f"{name}() argument index must be an integer, got {bound['index']!r}"
    for k in ("value", "key_comb", "key", "text", "url", "button"):
        if k in bound and not isinstance(bound[k], str):
            return f"{name}() argument {k} must be a string, got {bound[k]!r}"
    if "options" in bound:
        opts = bound["options"]
        if isinstance(opts, str):
            bound["options"] = [opts]
        elif isinstance(opts, (list, tuple)) and opts and all(isinstance(o, str) for o in opts):
            bound["options"] = list(opts)
        else:
            return f"{name}() options must be a string or a list of strings"
    return bound


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    body = strip_think(scan.bound(text))
    cand = last_fenced(body)
    if cand is None:
        cand = body.strip()
    calls = parse_calls(cand)
    if isinstance(calls, str):
        lines = [m.group(0).strip() for m in scan.line_starts(_LINE, cand)]
        if not lines:
            return ParseError(f"no valid action found: {calls}", text[:200])
        calls = parse_calls("\n".join(lines))
        if isinstance(calls, str):
            return ParseError(f"no valid action found: {calls}", text[:200])
    out: list[Action] = []
    for name, args, kwargs in calls:
        if name not in SIGNATURES:
            return ParseError(f"unknown action {name}(); valid: {', '.join(SIGNATURES)}", text[:200])
        bound = _bind(name, args, kwargs)
        if isinstance(bound, str):
            return ParseError(bound, text[:200])
        out.append(Action(name, bound, f"{name}(...)"))
    return out


parse = never_raises(_parse, "the action")


async def execute(session: BrowserSession, action: Action) -> ExecResult:
    """Run one parsed call; failures come back as feedback, never as exceptions."""
    a, n = action.args, action.name

    async def run() -> ExecResult:
        if n == "send_msg_to_user":
            return ExecResult(feedback=f"Sent message to user: {a['text']!r}.", done=True, answer=a["text"])
        if n == "click":
            return ExecResult(await common.click(session, a["bid"], button=a["button"]))
        if n == "dblclick":
            return ExecResult(await common.click(session, a["bid"], count=2))
        if n == "hover":
            return ExecResult(await common.hover(session, a["bid"]))
        if n == "fill":
            return ExecResult(await common.type_text(session, a["bid"], a["value"]))
        if n == "clear":
            return ExecResult(await common.clear(session, a["bid"]))
        if n == "focus":
            return ExecResult(await common.focus(session, a["bid"]))
        if n == "press":
            return ExecResult(await common.press_on(session, a["bid"], a["key_comb"]))
        if n == "select_option":
            return ExecResult(await common.select_option(session, a["bid"], a["options"]))
        if n in ("check", "uncheck"):
            loc = await session.locate(a["bid"])
            await loc.set_checked(n == "check")
            return ExecResult(f"{'Checked' if n == 'check' else 'Unchecked'} {common.element_label(session, a['bid'])}.")
        if n == "scroll":
            return ExecResult(await common.scroll_by(session, float(a["delta_x"]), float(a["delta_y"])))
        if n == "keyboard_press":
            return ExecResult(await common.press(session, a["key"]))
        if n == "keyboard_type":
            return ExecResult(await common.keyboard_type(session, a["text"]))
        if n == "goto":
            return ExecResult(await common.goto(session, a["url"]))
        if n == "go_back":
            return ExecResult(await common.go_back(session))
        if n == "go_forward":
            return ExecResult(await common.go_forward(session))
        if n == "new_tab":
            return ExecResult(await common.new_tab(session))
        if n == "tab_focus":
            return ExecResult(await common.tab_focus(session, int(a["index"])))
        if n == "tab_close":
            return ExecResult(await common.close_tab(session))
        wait = float(a["wait_ms"])
        await session.agent_wait(wait / 1000)
        return ExecResult(f"Waited {wait:g} ms.")

    return await run_safely(run(), n)


SPACE = ActionSpace(name="bid", parse=parse, execute=execute, description=DESCRIPTION, multi_call=True)
