"""Observations: a11y line format, simplified HTML, predictable budget truncation, screenshots with and
without set-of-marks, metadata (url, tabs, scroll, focused element, viewport)."""

from __future__ import annotations

import re

import pytest

from jaxwebrl.browser import EnvConfig, ObsConfig
from jaxwebrl.browser.observation import relative_url, truncate
from tests.browser.conftest import find_id, pg_task

pytestmark = pytest.mark.timeout(120)
LINE = re.compile(r"^\t*\[\d+\] \S+ (?:'.*'|\".*\")(?: \w+: .+)*$")


def test_text_observations_and_budget(runner, pool, sites):
    async def go():
        cfg = EnvConfig(obs=ObsConfig(text_mode="both", text_budget_chars=100_000))
        async with pool.episode(sites.get_task("shop_007"), 0, cfg) as (env, obs):
            ax, html = obs.axtree, obs.html
            lines = ax.split("\n")
            assert lines[0].startswith("RootWebArea ")
            assert all(LINE.match(line) for line in lines[1:]), [x for x in lines[1:] if not LINE.match(x)]
            assert any(re.search(r"\[\d+\] searchbox 'Search products' required: False", x) for x in lines)
            assert re.search(r'<input id="\d+" type="search"', html) and html.startswith("<html>")
            # budget: same cut every time, at a line boundary, with a marker
            small = EnvConfig(obs=ObsConfig(text_mode="axtree", text_budget_chars=300))
            r1 = await env.step("```scroll [up]```")
            t1, trunc = truncate(r1.observation.axtree or ax, 300)
            assert trunc and len(t1) <= 300 and t1.endswith(" lines]")
            assert t1 == truncate(r1.observation.axtree or ax, 300)[0]
        async with pool.episode(sites.get_task("shop_007"), 0, small) as (env, obs):
            assert obs.truncated and len(obs.text) <= 300 and "[... truncated: showing" in obs.text
            assert obs.text.split("\n")[:-1] == ax.split("\n")[: len(obs.text.split("\n")) - 1]

    runner.run(go())


def test_screenshot_som_and_metadata(runner, pool, sites):
    async def go():
        plain_cfg = EnvConfig(obs=ObsConfig(text_mode="axtree", screenshot=True))
        som_cfg = EnvConfig(obs=ObsConfig(text_mode="none", screenshot=True, set_of_marks=True), viewport=(1024, 640))
        async with pool.episode(pg_task(sites), 0, plain_cfg) as (env, obs):
            plain = obs.screenshot
            m = obs.metadata
            assert m.url == sites.urls["playground"] + "/" and m.title == "Playground" and m.viewport == (1280, 720)
            assert m.tabs == [{"index": 0, "url": m.url, "active": True, "title": "Playground"}] and m.focused is None
            r = await env.step(f"```click [{find_id(obs, 'textbox', 'Query')}]```")
            assert r.observation.metadata.focused.endswith("textbox 'Query'")
            r = await env.step("```scroll [down]```")
            assert r.observation.metadata.scroll[1] > 0 and r.observation.metadata.page_size[1] > 3000
            assert "URL: " in r.observation.metadata.to_text() and "Focused:" in r.observation.metadata.to_text()
        async with pool.episode(pg_task(sites), 0, som_cfg) as (env, obs):
            assert obs.screenshot[:4] == b"\x89PNG" and obs.screenshot != plain
            assert obs.metadata.viewport == (1024, 640)
            # the overlay is removed after the screenshot and never marked
            assert await env.session.page.locator("#__jaxwebrl_som").count() == 0
            inview = [e for e in obs.elements if e.interactive and e.in_viewport]
            assert inview and all(e.bbox[2] > 0 for e in inview)

    runner.run(go())


def test_hidden_elements_are_marked_but_not_shown(runner, pool, sites):
    async def go():
        async with pool.episode(pg_task(sites), 0, EnvConfig()) as (env, obs):
            await env.session.page.evaluate(
                "() => { const b = document.createElement('button'); b.textContent = 'Ghost';"
                " b.style.visibility = 'hidden'; document.body.prepend(b); }")
            r = await env.step("```scroll [up]```")
            ghost = [e for e in r.observation.elements if e.name == "Ghost"]
            assert ghost and not ghost[0].visible and "Ghost" not in r.observation.text

    runner.run(go())


def test_relative_urls_drop_the_servers_origin(runner, pool, sites):
    """With relative_urls, same-origin links read as paths (a local server's port never reaches the prompt);
    other origins stay absolute."""
    origin = sites.urls["playground"]

    async def go():
        absolute = EnvConfig(obs=ObsConfig(text_mode="axtree", text_budget_chars=100_000))
        relative = EnvConfig(obs=ObsConfig(text_mode="axtree", text_budget_chars=100_000, relative_urls=True))
        async with pool.episode(pg_task(sites), 0, absolute) as (env, obs):
            assert f"url: {origin}/" in obs.text
        async with pool.episode(pg_task(sites), 0, relative) as (env, obs):
            urls = re.findall(r" url: (\S+)", obs.text)
            assert urls and all(u.startswith("/") for u in urls) and origin not in obs.text, urls

    runner.run(go())


def test_relative_url_keeps_other_origins():
    page = "http://127.0.0.1:40105/miniwob/click-tab.html"
    assert relative_url("http://127.0.0.1:40105/miniwob/click-tab.html#tabs-2", page) == "/miniwob/click-tab.html#tabs-2"
    assert relative_url("http://127.0.0.1:40105", page) == "/"
    assert relative_url("http://127.0.0.1:40105/a?q=1", page) == "/a?q=1"
    assert relative_url("http://127.0.0.1:9999/a", page) == "http://127.0.0.1:9999/a"
    assert relative_url("https://example.com/a", page) == "https://example.com/a"
    assert relative_url("mailto:x@y.z", page) == "mailto:x@y.z"


def test_box_centres_in_the_axtree_aim_openwebrl_clicks(runner, pool, sites):
    """`box_centres`: each interactive element in view shows its centre on the 0..1000 grid; an OpenWebRL
    click at those numbers lands on that element (the text stand-in for the screenshot)."""
    async def go():
        cfg = EnvConfig(action_space="openwebrl", obs=ObsConfig(text_mode="axtree", box_centres=True),
                        viewport=(1000, 600))
        async with pool.episode(pg_task(sites), 0, cfg) as (env, obs):
            shown = re.findall(r"\[(\d+)\] (\S+) .*? centre: \((\d+), (\d+)\)$", obs.text, re.M)
            assert len(shown) >= 3
            inview = {e.id: e for e in obs.elements if e.interactive and e.in_viewport}
            assert {i for i, *_ in shown} == set(inview)
            for eid, _, x, y in shown:
                assert (int(x), int(y)) == inview[eid].normalised_centre((1000, 600))
            box = next((eid, x, y) for eid, role, x, y in shown if role == "textbox")
            r = await env.step(f'<tool_call>{{"name": "click", "arguments": {{"x": {box[1]}, "y": {box[2]}}}}}</tool_call>')
            assert r.observation.metadata.focused is not None and r.observation.metadata.focused.startswith(f"[{box[0]}]")

    runner.run(go())


def test_ids_after_names_render_the_same_elements_and_their_ids_click(runner, pool, sites):
    """`ids_after_names`: every a11y line carries the same element as the default layout, with its id moved
    behind the name (`searchbox 'Search products' [12] required: False`); an id read from such a line clicks."""
    async def go():
        default = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=100_000))
        after = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=100_000,
                                                            ids_after_names=True))
        async with pool.episode(sites.get_task("shop_007"), 0, default) as (_, obs):
            before_lines = obs.text.split("\n")
        async with pool.episode(sites.get_task("shop_007"), 0, after) as (env, obs):
            lines = obs.text.split("\n")
            assert len(lines) == len(before_lines) > 5 and lines[0] == before_lines[0]
            moved = re.compile(r"^(\t*)(\S+ (?:'.*?'|\".*?\")) \[(\d+)\](.*)$")
            for line, old in zip(lines[1:], before_lines[1:]):
                m = moved.match(line)
                assert m, line
                # the same line with the id moved (ids differ between the two episodes' sessions only by number)
                assert re.sub(r"\[\d+\] ", "", old) == f"{m[1]}{m[2]}{m[4]}", (old, line)
            link = next(m for m in map(moved.match, lines[1:])  # a link to another page than this one
                        if m[2].startswith("link ") and "/category/" in m[4])
            r = await env.step(f"click('{link[3]}')")
            assert not r.format_error and "Page navigated to" in r.feedback, r.feedback

    runner.run(go())
