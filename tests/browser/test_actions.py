"""Every action of every action space runs against the playground page in real Chromium and changes
the page as expected; feedback messages appear in their situations; invalid actions are format errors."""

from __future__ import annotations

import pytest

from jaxwebrl.browser import EnvConfig, ObsConfig
from tests.browser.conftest import find_id, pg_task

pytestmark = pytest.mark.timeout(180)


async def log(env) -> str:
    return await env.session.page.locator("#log").inner_text()


async def value(env, sel: str) -> str:
    return await env.session.page.locator(sel).input_value()


def test_webarena_actions(runner, pool, sites):
    async def go():
        async with pool.episode(pg_task(sites), 0, EnvConfig(action_space="webarena")) as (env, obs):
            base = sites.urls["playground"]
            r = await env.step(f"Let me click.\n```click [{find_id(obs, 'button', 'Press me')}]```")
            assert not r.format_error and await log(env) == "clicked"
            assert "Clicked" in r.feedback and "'Press me'" in r.feedback
            r = await env.step(f"```hover [{find_id(obs, contains='Hover target')}]```")
            assert await log(env) == "hovered" and "Hovered" in r.feedback
            q = find_id(obs, "textbox", "Query")
            r = await env.step(f"```type [{q}] [hello] [0]```")
            assert await value(env, "#q") == "hello" and "navigated" not in r.feedback
            r = await env.step(f"```type [{q}] [world] [press_enter_after=1]```")
            assert env.session.page.url.endswith("/submitted?q=world") and "Page navigated to" in r.feedback
            r = await env.step("```go_back```")
            assert env.session.page.url == base + "/" and "Went back" in r.feedback
            r = await env.step("```go_forward```")
            assert "submitted" in env.session.page.url
            r = await env.step(f"```goto [{base}/]```")
            assert env.session.page.url == base + "/"
            obs = r.observation
            r = await env.step(f"```click [{find_id(obs, 'textbox', 'Keys')}]```")
            r = await env.step("```press [Ctrl+b]```")
            assert await log(env) == "ctrl+b" and "Control+b" in r.feedback
            r = await env.step("```scroll [down]```")
            assert r.observation.metadata.scroll[1] > 0
            await env.step("```scroll [up]```")
            r = await env.step("```scroll [up]```")
            assert "may be at a boundary" in r.feedback
            r = await env.step("```new_tab```")
            assert len(env.session.pages) == 2 and env.session.active == 1
            r = await env.step("```tab_focus [0]```")
            assert env.session.active == 0 and "Switched to tab 0" in r.feedback
            r = await env.step("```tab_focus [1]```")
            r = await env.step("```close_tab```")
            assert len(env.session.pages) == 1
            r = await env.step(f"```click [{find_id(r.observation, 'link', 'Open page 2 in new tab')}]```")
            assert len(env.session.pages) == 2 and "new tab" in r.feedback and "page2" in env.session.page.url
            assert len(r.observation.metadata.tabs) == 2
            await env.step("```close_tab```")
            # invalid actions: never raise, count as format errors
            r = await env.step("```click [99999]```")
            assert r.format_error and "not found" in r.feedback and not r.done
            r = await env.step("I am not sure what to do")
            assert r.format_error and "no action found" in r.feedback
            r = await env.step("```type [5]```")
            assert r.format_error and "type needs" in r.feedback
            r = await env.step("```tab_focus [7]```")
            assert r.format_error and "out of range" in r.feedback
            r = await env.step("```goto [http://127.0.0.1:9/]```")
            assert not r.format_error and "refused" in r.feedback and "allowlist" in r.feedback
            r = await env.step("```goto [file:///etc/passwd]```")
            assert "file:// URLs are blocked" in r.feedback
            r = await env.step("<think>done, answer is 42</think>\n```stop [42]```")
            assert r.done and r.answer == "42" and env.termination_reason == "answer"
            assert (await env.evaluate()).success
            r = await env.step("```click [1]```")
            assert r.done and "over" in r.feedback

    runner.run(go())


def test_webagent_r1_actions(runner, pool, sites):
    async def go():
        cfg = EnvConfig(action_space="webagent_r1", obs=ObsConfig(text_mode="html"))
        async with pool.episode(pg_task(sites), 0, cfg) as (env, obs):
            assert 'id="' in obs.text and "<button" in obs.text
            do = lambda s: env.step(f"<think>x</think><answer>{s}</answer>")  # noqa: E731
            r = await do(f'do(action="Click", element="{find_id(obs, "button", "Press me")}")')
            assert await log(env) == "clicked"
            r = await do(f'do(action="Right Click", element="{find_id(obs, "button", "Right me")}")')
            assert await log(env) == "right-clicked"
            r = await do(f'do(action="Hover", element="{find_id(obs, contains="Hover target")}")')
            assert await log(env) == "hovered"
            q = find_id(obs, "textbox", "Query")
            r = await do(f'do(action="Type", argument="abc", element="{q}")')
            assert await value(env, "#q") == "abc" and "submitted" not in env.session.page.url
            r = await do(f'do(action="Press Enter", element="{q}")')
            assert "submitted?q=abc" in env.session.page.url
            r = await do("go_backward()")
            assert "submitted" not in env.session.page.url
            r = await do("go_forward()")
            assert "submitted" in env.session.page.url
            obs = (await do("go_backward()")).observation  # a reloaded page has new elements, new ids
            q = find_id(obs, "textbox", "Query")
            r = await do(f'do(action="Search", argument="xyz", element="{q}")')
            assert "submitted?q=xyz" in env.session.page.url and "Page navigated" in r.feedback
            obs = (await do("go_backward()")).observation
            r = await do(f'do(action="Select Dropdown Option", argument="Banana", element="{find_id(obs, "combobox", "Fruit")}")')
            assert await log(env) == "fruit=b"
            r = await do('do(action="Scroll Down")')
            assert r.observation.metadata.scroll[1] > 0
            r = await do('do(action="Scroll Up")')
            assert r.observation.metadata.scroll[1] == 0
            r = await do('do(action="Wait")')
            assert "Waited" in r.feedback
            await env.step(f'<answer>do(action="Click", element="{find_id(obs, "link", "Open page 2 in new tab")}")</answer>')
            r = await do('do(action="Switch Tab", argument="0")')
            assert env.session.active == 0
            # the paper's typographic quotes are accepted
            r = await env.step("<answer> do(action=\u2018\u2018Click\u2019\u2019, element=\u2018\u2018%s\u2019\u2019) </answer>"
                               % find_id(obs, "button", "Press me"))
            assert not r.format_error
            r = await do('do(action="Click")')
            assert r.format_error and "needs element" in r.feedback
            r = await do('do(action="Fly", element="3")')
            assert r.format_error
            r = await do('do(action="Click", element="424242")')
            assert r.format_error and "not found" in r.feedback
            r = await do('exit(message="42")')
            assert r.done and r.answer == "42" and (await env.evaluate()).success

    runner.run(go())


def _center(obs, eid: str) -> tuple[int, int]:
    el = next(e for e in obs.elements if e.id == eid)
    x, y = el.center
    vw, vh = obs.metadata.viewport
    return round(x / vw * 1000, 1), round(y / vh * 1000, 1)


def call(name: str, **args) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def test_openwebrl_actions(runner, pool, sites):
    async def go():
        cfg = EnvConfig(action_space="openwebrl", obs=ObsConfig(text_mode="none", screenshot=True))
        async with pool.episode(pg_task(sites), 0, cfg) as (env, obs):
            assert obs.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and obs.text == ""
            x, y = _center(obs, find_id(obs, "button", "Press me"))
            r = await env.step("<think>click it</think>" + call("click", x=x, y=y))
            assert await log(env) == "clicked"
            assert r.feedback.startswith("Succeed: 'click' on <button> \"Press me\" at (")
            assert "Note: no visible navigation or new tab detected." in r.feedback
            x, y = _center(obs, find_id(obs, "button", "Double me"))
            await env.step(call("click", x=x, y=y, click_type="double"))
            assert await log(env) == "double-clicked"
            x, y = _center(obs, find_id(obs, "button", "Right me"))
            await env.step(call("click", x=x, y=y, button="right"))
            assert await log(env) == "right-clicked"
            x, y = _center(obs, find_id(obs, contains="Hover target"))
            r = await env.step(call("hover", x=x, y=y))
            assert await log(env) == "hovered" and "Succeed: 'hover'" in r.feedback
            x1, y1 = _center(obs, find_id(obs, contains="Drag me"))
            x2, y2 = _center(obs, find_id(obs, contains="Drop zone"))
            r = await env.step(call("drag", x1=x1, y1=y1, x2=x2, y2=y2))
            assert await log(env) == "dropped" and "Succeed: 'drag'" in r.feedback
            r = await env.step(call("write", text="nothing focused"))
            assert r.feedback.startswith("Failed: 'write'")
            sx, sy = _center(obs, find_id(obs, "textbox", "Shout"))
            r = await env.step(call("click", x=sx, y=sy) + call("write", text="quiet"))
            lines = r.feedback.split("\n")
            assert len(lines) == 2 and lines[1].startswith("Succeed: 'write' typed \"quiet\" into <input>")
            assert "Note: the field's actual value is \"QUIET\", which differs from the typed text." in lines[1]
            qx, qy = _center(obs, find_id(obs, "textbox", "Query"))
            r = await env.step(call("click", x=qx, y=qy) + call("write", text="tools") + call("press_keys", keys=["Enter"]))
            assert "submitted?q=tools" in env.session.page.url
            assert "Succeed: 'press_keys' ['Enter'] executed. Page navigated to" in r.feedback
            r = await env.step(call("go_back"))
            assert "Succeed: 'go_back' executed. Page navigated to" in r.feedback
            r = await env.step(call("scroll", direction="down", amount=50))
            assert "Succeed: 'scroll' down by 50% executed." in r.feedback and "boundary" not in r.feedback
            r = await env.step(call("scroll", direction="up", amount=100) + call("scroll", direction="up", amount=100))
            assert "Note: page scroll position did not change and may be at a boundary." in r.feedback.split("\n")[1]
            r = await env.step(call("goto_url", url=sites.urls["playground"] + "/page2"))
            assert env.session.page.url.endswith("/page2") and r.feedback.startswith("Succeed: 'goto_url'")
            r = await env.step(call("goto_url", url=sites.urls["shop"] + "/"))
            assert r.feedback.startswith("Failed: 'goto_url' execution failed:") and "allowlist" in r.feedback
            r = await env.step(call("wait", seconds=0.2))
            assert "Succeed: 'wait'" in r.feedback
            r = await env.step(call("new_tab") + call("switch_tab", index=0))
            assert len(env.session.pages) == 2
            assert f"Succeed: 'switch_tab' switched to tab 0 ({sites.urls['playground']}/page2)." in r.feedback
            r = await env.step(call("switch_tab", index=1) + call("close_tab"))
            assert len(env.session.pages) == 1 and "Succeed: 'close_tab'" in r.feedback
            r = await env.step(call("switch_tab", index=5))
            assert r.format_error and "out of range" in r.feedback
            r = await env.step(call("click", x=1200, y=3))
            assert r.format_error and "0..1000" in r.feedback
            r = await env.step("<tool_call>{not json}</tool_call>")
            assert r.format_error and "not valid JSON" in r.feedback
            r = await env.step("just text")
            assert r.format_error and "no tool call" in r.feedback
            r = await env.step(call("done", answer="42"))
            assert r.done and r.feedback == "Succeed: task marked as done. Response: 42"
            assert (await env.evaluate()).success

    runner.run(go())


def test_bid_actions(runner, pool, sites):
    async def go():
        async with pool.episode(pg_task(sites), 0, EnvConfig(action_space="bid")) as (env, obs):
            i = lambda *a, **k: find_id(obs, *a, **k)  # noqa: E731
            await env.step(f"click('{i('button', 'Press me')}')")
            assert await log(env) == "clicked"
            await env.step(f"dblclick('{i('button', 'Double me')}')")
            assert await log(env) == "double-clicked"
            await env.step(f"click('{i('button', 'Right me')}', button='right')")
            assert await log(env) == "right-clicked"
            await env.step(f"hover('{i(contains='Hover target')}')")
            assert await log(env) == "hovered"
            q = i("textbox", "Query")
            await env.step(f"fill('{q}', 'bid text')")
            assert await value(env, "#q") == "bid text"
            await env.step(f"clear('{q}')")
            assert await value(env, "#q") == ""
            r = await env.step(f"focus('{i('textbox', 'Keys')}')\nkeyboard_press('Control+b')")
            assert await log(env) == "ctrl+b" and len(r.actions) == 2
            await env.step(f"focus('{q}')\nkeyboard_type('typed')")
            assert await value(env, "#q") == "typed"
            await env.step(f"select_option('{i('combobox', 'Fruit')}', 'Cherry')")
            assert await log(env) == "fruit=c"
            cb = i("checkbox", "Subscribe")
            await env.step(f"check('{cb}')")
            assert await log(env) == "cb=true"
            await env.step(f"uncheck('{cb}')")
            assert await log(env) == "cb=false"
            r = await env.step("scroll(0, 400)")
            assert r.observation.metadata.scroll[1] > 0
            await env.step("scroll(0, -5000)")
            r = await env.step("scroll(0, -100)")
            assert "boundary" in r.feedback
            r = await env.step(f"press('{q}', 'Enter')")
            assert "submitted" in env.session.page.url
            await env.step("go_back()")
            assert "submitted" not in env.session.page.url
            await env.step("go_forward()")
            assert "submitted" in env.session.page.url
            await env.step(f"goto('{sites.urls['playground']}/page2')")
            assert env.session.page.url.endswith("/page2")
            await env.step("new_tab()")
            assert len(env.session.pages) == 2
            await env.step("tab_focus(0)")
            assert env.session.active == 0
            await env.step("tab_focus(1)\ntab_close()")
            assert len(env.session.pages) == 1
            r = await env.step("noop(wait_ms=50)")
            assert "Waited" in r.feedback
            r = await env.step("```python\nclick('77777')\n```")
            assert r.format_error and "not found" in r.feedback
            r = await env.step("fill('12')")
            assert r.format_error and "missing" in r.feedback
            r = await env.step("explode('1')")
            assert r.format_error
            r = await env.step("send_msg_to_user('42')")
            assert r.done and r.answer == "42" and (await env.evaluate()).success

    runner.run(go())


def test_dialogs_iframes_and_popups(runner, pool, sites):
    async def go():
        async with pool.episode(pg_task(sites), 0, EnvConfig(action_space="webarena")) as (env, obs):
            await env.step(f"```click [{find_id(obs, 'button', 'Alert me')}]```")
            assert await log(env) == "alert closed"
            await env.step(f"```click [{find_id(obs, 'button', 'Confirm me')}]```")
            assert await log(env) == "confirm=false"
            # elements inside the iframe are marked with ids unique across frames and are clickable
            fb = find_id(obs, "button", "Frame button")
            ids = [e.id for e in obs.elements]
            assert len(ids) == len(set(ids))
            iframe = next(e for e in obs.elements if e.is_frame)
            inner = next(e for e in obs.elements if e.id == fb)
            assert inner.depth > iframe.depth and inner.bbox[1] >= iframe.bbox[1]
            r = await env.step(f"```click [{fb}]```")
            assert "'frame clicked'" in r.observation.text or "frame clicked" in r.observation.text
            # ids are stable across observations
            assert find_id(r.observation, "button", "Press me") == find_id(obs, "button", "Press me")

    runner.run(go())


def test_numbers_must_be_finite_and_in_range_and_write_needs_an_editable_field(runner, pool, sites):
    """`wait(NaN)` / `wait(Infinity)` and their bid twins are refused with feedback (nothing waits); `write`
    into a focused button fails instead of reporting success."""

    async def go():
        async with pool.episode(pg_task(sites), 0, EnvConfig(action_space="openwebrl")) as (env, obs):
            for bad in ("NaN", "Infinity", "-Infinity", "1e309", "-1", "31"):
                r = await env.step('<tool_call>{"name": "wait", "arguments": {"seconds": %s}}</tool_call>' % bad)
                assert r.format_error and not r.done and "'wait' seconds must be a finite number in 0..30" in r.feedback, bad
            r = await env.step('<tool_call>{"name": "click", "arguments": {"x": NaN, "y": 5}}</tool_call>')
            assert r.format_error and "0..1000" in r.feedback
            bx, by = _center(obs, find_id(obs, "button", "Press me"))
            r = await env.step(call("click", x=bx, y=by) + call("write", text="into a button"))
            lines = r.feedback.split("\n")
            assert await log(env) == "clicked" and len(lines) == 2
            assert lines[1].startswith("Failed: 'write' execution failed: the focused element <button>") and "editable" in lines[1]
            sx, sy = _center(obs, find_id(obs, "textbox", "Query"))
            r = await env.step(call("click", x=sx, y=sy) + call("write", text="ok"))
            assert r.feedback.split("\n")[1].startswith("Succeed: 'write' typed \"ok\"") and await value(env, "#q") == "ok"
        async with pool.episode(pg_task(sites), 0, EnvConfig(action_space="bid")) as (env, obs):
            for bad in ("noop(wait_ms=1e309)", "noop(wait_ms=-1e309)", "noop(wait_ms=20000)", "scroll(0, 1e309)",
                        "tab_focus(-1)", "noop(wait_ms=True)"):
                r = await env.step(bad)
                assert r.format_error and "must be" in r.feedback, (bad, r.feedback)
            r = await env.step(f"fill('{find_id(obs, 'button', 'Press me')}', 'x')")
            assert not r.format_error and r.feedback.startswith("Failed: 'fill' execution failed")

    runner.run(go())
