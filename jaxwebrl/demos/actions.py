"""Scripted steps written in each action grammar, so every paper's BC policy learns its own action format.

A solver says *what* to do as a `Step` ("click this element", "type this text into that field and press
Enter", "choose this option", "answer X"); `write_step` says it in one action space's syntax, resolved
against the current observation:

| step     | webarena                      | webagent_r1                                  | bid                              | openwebrl (tool calls; x, y = box centre on 0..1000) |
|----------|-------------------------------|----------------------------------------------|----------------------------------|-------------------------------------------------------|
| click    | click [id]                    | do(action="Click", element="id")             | click('id')                      | click(x, y)                                           |
| type     | type [id] [text] [0/1]        | do(action="Type"/"Search", argument, element)| fill('id', text) (+ press Enter) | click(x, y) + write(text) (+ press_keys Enter)        |
| select   | click [id], press [ArrowDown/Up] x n, press [Enter] | do(action="Select Dropdown Option", ...) | select_option('id', opt) | click(x, y) + press_keys(ArrowDown/Up x n, Enter) |
| focus    | click [id]                    | do(action="Click", element="id")             | focus('id')                      | click(x, y)                                           |
| back     | go_back                       | go_backward()                                | go_back()                        | go_back()                                             |
| stop     | stop [answer]                 | exit(message="answer")                       | send_msg_to_user('answer')       | done(answer)                                          |
| see      | (no action: the text must be on the page; it is noted with the next action)                                                  |

OpenWebRL maps 0..1000 to CSS pixels as `x / 1000 * viewport width` (actions/openwebrl.py `_to_px`), so the
demonstration writes `round(centre_x / width * 1000)`; an element whose centre is outside the viewport is
first scrolled to (a `scroll` call, then the step is resolved again on the new observation). The webarena
grammar has no option selection: a native dropdown is opened by a click and driven with arrow keys, counted
from the option currently selected (the a11y tree marks it `selected: True`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Sequence

from jaxwebrl.browser.marking import Element

KINDS = ("click", "type", "select", "focus", "back", "stop", "see")  # "see": a check, written as no action
SPACES = ("webarena", "webagent_r1", "bid", "openwebrl")


@dataclasses.dataclass(frozen=True)
class Step:
    """One scripted step. The target is an element id (stable within a page) or, when `element` is None, the
    first visible element with this `role` and accessible `name` on the page at the time of the step."""

    kind: str
    element: str | None = None
    text: str = ""  # typed text, option label, or answer
    enter: bool = False  # type: press Enter afterwards
    role: str | None = None
    name: str | None = None
    note: str | None = None  # a fact seen on the page before this step (becomes a <conclusion>/<memory> line)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Step.kind {self.kind!r} is unknown; use one of {KINDS}")

    @property
    def needs_element(self) -> bool:
        return self.kind in ("click", "type", "select", "focus")


@dataclasses.dataclass(frozen=True)
class Written:
    """The action texts for one step (one per turn), and whether the step is complete after them (False:
    the texts only scrolled the target into view; resolve the step again on the next observation)."""

    actions: list[str]
    complete: bool = True


def resolve(step: Step, elements: Sequence[Element]) -> Element:
    """The step's target element on the current page; LookupError names what was missing."""
    for el in elements:
        if step.element is not None:
            if el.id == step.element:
                return el
        elif el.visible and el.role == step.role and (el.name or el.text).strip() == step.name:
            return el
    what = f"id {step.element}" if step.element is not None else f"role={step.role!r} name={step.name!r}"
    raise LookupError(f"{step.kind} step: no visible element with {what} on the page")


def _options(select: Element, elements: Sequence[Element]) -> list[Element]:
    """The <option>s that follow a <select> in document order (marking lists them as its children)."""
    out, started = [], False
    for el in elements:
        if el.id == select.id:
            started = True
            continue
        if started:
            if el.depth <= select.depth:
                break
            if el.role == "option":
                out.append(el)
    return out


def arrow_keys(select: Element, option: str, elements: Sequence[Element]) -> list[str]:
    """Arrow presses that move a native dropdown from its selected option to `option`."""
    opts = _options(select, elements)
    names = [(o.name or o.text).strip() for o in opts]
    if option not in names:
        raise LookupError(f"select step: option {option!r} not among {names}")
    current = next((i for i, o in enumerate(opts) if o.props.get("selected") is True), 0)
    delta = names.index(option) - current
    return ["ArrowDown" if delta > 0 else "ArrowUp"] * abs(delta)


def _tool(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def normalised_centre(el: Element, viewport: tuple[float, float]) -> tuple[int, int]:
    """The element's box centre on OpenWebRL's 0..1000 grid of the viewport."""
    return el.normalised_centre(viewport)


def _scroll_into_view(el: Element, viewport: tuple[float, float]) -> str | None:
    """A scroll call bringing the element's centre to mid-viewport, or None when it is visible already."""
    cy, h = el.center[1], viewport[1]
    if 0 <= cy < h and el.bbox[3] > 0:
        return None
    percent = math.ceil(abs(cy - h / 2) / h * 100)
    return _tool("scroll", direction="down" if cy >= h / 2 else "up", amount=max(2, min(1000, percent)))


def write_step(step: Step, space: str, elements: Sequence[Element], viewport: tuple[float, float]) -> Written:
    """`step` as action text(s) in `space` on the page described by `elements` (viewport = CSS px w, h)."""
    if space not in SPACES:
        raise ValueError(f"no demonstration writer for action space {space!r}; have {SPACES}")
    if step.kind == "see":
        raise ValueError("a 'see' step is a check on the page, not an action; the demonstration driver handles it")
    el = resolve(step, elements) if step.needs_element else None
    k = step.kind
    if k == "back":
        return Written([{"webarena": "go_back", "webagent_r1": "go_backward()", "bid": "go_back()",
                         "openwebrl": _tool("go_back")}[space]])
    if k == "stop":
        return Written([{"webarena": f"stop [{step.text}]", "webagent_r1": f"exit(message={json.dumps(step.text)})",
                         "bid": f"send_msg_to_user({step.text!r})", "openwebrl": _tool("done", answer=step.text)}[space]])
    assert el is not None
    i = el.id
    if space == "bid":
        if k == "click":
            return Written([f"click('{i}')"])
        if k == "focus":
            return Written([f"focus('{i}')"])
        if k == "type":
            return Written([f"fill('{i}', {step.text!r})" + (f"\npress('{i}', 'Enter')" if step.enter else "")])
        return Written([f"select_option('{i}', {step.text!r})"])
    if space == "webarena":
        if k in ("click", "focus"):
            return Written([f"click [{i}]"])
        if k == "type":
            return Written([f"type [{i}] [{step.text}] [{int(step.enter)}]"])
        keys = arrow_keys(el, step.text, elements)
        return Written([f"click [{i}]"] + [f"press [{key}]" for key in keys] + ["press [Enter]"])
    if space == "webagent_r1":
        if k in ("click", "focus"):
            return Written([f'do(action="Click", element="{i}")'])
        if k == "type":
            act = "Search" if step.enter else "Type"
            return Written([f'do(action="{act}", argument={json.dumps(step.text)}, element="{i}")'])
        return Written([f'do(action="Select Dropdown Option", argument={json.dumps(step.text)}, element="{i}")'])
    scroll = _scroll_into_view(el, viewport)
    if scroll is not None:
        return Written([scroll], complete=False)
    x, y = normalised_centre(el, viewport)
    calls = [_tool("click", x=x, y=y)]
    if k == "type":
        calls.append(_tool("write", text=step.text))
        if step.enter:
            calls.append(_tool("press_keys", keys=["Enter"]))
    elif k == "select":
        calls.append(_tool("press_keys", keys=arrow_keys(el, step.text, elements) + ["Enter"]))
    return Written(["".join(calls)])
