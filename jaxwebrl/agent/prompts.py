"""Prompt formats, one per paper: the system prompt (action space + output format) and how an observation
becomes user text. The action spaces themselves find the action in a response (`<answer>`, a ``` fence,
`<tool_call>` blocks), so a format only adds what the context strategies keep: `<conclusion>` (BrowserAgent)
and `<memory>` (WebGym)."""

from __future__ import annotations

import dataclasses
import re

from jaxwebrl.browser.actions import get_action_space
from jaxwebrl.browser.observation import Observation

_TAG = {name: re.compile(rf"<{name}>(.*?)</{name}>", re.S) for name in ("conclusion", "memory", "think")}


@dataclasses.dataclass(frozen=True)
class PromptFormat:
    """How one paper asks for a response, and which action space reads it."""

    name: str
    action_space: str
    output_instructions: str
    thinking: bool = True
    system: str = ""  # replaces the generated system prompt when set (AgentConfig.system_prompt)

    def system_prompt(self) -> str:
        if self.system:
            return self.system
        space = get_action_space(self.action_space)
        return (
            "You are a web agent. You see a web page and a task, and you act on the page one step at a time.\n"
            f"Available actions:\n{space.description}\n\n{self.output_instructions}"
        )

    def format_ok(self, response: str) -> bool:
        """The format gate (OpenWebRL): a thinking block, when asked for, must be closed."""
        return not self.thinking or ("</think>" in response and response.count("<think>") <= 1)


FORMATS: dict[str, PromptFormat] = {
    "webagent_r1": PromptFormat(
        "webagent_r1", "webagent_r1",
        "Think first, then give exactly one action: <think>your reasoning</think><answer>do(...)</answer>",
    ),
    "openwebrl": PromptFormat(
        "openwebrl", "openwebrl",
        "Think first in <think>...</think>, then call one or more tools, each as "
        '<tool_call>{"name": ..., "arguments": {...}}</tool_call>. Coordinates are 0..1000 on both axes.',
    ),
    "webgym": PromptFormat(
        "webgym", "webarena",
        "Think in <think>...</think>. Then write your updated notes of everything useful so far in "
        "<memory>...</memory> (you will see only them, the task and the current page next step), then one "
        "action in a ``` code fence.",
    ),
    # WebGym's coordinate mode: the same memory prompt, actions as Qwen3-VL computer_use calls on screenshots
    "webgym_coordinates": PromptFormat(
        "webgym_coordinates", "webgym",
        "Think in <think>...</think>. Then write your updated notes of everything useful so far in "
        "<memory>...</memory> (you will see only them, the task and the current screenshot next step), then "
        'one <tool_call>{"name": "computer_use", "arguments": {...}}</tool_call>.',
    ),
    "browseragent": PromptFormat(
        "browseragent", "webarena",
        "Think in <think>...</think>. Optionally record a fact worth keeping in <conclusion>...</conclusion>. "
        "Then write exactly one action in a ``` code fence, e.g. ```click [12]```.",
    ),
    # For small policies trained from scratch (the local run): one BrowserGym-style action, no reasoning.
    "bid": PromptFormat(
        "bid", "bid", "Answer with exactly one action and nothing else, e.g. click('12')",
        thinking=False,
    ),
}


def get_format(name: str) -> PromptFormat:
    if name not in FORMATS:
        raise ValueError(f"prompt format {name!r} is unknown; choose one of {sorted(FORMATS)}")
    return FORMATS[name]


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the last <tag>...</tag> in `text`, stripped; None when absent."""
    found = _TAG[tag].findall(text)
    return found[-1].strip() if found else None


def observation_text(obs: Observation, feedback: str | None = None) -> str:
    """The user-visible page: optional feedback from the last step, metadata line, then the page text."""
    parts = []
    if feedback:
        parts.append(f"Feedback: {feedback}")
    meta = obs.metadata
    if meta is not None:
        parts.append(f"URL: {meta.url}")
    parts.append(obs.text)
    return "\n".join(parts)


def screenshot_text(obs: Observation) -> str:
    """The text beside a screenshot (OpenWebRL): the page metadata (URL, title, tabs, viewport, page size and
    scroll, focused element), then the page text when the env also produces one."""
    parts = [obs.metadata.to_text()] if obs.metadata is not None else []
    if obs.text:
        parts.append(obs.text)
    return "\n".join(parts)
