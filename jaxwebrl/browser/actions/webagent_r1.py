"""`webagent_r1` action space (WebAgent-R1, simplified-HTML agents).

    do(action="Click"|"Right Click"|"Type"|"Search"|"Hover"|"Scroll Up"|"Scroll Down"|"Press Enter"|
       "Switch Tab"|"Select Dropdown Option"|"Wait", argument="...", element="<id>")
    exit(message="...")   go_backward()   go_forward()

The call is read from the last `<answer>...</answer>` if present, else from the text after `<think>`;
arguments must be literals (parsed with `ast`, never evaluated). Typographic quotes from the paper's
examples are accepted. `Search` = `Type` + Enter; `Type` replaces the field's content.
"""

from __future__ import annotations

import re

from jaxwebrl.browser.actions import common, scan
from jaxwebrl.browser.actions.base import (
    never_raises,
    Action, ActionSpace, ExecResult, ParseError, ParseResult, normalise_quotes, parse_calls, run_safely,
    strip_think, tag_content,
)
from jaxwebrl.browser.session import BrowserSession

DO_ACTIONS = ("Click", "Right Click", "Type", "Search", "Hover", "Scroll Up", "Scroll Down", "Press Enter",
              "Switch Tab", "Select Dropdown Option", "Wait")
NEEDS_ELEMENT = ("Click", "Right Click", "Type", "Search", "Hover", "Select Dropdown Option")
NEEDS_ARGUMENT = ("Type", "Search", "Switch Tab", "Select Dropdown Option")
# literals then one blank run: the runs after different matches are disjoint, so finditer is linear
_CALL_START = re.compile(r"\b(do|exit|go_backward|go_forward)[ \t\r\n]*\(")

DESCRIPTION = """do(action, argument, element): one browsing operation. action is one of "Click", "Right Click",
"Type", "Search", "Hover", "Scroll Up", "Scroll Down", "Press Enter", "Switch Tab", "Select Dropdown Option",
"Wait". argument only for Type/Search (text), Switch Tab (tab index from 0), Select Dropdown Option (option).
element: the element id in the HTML, for Click/Right Click/Type/Search/Hover/Select Dropdown Option.
exit(message): finish; message is the answer when the instruction is a question.
go_backward(): previous page.  go_forward(): next page."""


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    body = normalise_quotes(scan.bound(text))
    answer = tag_content(body, "answer")
    body = answer if answer is not None else strip_think(body)
    scan.METER.add(len(body))
    starts = list(_CALL_START.finditer(body))
    if not starts:
        return ParseError("the action could not be parsed: expected do(...), exit(...), go_backward() or go_forward()",
                          text[:200])
    code = body[starts[-1].start():].strip()
    # keep only up to the matching closing parenthesis of the call
    depth, end, quote, escaped = 0, None, None, False
    scan.METER.add(len(code))
    for i, ch in enumerate(code):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end is None:
        return ParseError("the action could not be parsed: unbalanced parentheses or quotes", code[:200])
    calls = parse_calls(code[:end])
    if isinstance(calls, str):
        return ParseError(f"the action could not be parsed: {calls}", code[:200])
    fname, args, kwargs = calls[0]
    if fname in ("go_backward", "go_forward"):
        return [Action(fname, {}, code[:end])]
    if fname == "exit":
        msg = kwargs.get("message", args[0] if args else "")
        return [Action("exit", {"message": "" if msg is None else str(msg)}, code[:end])]
    names = ["action", "argument", "element"]
    params = dict(zip(names, args))
    params.update(kwargs)
    unknown = set(params) - set(names)
    if unknown:
        return ParseError(f"do() got unknown argument(s) {sorted(unknown)}", code[:200])
    act = params.get("action")
    if not isinstance(act, str) or act.strip() not in DO_ACTIONS:
        return ParseError(f"do() action must be one of {list(DO_ACTIONS)}, got {act!r}", code[:200])
    act = act.strip()
    if act in NEEDS_ELEMENT and params.get("element") in (None, ""):
        return ParseError(f'do(action="{act}") needs element="<id>"', code[:200])
    if act in NEEDS_ARGUMENT and params.get("argument") is None:
        return ParseError(f'do(action="{act}") needs argument="..."', code[:200])
    out = {"action": act}
    if params.get("element") not in (None, ""):
        out["element"] = str(params["element"]).strip()
    if params.get("argument") is not None:
        out["argument"] = params["argument"] if isinstance(params["argument"], (str, int, float)) else str(params["argument"])
    return [Action("do", out, code[:end])]


parse = never_raises(_parse, "the action")


async def execute(session: BrowserSession, action: Action) -> ExecResult:
    """Run one parsed action; failures come back as feedback, never as exceptions."""
    a = action.args

    async def run() -> ExecResult:
        if action.name == "exit":
            return ExecResult(feedback=f"Exited with message {a['message']!r}.", done=True, answer=a["message"])
        if action.name == "go_backward":
            return ExecResult(await common.go_back(session))
        if action.name == "go_forward":
            return ExecResult(await common.go_forward(session))
        act, el, arg = a["action"], a.get("element"), a.get("argument")
        if act == "Click":
            return ExecResult(await common.click(session, el))
        if act == "Right Click":
            return ExecResult(await common.click(session, el, button="right"))
        if act == "Type":
            return ExecResult(await common.type_text(session, el, str(arg), enter=False))
        if act == "Search":
            return ExecResult(await common.type_text(session, el, str(arg), enter=True))
        if act == "Hover":
            return ExecResult(await common.hover(session, el))
        if act == "Scroll Up":
            return ExecResult(await common.scroll(session, "up"))
        if act == "Scroll Down":
            return ExecResult(await common.scroll(session, "down"))
        if act == "Press Enter":
            if el:
                return ExecResult(await common.press_on(session, el, "Enter"))
            return ExecResult(await common.press(session, "Enter"))
        if act == "Switch Tab":
            try:
                idx = int(str(arg).strip())
            except ValueError:
                return ExecResult(feedback=f"Invalid action: Switch Tab needs a tab number, got {arg!r}.", invalid=True)
            return ExecResult(await common.tab_focus(session, idx))
        if act == "Select Dropdown Option":
            return ExecResult(await common.select_option(session, el, str(arg)))
        await session.agent_wait(1.0)  # Wait
        return ExecResult("Waited 1 second.")

    return await run_safely(run(), a.get("action", action.name))


SPACE = ActionSpace(name="webagent_r1", parse=parse, execute=execute, description=DESCRIPTION)
