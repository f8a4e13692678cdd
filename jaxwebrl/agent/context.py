"""Context strategies: what the model sees at each turn, one function per paper.

- `compress_past` (WebAgent-R1): one growing conversation; every past observation becomes the placeholder
  "** Simplified html **", every past response stays (verbatim ids). Append-only in the compressed form, so
  the final turn's context is the trajectory-level training sequence.
- `last_k_screenshots` (OpenWebRL): all responses and feedback strings kept; only the last K observations
  are shown in full: with a vision-language model, each as its screenshot plus the page metadata (URL, title,
  tabs, viewport and scroll, focused element; the feedback of the step before); older ones become
  "[earlier page state omitted]" beside their feedback. With a text model the page text stands in.
- `memory` (WebGym): input = task + the memory the model wrote last step + the current observation.
- `current_plus_history` (BrowserAgent, NNetNav): task + current observation + all previous actions + all
  `<conclusion>`s.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxwebrl.agent.prompts import PromptFormat, observation_text, screenshot_text
from jaxwebrl.agent.render import Message
from jaxwebrl.browser.observation import Observation

COMPRESSED = "** Simplified html **"
OMITTED_SCREENSHOT = "[earlier page state omitted]"


@dataclasses.dataclass
class StepRecord:
    """One turn as the context strategies need it."""

    observation: Observation
    feedback: str | None  # the environment's message about the previous action, shown with this observation
    response_text: str = ""
    response_ids: tuple[int, ...] = ()
    action: str = ""
    conclusion: str | None = None
    memory: str | None = None


@dataclasses.dataclass(frozen=True)
class ContextInputs:
    fmt: PromptFormat
    goal: str
    past: list[StepRecord]  # turns already answered
    current: StepRecord  # the turn to answer now
    last_k: int = 1
    images: bool = False  # the policy sees images (a vision-language model): screenshots go in as images


def _page(inp: ContextInputs, obs: Observation) -> tuple[str, tuple[bytes, ...]]:
    """A page in full: its screenshot as an image plus metadata text when the policy sees images and the
    observation has one, else the page text."""
    if inp.images and obs.screenshot:
        return screenshot_text(obs), (obs.screenshot,)
    return observation_text(obs), ()


def _conversation(inp: ContextInputs, keep_full: Callable[[int], bool], placeholder: str) -> list[Message]:
    msgs = [Message("system", inp.fmt.system_prompt())]
    turns = inp.past + [inp.current]
    for i, step in enumerate(turns):
        page, images = _page(inp, step.observation) if keep_full(i) else (placeholder, ())
        if step.feedback:
            page = f"Feedback: {step.feedback}\n{page}"
        text = f"Task: {inp.goal}\n{page}" if i == 0 else page
        msgs.append(Message("user", text, images=images))
        if i < len(inp.past):
            msgs.append(Message("assistant", step.response_text, step.response_ids))
    return msgs


def compress_past(inp: ContextInputs) -> list[Message]:
    last = len(inp.past)
    return _conversation(inp, lambda i: i == last, COMPRESSED)


def last_k_screenshots(inp: ContextInputs) -> list[Message]:
    last = len(inp.past)
    return _conversation(inp, lambda i: i > last - inp.last_k, OMITTED_SCREENSHOT)


def _current(inp: ContextInputs) -> tuple[str, tuple[bytes, ...]]:
    page, images = _page(inp, inp.current.observation)
    return (f"Feedback: {inp.current.feedback}\n{page}" if inp.current.feedback else page), images


def memory(inp: ContextInputs) -> list[Message]:
    notes = next((s.memory for s in reversed(inp.past) if s.memory), None) or "(empty)"
    page, images = _current(inp)
    text = f"Task: {inp.goal}\nMemory: {notes}\n{page}"
    return [Message("system", inp.fmt.system_prompt()), Message("user", text, images=images)]


def current_plus_history(inp: ContextInputs) -> list[Message]:
    actions = "\n".join(f"{i + 1}. {s.action}" for i, s in enumerate(inp.past)) or "(none)"
    conclusions = "\n".join(s.conclusion for s in inp.past if s.conclusion) or "(none)"
    page, images = _current(inp)
    text = (
        f"Task: {inp.goal}\nPrevious actions:\n{actions}\nConclusions so far:\n{conclusions}\n"
        f"Current page:\n{page}"
    )
    return [Message("system", inp.fmt.system_prompt()), Message("user", text, images=images)]


STRATEGIES: dict[str, Callable[[ContextInputs], list[Message]]] = {
    "compress_past": compress_past,
    "last_k_screenshots": last_k_screenshots,
    "memory": memory,
    "current_plus_history": current_plus_history,
}
# Strategies whose contexts grow by appending: their last prompt is the trajectory-level sequence.
APPEND_ONLY = {"compress_past"}


def get_strategy(name: str) -> Callable[[ContextInputs], list[Message]]:
    if name not in STRATEGIES:
        raise ValueError(f"context strategy {name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]
