"""Scripted MiniWoB++ solvers, for tests and for behaviour-cloning demonstrations. A solver reads the goal
and the observation's marked elements and returns the whole plan as `Step`s (these tasks are single-page,
and element ids are stable within an episode); `jaxwebrl.demos.actions.write_step` writes each step
in the episode's action grammar (webarena, webagent_r1, bid or openwebrl coordinates).

`plan(task, goal, elements)` gives steps that solve the task; `wrong_plan(...)` gives plausible but wrong
steps (a different target or text) that must fail: useful as negative examples. `plan_text` writes either
for one grammar in one go against the first observation (MiniWoB++ pages keep their ids); demonstrations
resolve each step on the live page instead (`demos.collect.collect_demonstrations`).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from jaxwebrl.browser.marking import Element
from jaxwebrl.demos.actions import Step, write_step

SOLVABLE = ("click-button", "click-link", "enter-text", "click-checkboxes", "login-user", "choose-list",
            "focus-text", "click-option", "click-tab")


def _quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def _find(elements: Sequence[Element], pred: Callable[[Element], bool], what: str = "an element") -> Element:
    for el in elements:
        if el.visible and pred(el):
            return el
    raise LookupError(f"no visible element is {what}")


def _all(elements: Sequence[Element], pred: Callable[[Element], bool]) -> list[Element]:
    return [el for el in elements if el.visible and pred(el)]


def _text(el: Element) -> str:
    return (el.name or el.text).strip()


def _button(elements: Sequence[Element], name: str) -> Element:
    return _find(elements, lambda e: e.role == "button" and _text(e).lower() == name.lower(), f"a {name!r} button")


def _click(el: Element) -> Step:
    return Step("click", el.id)


def _other(elements: Sequence[Element], target: Element, prefer: Callable[[Element], bool]) -> Element:
    """A wrong target: a preferred look-alike (another button, another link) when the page has one, else any
    other visible element (a page with a single candidate still has text and fields to mis-click)."""
    alike = _all(elements, lambda e: e.id != target.id and prefer(e))
    if alike:
        return alike[0]
    rest = _all(elements, lambda e: e.id != target.id and e.bbox[2] > 0 and e.bbox[3] > 0 and not _contains(e, target))
    if not rest:
        raise LookupError("the page has no element besides the target")
    return rest[-1]


def _contains(outer: Element, inner: Element) -> bool:
    """`outer`'s box encloses `inner`'s (a click on it could land on the target)."""
    ox, oy, ow, oh = outer.bbox
    ix, iy, iw, ih = inner.bbox
    return ox <= ix and oy <= iy and ox + ow >= ix + iw and oy + oh >= iy + ih


def plan(task: str, goal: str, elements: Sequence[Element]) -> list[Step]:
    """Steps that solve `task` (one of SOLVABLE)."""
    if task == "click-button":
        return [_click(_button(elements, _quoted(goal)[0]))]
    if task == "click-link":
        target = _quoted(goal)[0]
        return [_click(_find(elements, lambda e: _text(e) == target and e.depth > 0, f"the link {target!r}"))]
    if task == "enter-text":
        box = _find(elements, lambda e: e.role == "textbox", "a textbox")
        return [Step("type", box.id, _quoted(goal)[0]), _click(_button(elements, "Submit"))]
    if task == "click-checkboxes":
        m = re.match(r"Select (.*) and click Submit\.", goal)
        wanted = [] if m is None or m.group(1) == "nothing" else [w.strip() for w in m.group(1).split(",")]
        boxes = [_find(elements, lambda e, w=w: e.role == "checkbox" and e.name == w, f"the checkbox {w!r}") for w in wanted]
        return [_click(b) for b in boxes] + [_click(_button(elements, "Submit"))]
    if task == "login-user":
        user, pwd = _quoted(goal)[:2]
        boxes = _all(elements, lambda e: e.role == "textbox")
        return [Step("type", boxes[0].id, user), Step("type", boxes[1].id, pwd), _click(_button(elements, "Login"))]
    if task == "choose-list":
        m = re.match(r"Select (.*) from the list and click Submit\.", goal)
        if m is None:
            raise LookupError(f"unexpected choose-list goal {goal!r}")
        sel = _find(elements, lambda e: e.role == "combobox", "a dropdown")
        return [Step("select", sel.id, m.group(1)), _click(_button(elements, "Submit"))]
    if task == "focus-text":
        return [Step("focus", _find(elements, lambda e: e.role == "textbox", "a textbox").id)]
    if task == "click-option":
        m = re.match(r"Select (.*) and click Submit\.", goal)
        if m is None:
            raise LookupError(f"unexpected click-option goal {goal!r}")
        radio = _find(elements, lambda e: e.role == "radio" and e.name == m.group(1), f"the option {m.group(1)!r}")
        return [_click(radio), _click(_button(elements, "Submit"))]
    if task == "click-tab":
        m = re.search(r"Tab #(\d+)", goal)
        if m is None:
            raise LookupError(f"unexpected click-tab goal {goal!r}")
        name = f"Tab #{m.group(1)}"
        tab = _find(elements, lambda e: e.role == "presentation" and e.name == name
                    or e.role == "tab" and e.name == name and e.tag == "a", f"the tab {name!r}")
        return [_click(tab)]
    raise KeyError(f"no scripted solver for {task!r}; have {SOLVABLE}")


def wrong_plan(task: str, goal: str, elements: Sequence[Element]) -> list[Step]:
    """Plausible but wrong steps for `task`: the episode must end unsuccessfully (or not at all)."""
    if task == "click-button":
        target = plan(task, goal, elements)[0]
        el = next(e for e in elements if e.id == target.element)
        return [_click(_other(elements, el, lambda e: e.role == "button"))]
    if task == "click-link":
        target = plan(task, goal, elements)[0]
        el = next(e for e in elements if e.id == target.element)
        return [_click(_other(elements, el, lambda e: e.depth > 0 and e.role == "StaticText"))]
    if task == "enter-text":
        right = plan(task, goal, elements)
        return [Step("type", right[0].element, "definitely wrong"), right[1]]
    if task == "click-checkboxes":
        right = plan(task, goal, elements)
        boxes = _all(elements, lambda e: e.role == "checkbox")
        flip = _click(boxes[0])
        acts = right[:-1]
        acts = [a for a in acts if a != flip] if flip in acts else acts + [flip]
        return acts + [right[-1]]
    if task == "login-user":
        right = plan(task, goal, elements)
        return [right[0], Step("type", right[1].element, "wrong-password"), right[2]]
    if task == "choose-list":
        right = plan(task, goal, elements)
        opts = _all(elements, lambda e: e.role == "option")
        other = next(o for o in opts if o.name != right[0].text)
        return [Step("select", right[0].element, other.name), right[1]]
    if task == "focus-text":
        box = plan(task, goal, elements)[0]
        el = next(e for e in elements if e.id == box.element)
        return [_click(_other(elements, el, lambda e: e.role != "textbox" and e.depth == 0))]
    if task == "click-option":
        right = plan(task, goal, elements)
        m = re.match(r"Select (.*) and click Submit\.", goal)
        radio = _find(elements, lambda e: e.role == "radio" and (m is None or e.name != m.group(1)), "another option")
        return [_click(radio), right[1]]
    if task == "click-tab":
        m = re.search(r"Tab #(\d+)", goal)
        tab = _find(elements, lambda e: e.role == "presentation" and m is not None and e.name != f"Tab #{m.group(1)}",
                    "another tab")
        return [_click(tab)]
    raise KeyError(f"no scripted solver for {task!r}; have {SOLVABLE}")


def plan_text(task: str, goal: str, elements: Sequence[Element], space: str = "bid",
              viewport: tuple[float, float] = (1280, 720), wrong: bool = False) -> list[str]:
    """The plan written for `space` against this one observation (ids stay valid on MiniWoB++'s single page)."""
    steps = (wrong_plan if wrong else plan)(task, goal, elements)
    return [a for s in steps for a in write_step(s, space, elements, viewport).actions]
