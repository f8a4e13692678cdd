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

from jaxwebrl.browser.actions import common, scan
from jaxwebrl.browser.actions.base import (
    never_raises,
    Action, ActionSpace, ExecResult, ParseError, ParseResult, last_fenced, run_safely, strip_think,
)
from jaxwebrl.browser.session import BrowserSession

NAMES = ("click", "hover", "type", "press", "scroll", "new_tab", "tab_focus", "close_tab", "goto",
         "go_back", "go_forward", "stop")
_NAME = re.compile(r"(" + "|".join(NAMES) + r")\b")
# a line whose first word is an action name; the blank run stops at a newline (linear, see scan.line_starts)
_START = re.compile(r"^[^\S\n]*(" + "|".join(NAMES) + r")\b", re.M)
_ID = re.compile(r"\[[ \t]*(\d+)[ \t]*\]")  # one bracketed id, no overlapping quantifiers
_FLAG = re.compile(r"(?:press_enter_after[ \t]*=[ \t]*)?([01])")
_DIRECTION = re.compile(r"(?:direction[ \t]*=[ \t]*)?(up|down)", re.I)

DESCRIPTION = """click [id]: click the element with id.
hover [id]: hover over the element with id.
type [id] [content] [press_enter_after=0|1]: type content into the field with id (Enter pressed unless 0).
press [key_comb]: press a key combination, e.g. Ctrl+v or Enter.
scroll [down|up]: scroll the page.
new_tab: open a new empty tab.  tab_focus [tab_index]: switch to a tab.  close_tab: close the current tab.
goto [url]: open url.  go_back: previous page.  go_forward: next page.
stop [answer]: finish; put the answer (or N/A) in the brackets."""


def _starts(body: str) -> list[int]:
    """Offsets of lines whose first non-blank word is an action name (one pass over the lines)."""
    return [m.start(1) for m in scan.line_starts(_START, body)]


def _candidate(text: str) -> str | None:
    body = strip_think(text)
    fenced = last_fenced(body)
    if fenced is not None and _starts(fenced):
        body = fenced
    starts = _starts(body)
    if not starts:
        return None
    return body[starts[-1]:].strip()


def _brackets(line: str) -> tuple[str, str] | None:
    """`[inner] rest` -> (inner up to the first ']', rest stripped), None when the line does not start so."""
    if not line.startswith("["):
        return None
    end = scan.find(line, "]", 1)
    return None if end < 0 else (line[1:end], line[end + 1:].strip())


def _last_bracket(s: str) -> tuple[str, str] | None:
    """`head [inner]` (s stripped, ends with ']') -> (head stripped, inner), using the last '['."""
    if not s.endswith("]"):
        return None
    lb = s.rfind("[")
    scan.METER.add(len(s))
    return None if lb < 0 else (s[:lb].strip(), s[lb + 1:-1])


def _full(pattern: re.Pattern[str], s: str) -> re.Match[str] | None:
    scan.METER.add(len(s))
    return pattern.fullmatch(s)


def _parse(text: str) -> ParseResult:
    if not isinstance(text, str):
        return ParseError("the response is not text")
    cand = _candidate(scan.bound(text))
    if cand is None:
        return ParseError(
            "no action found; write one action such as ```click [12]``` (valid: " + ", ".join(NAMES) + ")",
            text[:200],
        )
    name = _NAME.match(cand).group(1)
    rest = cand[len(name):]
    one_line = rest.split("\n", 1)[0].strip()
    err = lambda m: ParseError(m, cand[:200])  # noqa: E731

    if name in ("new_tab", "close_tab", "go_back", "go_forward"):
        return [Action(name, {}, cand)]
    if name in ("click", "hover"):
        m = scan.match_line(_ID, one_line)
        tail = one_line[m.end():].strip() if m else ""
        if not m or (tail and not (tail.startswith("[") and tail.endswith("]"))):
            return err(f"{name} needs a numeric element id, e.g. {name} [12]")
        return [Action(name, {"id": m.group(1)}, cand)]
    if name == "type":
        m = scan.match_line(_ID, one_line)
        body = one_line[m.end():].strip() if m else ""
        if m and body.startswith("[") and body.endswith("]"):
            split = _last_bracket(body)
            if split is not None and split[0].startswith("[") and split[0].endswith("]") and _full(_FLAG, split[1].strip()):
                return [Action("type", {"id": m.group(1), "text": split[0][1:-1],
                                        "enter": split[1].strip()[-1] == "1"}, cand)]
            return [Action("type", {"id": m.group(1), "text": body[1:-1], "enter": True}, cand)]
        return err("type needs an element id and content, e.g. type [12] [hello] [1]")
    if name in ("press", "goto"):
        inner = one_line[1:-1] if one_line.startswith("[") and one_line.endswith("]") else ""
        if not inner.strip():
            example = "press [Enter]" if name == "press" else "goto [http://localhost:8080/]"
            return err(f"{name} needs a {'key combination' if name == 'press' else 'url'}, e.g. {example}")
        return [Action(name, {"keys" if name == "press" else "url": inner.strip()}, cand)]
    if name == "scroll":
        got = _brackets(one_line)
        m = _full(_DIRECTION, got[0].strip()) if got and not got[1] else None
        if not m:
            return err("scroll needs a direction, e.g. scroll [down]")
        return [Action("scroll", {"direction": m.group(1).lower()}, cand)]
    if name == "tab_focus":
        m = scan.match_line(_ID, one_line)
        if not m or one_line[m.end():].strip():
            return err("tab_focus needs a tab index, e.g. tab_focus [0]")
        return [Action("tab_focus", {"index": int(m.group(1))}, cand)]
    # stop: the answer may span lines and contain brackets
    answer = rest.strip()
    if answer.startswith("[") and answer.endswith("]"):
        return [Action("stop", {"answer": answer[1:-1].strip()}, cand)]
    if not answer:
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
