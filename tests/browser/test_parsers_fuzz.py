"""Every action-space parser is total: random and adversarial strings give actions or ParseError, never
an exception (no browser needed)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxwebrl.browser import EnvConfig
from jaxwebrl.browser.actions import ACTION_SPACES, Action, ParseError, scan
from jaxwebrl.browser.actions.base import strip_think
from jaxwebrl.browser.actions.scan import MAX_RESPONSE_CHARS

pytestmark = pytest.mark.timeout(300)

FRAGMENTS = [
    "click", "[", "]", "(", ")", "'", '"', "\\", "```", "```python\n", "<think>", "</think>", "<answer>", "</answer>",
    "<tool_call>", "</tool_call>", "{", "}", '"name"', '"arguments"', ":", ",", "do", "action=", "element=",
    "argument=", "exit", "message=", "type", "stop", "goto", "press_enter_after=", "1", "0", "-1", "1e309",
    "99999999999999999999", "fill", "send_msg_to_user", "scroll", "\u2018\u2018", "\u2019\u2019", "\x00", "\n",
    "lambda: 0", "__import__('os')", "**{}", "*[]", "None", "True", "[[[[", "((((", "keys", "x", "y", '"click"',
    "NaN", "Infinity", "\ud7ff", "🙂",
]

adversarial = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
texts = st.one_of(st.text(max_size=300), adversarial)


@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts)
def test_parser_never_raises(space, text):
    out = ACTION_SPACES[space].parse(text)
    assert isinstance(out, ParseError) or (isinstance(out, list) and out and all(isinstance(a, Action) for a in out))
    if isinstance(out, ParseError):
        assert out.message


@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
def test_parser_pathological_inputs(space):
    parse = ACTION_SPACES[space].parse
    for text in ["(" * 100_000, "[" * 50_000 + "]", "do(" + "[" * 5000 + "]" * 5000 + ")",
                 "<tool_call>" + "[" * 100_000 + "</tool_call>", "click('1')" * 5000, "x" * 1_000_000, None, 42]:
        out = parse(text)  # type: ignore[arg-type]
        assert isinstance(out, (list, ParseError))


def test_parsers_accept_reference_formats():
    ok = {
        "webarena": ["```click [331]```", "type [331] [Princes in the Tower] [1]", "stop [King Edward IV]",
                     "In summary, the next action I will perform is ```scroll [down]```", "press [Ctrl+v]",
                     "tab_focus [0]", "goto [http://a.b/]", "go_back", "new_tab", "hover [3] [x]"],
        "webagent_r1": ['<think>r</think><answer>do(action="Click", element="7")</answer>',
                        'do(action="Select Dropdown Option", argument="Month", element="20")',
                        'exit(message="done")', "go_backward()", 'do(action="Scroll Down")'],
        "openwebrl": ['<tool_call>{"name": "click", "arguments": {"x": 512, "y": 86}}</tool_call>',
                      '<tool_call>{"name": "done", "arguments": {"answer": "x"}}</tool_call>'],
        "webgym": ['<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [5, 6]}}</tool_call>',
                   '<think>r</think><tool_call>{"name": "computer_use", "arguments": {"action": "answer", "text": "x"}}</tool_call>'],
        "bid": ["click('12')", "fill('12', \"text\")", "```\nscroll(0, 200)\n```", "send_msg_to_user('hi')"],
    }
    for space, samples in ok.items():
        for s in samples:
            assert isinstance(ACTION_SPACES[space].parse(s), list), (space, s)
    assert ACTION_SPACES["webarena"].parse("type [331] [a [b] c] [0]")[0].args == {"id": "331", "text": "a [b] c", "enter": False}
    assert len(ACTION_SPACES["openwebrl"].parse(
        '<tool_call>{"name": "go_back", "arguments": {}}</tool_call><tool_call>{"name": "wait", "arguments": {"seconds": 1}}</tool_call>')) == 2
    assert isinstance(ACTION_SPACES["bid"].parse("__import__('os').system('x')"), ParseError)


# ---- linear time: >= 10,000 generated strings per action space, work bounded by the meter ------------------

UNITS = ["\n", " \n", "\r\n", "<think>", "</think>", "<answer>", "</answer>", "<tool_call>", "</tool_call>", "```",
         "```python\n", "do(", "click [", "click('1')\n", "(", "[", "'", '"', "\\", "{", '{"name": "wait", ',
         "noop(", "stop [", "type [1] [", "] [", "exit(message=", "\t", "x", "🙂"]
VALID = ["```click [12]```", "stop [42]", '<answer>do(action="Click", element="7")</answer>', 'exit(message="x")',
         '<tool_call>{"name": "click", "arguments": {"x": 5, "y": 6}}</tool_call>', "click('12')", "noop(wait_ms=5)",
         '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [5, 6]}}</tool_call>']
WORK_FACTOR = 8  # scanners may examine each character of the bounded response at most this many times
N_STRINGS = 10_000


def generated(seed: int) -> list[str]:
    """10,000 strings: random fragment mixes, long runs of newlines and unclosed tags (16-200k chars), and
    1 MB repetitions of every unit (each with and without a valid action at either end)."""
    rng = random.Random(seed)
    out: list[str] = []
    for unit in UNITS:
        big = unit * (1_000_000 // len(unit) + 1)
        out += [big, "click('1')\n" + big, big + '\n```click [1]```', big + '<tool_call>{"name": "go_back"}</tool_call>']
    while len(out) < N_STRINGS:
        kind = rng.random()
        if kind < 0.1:  # a valid action of some space after a long degenerate run
            out.append(rng.choice(UNITS) * rng.randint(0, 5_000) + "\n" + rng.choice(VALID))
        elif kind < 0.6:
            out.append("".join(rng.choice(FRAGMENTS + UNITS) for _ in range(rng.randint(0, 60))))
        elif kind < 0.9:
            unit = rng.choice(UNITS)
            out.append(rng.choice(FRAGMENTS) + unit * rng.randint(500, 5_000) + rng.choice(FRAGMENTS))
        else:
            a, b = rng.sample(UNITS, 2)
            out.append((a * rng.randint(1, 50) + b * rng.randint(1, 50)) * rng.randint(10, 100))
    return out


@pytest.fixture(scope="module")
def fuzz_strings() -> list[str]:
    return generated(0)


@pytest.mark.parametrize("space", sorted(ACTION_SPACES))
def test_parsers_linear_work_on_10k_generated_strings(space, fuzz_strings):
    parse = ACTION_SPACES[space].parse
    assert len(fuzz_strings) >= N_STRINGS and sum(len(t) >= 1_000_000 for t in fuzz_strings) >= len(UNITS)
    worst, parsed, slowest = 0.0, 0, 0.0
    for text in fuzz_strings:
        scan.METER.reset()
        t0 = time.thread_time()  # CPU time of this thread: reported, not asserted (the meter is the bound)
        out = parse(text)
        slowest = max(slowest, time.thread_time() - t0)
        assert isinstance(out, (list, ParseError))
        if isinstance(out, ParseError):  # a real verdict, not the never_raises safety net catching a crash
            assert not out.message.startswith("could not parse the"), (out.message, text[:80])
        else:
            parsed += 1
        bounded = min(len(text), 2 * MAX_RESPONSE_CHARS)
        assert (scan.METER.chars > 0 or not text) and scan.METER.chars <= WORK_FACTOR * bounded + 256, (space, len(text), scan.METER.chars, text[:60])
        worst = max(worst, scan.METER.chars / max(bounded, 1))
    assert parsed > 0  # the mix also holds actions the space accepts
    print(f"{space}: {len(fuzz_strings)} strings, {parsed} parsed to actions, max work {worst:.2f} chars per "
          f"bounded input char, slowest parse {slowest * 1000:.1f} ms CPU")


def test_meter_sees_quadratic_scanning():
    """The property can fail: the regex the scanners replaced examines each unclosed tag's tail again."""
    text = "<think>" * 2_000
    scan.METER.reset()
    strip_think(text)
    linear = scan.METER.chars
    quadratic = sum(len(text) - i for i in range(0, len(text), len("<think>")))  # what `<think>.*?</think>` scans
    assert linear <= WORK_FACTOR * len(text) < quadratic


def test_one_env_parsing_1mb_does_not_block_another(runner, pool, sites):
    """While env A's step parses a 1 MB response (a run of newlines: the input the old `^\\s*` regexes were
    quadratic on), env B in the same pool completes a whole step: A's parse is held open until B's step has
    finished, which can only happen if the parse leaves the event loop free (on the loop it would block B
    until the safety limit, and B would finish second). Ordered by events, not by seconds."""
    import dataclasses
    import threading

    from tests.browser.conftest import find_id, pg_task

    async def go():
        cfg = EnvConfig(action_space="bid")
        a, b = await pool.new_env(cfg), await pool.new_env(cfg)
        try:
            await a.reset(pg_task(sites), 0)
            obs_b = await b.reset(pg_task(sites), 0)
            parsing, b_done = threading.Event(), threading.Event()
            real_parse = a.space.parse

            def held_parse(text: str):
                parsing.set()
                b_done.wait(120)  # safety limit only: returns as soon as B's step is done
                return real_parse(text)

            a.space = dataclasses.replace(a.space, parse=held_parse)
            finished: list[str] = []

            async def step(env, text, name):
                res = await env.step(text)
                finished.append(name)
                return res

            big = "noop(wait_ms=1000)\n" + "\n" * 1_000_000
            ta = asyncio.ensure_future(step(a, big, "a"))
            assert await asyncio.to_thread(parsing.wait, 120)  # A's parse has begun
            rb = await step(b, f"click('{find_id(obs_b, 'button', 'Press me')}')", "b")
            b_done.set()
            ra = await ta
            assert not ra.format_error and [x.name for x in ra.actions] == ["noop"]
            assert not rb.format_error and await b.session.page.locator("#log").inner_text() == "clicked"
            assert finished == ["b", "a"]
        finally:
            await a.close()
            await b.close()

    runner.run(go())
