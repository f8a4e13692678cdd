"""Every action-space parser is total: random and adversarial strings give actions or ParseError, never
an exception (no browser needed)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxwebrl.browser.actions import ACTION_SPACES, Action, ParseError

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
        "bid": ["click('12')", "fill('12', \"text\")", "```\nscroll(0, 200)\n```", "send_msg_to_user('hi')"],
    }
    for space, samples in ok.items():
        for s in samples:
            assert isinstance(ACTION_SPACES[space].parse(s), list), (space, s)
    assert ACTION_SPACES["webarena"].parse("type [331] [a [b] c] [0]")[0].args == {"id": "331", "text": "a [b] c", "enter": False}
    assert len(ACTION_SPACES["openwebrl"].parse(
        '<tool_call>{"name": "go_back", "arguments": {}}</tool_call><tool_call>{"name": "wait", "arguments": {"seconds": 1}}</tool_call>')) == 2
    assert isinstance(ACTION_SPACES["bid"].parse("__import__('os').system('x')"), ParseError)
