"""Scripted steps written per action grammar (demos/actions.py), checked against each grammar's own
parser; openwebrl coordinates are the box centre on 0..1000 and map back inside the box the way the action
space converts them to CSS pixels."""

from __future__ import annotations

import pytest

from jaxwebrl.browser.actions import ParseError, get_action_space
from jaxwebrl.browser.marking import Element
from jaxwebrl.demos.actions import SPACES, Step, write_step

VIEWPORT = (1280, 720)


def el(eid: str, role: str, name: str, bbox, depth: int = 0, props=None, tag: str = "div") -> Element:
    return Element(eid, tag, role, name, name, depth, True, True, True, bbox, props or {}, {}, False)


PAGE = [
    el("2", "button", "Next", (2.0, 52.0, 43.4, 21.0), tag="button"),
    el("4", "textbox", "", (2.0, 84.0, 106.0, 21.0), tag="input"),
    el("5", "combobox", "Country", (2.0, 120.0, 150.0, 19.0), tag="select"),
    el("6", "option", "Taiwan", (0, 0, 0, 0), 1, {"selected": False}, "option"),
    el("7", "option", "Sweden", (0, 0, 0, 0), 1, {"selected": True}, "option"),
    el("8", "option", "Ghana", (0, 0, 0, 0), 1, {"selected": False}, "option"),
    el("9", "checkbox", "ok", (700.0, 1500.0, 13.0, 13.0), tag="input"),  # below the fold
]
STEPS = [Step("click", "2"), Step("type", "4", "hello", enter=True), Step("select", "5", "Taiwan"),
         Step("focus", "4"), Step("back"), Step("stop", text="42"), Step("click", role="button", name="Next")]


@pytest.mark.parametrize("space", SPACES)
def test_every_step_parses_in_its_grammar(space):
    for step in STEPS:
        written = write_step(step, space, PAGE, VIEWPORT)
        assert written.complete and written.actions
        for text in written.actions:
            assert not isinstance(get_action_space(space).parse(text), ParseError), (space, step, text)


def test_openwebrl_clicks_the_box_centre_on_the_0_1000_grid():
    (text,) = write_step(Step("click", "2"), "openwebrl", PAGE, VIEWPORT).actions
    (call,) = get_action_space("openwebrl").parse(text)
    assert (call.args["x"], call.args["y"]) == (round(23.7 / 1280 * 1000), round(62.5 / 720 * 1000))
    px, py = call.args["x"] / 1000 * VIEWPORT[0], call.args["y"] / 1000 * VIEWPORT[1]  # actions/openwebrl.py _to_px
    x, y, w, h = PAGE[0].bbox
    assert x <= px <= x + w and y <= py <= y + h


def test_dropdowns_move_from_the_selected_option():
    acts = write_step(Step("select", "5", "Ghana"), "webarena", PAGE, VIEWPORT).actions
    assert acts == ["click [5]", "press [ArrowDown]", "press [Enter]"]
    (text,) = write_step(Step("select", "5", "Taiwan"), "openwebrl", PAGE, VIEWPORT).actions
    calls = get_action_space("openwebrl").parse(text)
    assert [c.name for c in calls] == ["click", "press_keys"] and calls[1].args["keys"] == ["ArrowUp", "Enter"]


def test_a_target_below_the_fold_is_scrolled_to_first():
    written = write_step(Step("click", "9"), "openwebrl", PAGE, VIEWPORT)
    (call,) = get_action_space("openwebrl").parse(written.actions[0])
    assert not written.complete and call.name == "scroll" and call.args["direction"] == "down"
    assert write_step(Step("click", "9"), "webarena", PAGE, VIEWPORT).actions == ["click [9]"]  # ids need no scroll


def test_missing_target_and_unknown_kind_are_named():
    with pytest.raises(LookupError, match="role='link' name='Home'"):
        write_step(Step("click", role="link", name="Home"), "bid", PAGE, VIEWPORT)
    with pytest.raises(ValueError, match="Step.kind 'drag'"):
        Step("drag")
