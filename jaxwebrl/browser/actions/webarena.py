"""`webarena` action space: the WebArena grammar used by BrowserAgent and NNetNav.

    click [id] [content?]   hover [id] [content?]   type [id] [content] [press_enter_after=0|1]
    press [key_comb]        scroll [down|up]        new_tab   tab_focus [index]   close_tab
    goto [url]              go_back                 go_forward                     stop [answer]

The action is taken from the last ``` fenced block if any (BrowserAgent/NNetNav put it there), else from
the last line that starts with an action name; `<think>` content is ignored. `type` presses Enter after
typing unless the flag is 0 (the WebArena default).
"""

from __future__ import annotations

import re

from jaxwebrl.browser.actions import common
from jaxwebrl.browser.actions.base import (
    never_raises,
    Action, ActionSpace, ExecResult, ParseError, ParseResult, last_fenced, run_safely, strip_think,
)
from jaxwebrl.browser.session import BrowserSession

NAMES = ("click", "hover", "type", "press", "scroll", "new_tab", "tab_focus", "close_tab", "goto",
         "go_back", "go_forward", "stop")
_START = re.compile(r"^\s*(" + "|".join(NAMES) + r")\b", re.M)

DESCRIPTION = """click [id]: click the element with id.
hover [id]: hover over the element with id.
type [id] [content] [press_enter_after=0|1]: type content into the field with id (Enter pressed unless 0).
press [key_comb]: press a key combination, e.g. Ctrl+v or Enter.
scroll [down|up]: scroll the page.
new_tab: open a new empty tab.  tab_focus [tab_index]: switch to a tab.  close_tab: close the current tab.
goto [url]: open url.  go_back: previous page.  go_forward: next page.
stop [answer]: finish; put the answer (or N/A) in the brackets."""


def _candidate(text: str) -> str | None:
    body = strip_think(text)
    fenced = last_fenced(body)
    if fenced is not None and _START.search(fenced):
        body = fenced
    starts = list(_START.finditer(body))
    if not starts:
        return None
    return body[starts[-1].start():].strip()


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    cand = _candidate(text[:50_000])
    if cand is None:
        return ParseError(
            "no action found; write one action such as ```click [12]``` (valid: " + ", ".join(NAMES) + ")",
            text[:200],
        )
    name = _START.match(cand).group(1)
    rest = cand.lstrip()[len(name):]
    one_line = rest.split("\n")[0].strip()
    err = lambda m: ParseError(m, cand[:200])  # noqa: E731

    if name in ("new_tab", "close_tab", "go_back", "go_forward"):
        return [Action(name, {}, cand)]
    if name in ("click", "hover"):
        m = re.match(r"^\[\s*(\d+)\s*\](?:\s*\[.*\])?\s*$", one_line)
        if not m:
            return err(f"{name} needs a numeric element id, e.g. {name} [12]")
        return [Action(name, {"id": m.group(1)}, cand)]
    if name == "type":
        m = re.match(r"^\[\s*(\d+)\s*\]\s*\[(.*)\]\s*\[\s*(?:press_enter_after\s*=\s*)?([01])\s*\]\s*$", one_line)
        if m:
            return [Action("type", {"id": m.group(1), "text": m.group(2), "enter": m.group(3) == "1"}, cand)]
        m = re.match(r"^\[\s*(\d+)\s*\]\s*\[(.*)\]\s*$", one_line)
        if m:
            return [Action("type", {"id": m.group(1), "text": m.group(2), "enter": True}, cand)]
        return err("type needs an element id and content, e.g. type [12] [hello] [1]")
    if name == "press":
        m = re.match(r"^\[(.+)\]\s*$", one_line)
        if not m or not m.group(1).strip():
            return err("press needs a key combination, e.g. press [Enter]")
        return [Action("press", {"keys": m.group(1).strip()}, cand)]
    if name == "scroll":
        m = re.match(r"^\[\s*(?:direction\s*=\s*)?(up|down)\s*\]\s*$", one_line, flags=re.I)
        if not m:
            return err("scroll needs a direction, e.g. scroll [down]")
        return [Action("scroll", {"direction": m.group(1).lower()}, cand)]
    if name == "tab_focus":
        m = re.match(r"^\[\s*(\d+)\s*\]\s*$", one_line)
        if not m:
            return err("tab_focus needs a tab index, e.g. tab_focus [0]")
        return [Action("tab_focus", {"index": int(m.group(1))}, cand)]
    if name == "goto":
        m = re.match(r"^\[(.+)\]\s*$", one_line)
        if not m or not m.group(1).strip():
            return err("goto needs a url, e.g. goto [http://localhost:8080/]")
        return [Action("goto", {"url": m.group(1).strip()}, cand)]
    # stop: the answer may span lines and contain brackets
    m = re.match(r"^\s*\[(.*)\]\s*$", rest, flags=re.S)
    if m:
        return [Action("stop", {"answer": m.group(1).strip()}, cand)]
    if not rest.strip():
        return [Action("stop", {"answer": ""}, cand)]
    return err("stop takes the answer in brackets, e.g. stop [42]")


parse = never_raises(_parse, "the action")


async def execute(session: BrowserSession, action: Action) -> ExecResult:
    """Run one parsed action; failures come back as feedback, never as exceptions."""
    a, n = action.args, action.name

    async def run() -> ExecResult:
        if n == "stop":
            return ExecResult(feedback=f"Stopped with answer {a['answer']!r}.", done=True, answer=a["answer"])
        if n == "click":
            return ExecResult(await common.click(session, a["id"]))
        if n == "hover":
            return ExecResult(await common.hover(session, a["id"]))
        if n == "type":
            return ExecResult(await common.type_text(session, a["id"], a["text"], enter=a["enter"]))
        if n == "press":
            return ExecResult(await common.press(session, a["keys"]))
        if n == "scroll":
            return ExecResult(await common.scroll(session, a["direction"]))
        if n == "new_tab":
            return ExecResult(await common.new_tab(session))
        if n == "tab_focus":
            return ExecResult(await common.tab_focus(session, a["index"]))
        if n == "close_tab":
            return ExecResult(await common.close_tab(session))
        if n == "goto":
            return ExecResult(await common.goto(session, a["url"]))
        if n == "go_back":
            return ExecResult(await common.go_back(session))
        if n == "go_forward":
            return ExecResult(await common.go_forward(session))
        return ExecResult(feedback=f"Invalid action: unknown action {n!r}.", invalid=True)

    return await run_safely(run(), n)


SPACE = ActionSpace(name="webarena", parse=parse, execute=execute, description=DESCRIPTION)
