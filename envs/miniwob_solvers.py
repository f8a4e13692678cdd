"""Scripted MiniWoB++ solvers that emit `bid` action text (BrowserGym style), for tests and for making
behaviour-cloning demonstrations. A solver reads the goal and the observation's marked elements and
returns the whole plan (these tasks are single-page, and element ids are stable within an episode).

`plan(task, goal, elements)` gives actions that solve the task; `wrong_plan(...)` gives plausible but
wrong actions (a different target or text) that must fail: useful as negative examples.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from jaxwebrl.browser.marking import Element

SOLVABLE = ("click-button", "click-link", "enter-text", "click-checkboxes", "login-user", "choose-list",
            "focus-text", "click-option", "click-tab")


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def _find(elements: Sequence[Element], pred: Callable[[Element], bool]) -> Element:
    for el in elements:
        if el.visible and pred(el):
            return el
    raise LookupError("no element matches")


def _all(elements: Sequence[Element], pred: Callable[[Element], bool]) -> list[Element]:
    return [el for el in elements if el.visible and pred(el)]


def _text(el: Element) -> str:
    return (el.name or el.text).strip()


def _button(elements: Sequence[Element], name: str) -> Element:
    return _find(elements, lambda e: e.role == "button" and _text(e).lower() == name.lower())


def plan(task: str, goal: str, elements: Sequence[Element]) -> list[str]:
    """Correct bid actions for `task` (one of SOLVABLE)."""
    if task == "click-button":
        return [f"click('{_button(elements, _quoted(goal)[0]).id}')"]
    if task == "click-link":
        target = _quoted(goal)[0]
        return [f"click('{_find(elements, lambda e: _text(e) == target and e.depth > 0).id}')"]
    if task == "enter-text":
        box = _find(elements, lambda e: e.role == "textbox")
        return [f"fill('{box.id}', {_quoted(goal)[0]!r})", f"click('{_button(elements, 'Submit').id}')"]
    if task == "click-checkboxes":
        m = re.match(r"Select (.*) and click Submit\.", goal)
        wanted = [] if m is None or m.group(1) == "nothing" else [w.strip() for w in m.group(1).split(",")]
        acts = [f"click('{_find(elements, lambda e, w=w: e.role == 'checkbox' and e.name == w).id}')" for w in wanted]
        return acts + [f"click('{_button(elements, 'Submit').id}')"]
    if task == "login-user":
        user, pwd = _quoted(goal)[:2]
        boxes = _all(elements, lambda e: e.role == "textbox")
        return [f"fill('{boxes[0].id}', {user!r})", f"fill('{boxes[1].id}', {pwd!r})",
                f"click('{_button(elements, 'Login').id}')"]
    if task == "choose-list":
        m = re.match(r"Select (.*) from the list and click Submit\.", goal)
        assert m is not None, goal
        sel = _find(elements, lambda e: e.role == "combobox")
        return [f"select_option('{sel.id}', {m.group(1)!r})", f"click('{_button(elements, 'Submit').id}')"]
    if task == "focus-text":
        return [f"focus('{_find(elements, lambda e: e.role == 'textbox').id}')", f"click('{_find(elements, lambda e: e.role == 'textbox').id}')"]
    if task == "click-option":
        m = re.match(r"Select (.*) and click Submit\.", goal)
        assert m is not None, goal
        radio = _find(elements, lambda e: e.role == "radio" and e.name == m.group(1))
        return [f"click('{radio.id}')", f"click('{_button(elements, 'Submit').id}')"]
    if task == "click-tab":
        m = re.search(r"Tab #(\d+)", goal)
        assert m is not None, goal
        tab = _find(elements, lambda e: e.role == "presentation" and e.name == f"Tab #{m.group(1)}"
                    or e.role == "tab" and e.name == f"Tab #{m.group(1)}" and e.tag == "a")
        return [f"click('{tab.id}')"]
    raise KeyError(f"no scripted solver for {task!r}; have {SOLVABLE}")


def wrong_plan(task: str, goal: str, elements: Sequence[Element]) -> list[str]:
    """Plausible but wrong bid actions for `task`: the episode must end unsuccessfully (or not at all)."""
    if task == "click-button":
        want = _quoted(goal)[0]
        other = _find(elements, lambda e: e.role == "button" and _text(e) != want)
        return [f"click('{other.id}')"]
    if task == "click-link":
        want = _quoted(goal)[0]
        other = _find(elements, lambda e: e.depth > 0 and e.role == "StaticText" and _text(e) != want)
        return [f"click('{other.id}')"]
    if task == "enter-text":
        box = _find(elements, lambda e: e.role == "textbox")
        return [f"fill('{box.id}', 'definitely wrong')", f"click('{_button(elements, 'Submit').id}')"]
    if task == "click-checkboxes":
        right = plan(task, goal, elements)
        boxes = _all(elements, lambda e: e.role == "checkbox")
        flip = f"click('{boxes[0].id}')"
        acts = right[:-1]
        acts = [a for a in acts if a != flip] if flip in acts else acts + [flip]
        return acts + [right[-1]]
    if task == "login-user":
        acts = plan(task, goal, elements)
        boxes = _all(elements, lambda e: e.role == "textbox")
        return [acts[0], f"fill('{boxes[1].id}', 'wrong-password')", acts[2]]
    if task == "choose-list":
        m = re.match(r"Select (.*) from the list and click Submit\.", goal)
        opts = _all(elements, lambda e: e.role == "option")
        other = next(o for o in opts if m and o.name != m.group(1))
        sel = _find(elements, lambda e: e.role == "combobox")
        return [f"select_option('{sel.id}', {other.name!r})", f"click('{_button(elements, 'Submit').id}')"]
    if task == "focus-text":
        return ["noop(wait_ms=10)"]
    if task == "click-option":
        m = re.match(r"Select (.*) and click Submit\.", goal)
        radio = _find(elements, lambda e: e.role == "radio" and (m is None or e.name != m.group(1)))
        return [f"click('{radio.id}')", f"click('{_button(elements, 'Submit').id}')"]
    if task == "click-tab":
        m = re.search(r"Tab #(\d+)", goal)
        tab = _find(elements, lambda e: e.role == "presentation" and m is not None and e.name != f"Tab #{m.group(1)}")
        return [f"click('{tab.id}')"]
    raise KeyError(f"no scripted solver for {task!r}; have {SOLVABLE}")
