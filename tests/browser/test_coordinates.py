"""OpenWebRL's 0..1000 coordinates in real Chromium: the box centre of an element, normalised by the viewport,
clicks that element at 1280x720 and 800x600 with device scale factors 1 and 2, and the same normalised point
on the screenshot (viewport * factor pixels) shows that element's colour. Bad coordinates are failure
feedback; the episode goes on."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from envs.sites.playground import GRID_COLOURS, GRID_NAMES
from jaxwebrl.browser import EnvConfig, ObsConfig
from jaxwebrl.browser.actions.openwebrl import to_css_pixels, to_normalised
from tests.browser.conftest import find_id, pg_task
from tests.browser.test_actions import call

pytestmark = pytest.mark.timeout(240)


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def test_normalised_mapping_is_linear_and_inverse():
    assert to_css_pixels(500, 500, (1280, 720)) == (640, 360)
    assert to_css_pixels(1000, 0, (800, 600)) == (800, 0)
    assert to_normalised(*to_css_pixels(123, 877, (800, 600)), (800, 600)) == pytest.approx((123, 877))


@pytest.mark.parametrize("viewport", [(1280, 720), (800, 600)])
@pytest.mark.parametrize("scale", [1, 2])
def test_box_centre_clicks_the_element_at_any_viewport_and_scale(runner, pool, sites, viewport, scale):
    async def go():
        cfg = EnvConfig(action_space="openwebrl", viewport=viewport, device_scale_factor=scale,
                        obs=ObsConfig(text_mode="axtree", screenshot=True))
        async with pool.episode(pg_task(sites, "/grid"), 0, cfg) as (env, obs):
            shot = Image.open(io.BytesIO(obs.screenshot)).convert("RGB")
            assert shot.size == (viewport[0] * scale, viewport[1] * scale)
            assert obs.metadata.viewport == viewport
            clicked = 0
            for r in range(3):
                for c in range(3):
                    el = next(e for e in obs.elements if e.id == find_id(obs, "button", GRID_NAMES[r][c]))
                    x, y = to_normalised(*el.center, obs.metadata.viewport)
                    x, y = round(x, 1), round(y, 1)
                    # the screenshot pixel at the normalised point has the element's colour
                    px = min(int(x / 1000 * shot.width), shot.width - 1)
                    py = min(int(y / 1000 * shot.height), shot.height - 1)
                    assert shot.getpixel((px, py)) == _rgb(GRID_COLOURS[r][c]), (r, c, x, y)
                    res = await env.step(call("click", x=x, y=y))
                    assert not res.format_error, res.feedback
                    assert await env.session.page.locator("#log").inner_text() == GRID_NAMES[r][c]
                    assert res.feedback.startswith(f"Succeed: 'click' on <button> \"{GRID_NAMES[r][c]}\" at ({x:g}, {y:g})")
                    clicked += 1
            assert clicked == 9

    runner.run(go())


def test_bad_coordinates_are_failure_feedback_and_the_episode_goes_on(runner, pool, sites):
    bad = {
        "outside": call("click", x=1000.5, y=10),
        "negative": call("hover", x=-1, y=10),
        "nan": '<tool_call>{"name": "click", "arguments": {"x": NaN, "y": 10}}</tool_call>',
        "infinite": '<tool_call>{"name": "drag", "arguments": {"x1": 1, "y1": 1, "x2": Infinity, "y2": 3}}</tool_call>',
        "string": call("click", x="500", y=10),
        "bool": call("click", x=True, y=10),
        "missing": call("click", x=500),
        "no args": '<tool_call>{"name": "drag"}</tool_call>',
    }
    expect = {"missing": "missing argument", "no args": "missing argument"}

    async def go():
        cfg = EnvConfig(action_space="openwebrl", viewport=(800, 600))
        async with pool.episode(pg_task(sites, "/grid"), 0, cfg) as (env, obs):
            for name, text in bad.items():
                res = await env.step(text)
                assert res.format_error and not res.done and res.termination_reason is None, name
                assert res.feedback.startswith("Invalid action:"), (name, res.feedback)
                assert expect.get(name, "must be a number in 0..1000") in res.feedback, (name, res.feedback)
            assert await env.session.page.locator("#log").inner_text() == "ready"  # nothing was clicked
            x, y = to_normalised(*next(e for e in obs.elements if e.name == GRID_NAMES[1][1]).center, (800, 600))
            res = await env.step(call("click", x=x, y=y))
            assert not res.format_error and await env.session.page.locator("#log").inner_text() == GRID_NAMES[1][1]

    runner.run(go())


def _cu(**args) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': 'computer_use', 'arguments': args})}</tool_call>"


def test_webgym_computer_use_clicks_scrolls_and_refuses_bad_input(runner, pool, sites):
    """WebGym's coordinate mode (Qwen3-VL computer_use calls) at 800x600, scale 2: the box centre clicks the
    element; pixel scrolls move the page; bad coordinates and unknown actions are feedback."""

    async def go():
        cfg = EnvConfig(action_space="webgym", viewport=(800, 600), device_scale_factor=2,
                        obs=ObsConfig(text_mode="axtree", screenshot=True))
        async with pool.episode(pg_task(sites, "/grid"), 0, cfg) as (env, obs):
            el = next(e for e in obs.elements if e.name == GRID_NAMES[2][0])
            x, y = (round(v, 1) for v in to_normalised(*el.center, obs.metadata.viewport))
            res = await env.step(_cu(action="left_click", coordinate=[x, y]))
            assert not res.format_error and await env.session.page.locator("#log").inner_text() == GRID_NAMES[2][0]
            assert res.feedback.startswith(f"Succeed: 'click' on <button> \"{GRID_NAMES[2][0]}\"")
            for bad, why in [(_cu(action="left_click", coordinate=[1001, 5]), "0..1000"),
                             (_cu(action="left_click"), "coordinate must be [x, y]"),
                             ('<tool_call>{"name": "computer_use", "arguments": {"action": "double_click", '
                              '"coordinate": [NaN, 3]}}</tool_call>', "0..1000"),
                             (_cu(action="fly"), "unknown computer_use action"),
                             (_cu(action="scroll", pixels=0), "'scroll' pixels"),
                             ('<tool_call>{"name": "click", "arguments": {"x": 1, "y": 2}}</tool_call>', "computer_use")]:
                res = await env.step(bad)
                assert res.format_error and not res.done and why in res.feedback, (bad, res.feedback)
        async with pool.episode(pg_task(sites), 0, cfg) as (env, obs):
            res = await env.step(_cu(action="scroll", pixels=-300, coordinate=[500, 500]))
            assert res.feedback == "Succeed: 'scroll' down by 300 pixels executed." and res.observation.metadata.scroll[1] > 0
            res = await env.step(_cu(action="scroll", pixels=5000) + _cu(action="scroll", pixels=100))
            assert res.feedback.split("\n")[1].endswith("may be at a boundary.")
            q = next(e for e in res.observation.elements if e.role == "textbox" and e.name == "Query")
            qx, qy = to_normalised(*q.center, res.observation.metadata.viewport)
            res = await env.step(_cu(action="left_click", coordinate=[qx, qy]) + _cu(action="type", text="gym")
                                 + _cu(action="key", keys=["Enter"]))
            assert "submitted?q=gym" in env.session.page.url, res.feedback
            res = await env.step(_cu(action="go_back") + _cu(action="visit_url", url=sites.urls["playground"] + "/page2"))
            assert env.session.page.url.endswith("/page2")
            res = await env.step(_cu(action="answer", text="42"))
            assert res.done and (await env.evaluate()).success

    runner.run(go())
