"""A scripted policy for the recipe mechanism tests: predictable episodes through the real Engine protocol.

The paper mechanisms fire on particular episode mixes (a group whose rewards are all equal, an episode
aborted for format errors, a correct rollout longer than another, a step that changes nothing). A
barely trained policy produces those only by chance, so these tests play a scripted policy instead: every
new episode (a new `session_id`) takes the next role of a fixed cycle, and each turn it writes that role's
reply in the recipe's own prompt format and action grammar. Everything else is real: Chromium and
MiniWoB++, the collector, the recipe's rewards and filters, the Flax trainer (logprobs recomputed by it).

Roles:
- `solve`: click the first button of the page (MiniWoB++ click-test: "Click Me!"), then stop;
- `slow_solve`: one scroll that changes nothing, then as `solve` (a longer correct rollout);
- `idle`: scroll until the horizon ends the episode (reward 0);
- `garbage`: text that is no action until the format-error limit aborts the episode.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from jaxwebrl.demos.collect import answer_text
from jaxwebrl.engines.base import Generation, SamplingParams

CLICK = {"webarena": "click [{id}]", "webagent_r1": 'do(action="Click", element="{id}")', "bid": "click('{id}')"}
IDLE = {"webarena": "scroll [down]", "webagent_r1": 'do(action="Scroll Down")', "bid": "scroll(0, 100)",
        "openwebrl": "<tool_call>" + json.dumps({"name": "scroll", "arguments": {"direction": "down", "amount": 50}})
                     + "</tool_call>"}
ROLES = ("solve", "slow_solve", "idle", "garbage")


class ScriptedPolicy:
    """Engine protocol (generate / update_weights / health / close) over a tokenizer; see the module doc."""

    name = "scripted"

    def __init__(self, tokenizer: Any, action_space: str, prompt_format: str, roles: Sequence[str]):
        for role in roles:
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; use {ROLES}")
        self.tokenizer, self.space, self.format = tokenizer, action_space, prompt_format
        self.roles = tuple(roles)
        self.sessions: dict[str, tuple[str, int]] = {}  # session -> (role, turns answered)
        self.prompts: dict[str, list[str]] = {}  # session -> decoded prompts, in order
        self.version = 0
        self.updates = 0

    def role_of(self, session: str) -> str:
        return self.sessions[session][0]

    def _reply(self, role: str, turn: int, prompt: str) -> str:
        if role == "garbage":
            return "I do not know which action to take here."
        scroll = role == "idle" or (role == "slow_solve" and turn == 0)
        if scroll:
            action = IDLE[self.space]
        else:
            found = re.findall(r"\[([A-Za-z0-9_-]+)\] button", prompt)
            if not found:
                raise AssertionError(f"scripted policy: no button in the page it was shown:\n{prompt[-1500:]}")
            action = CLICK[self.space].format(id=found[-1])  # the current page is the last one in the prompt
        return answer_text(action, self.format, memory=f"note-{turn}", conclusion=f"seen-{turn}")

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        session = session_id or f"anonymous-{len(self.sessions)}"
        if session not in self.sessions:
            self.sessions[session] = (self.roles[len(self.sessions) % len(self.roles)], 0)
        role, turn = self.sessions[session]
        prompt = self.tokenizer.decode(list(prompt_ids))
        self.prompts.setdefault(session, []).append(prompt)
        self.sessions[session] = (role, turn + 1)
        ids = self.tokenizer.encode(self._reply(role, turn, prompt), add_special_tokens=False)
        ids = ids + [self.tokenizer.eos_token_id]
        return Generation(ids, [0.0] * len(ids), "stop", len(prompt_ids), self.version, self.version, engine=self.name)

    async def update_weights(self, weights: Any, version: int) -> None:
        self.version, self.updates = version, self.updates + 1

    async def health(self) -> dict[str, Any]:
        return {"ok": True}

    async def close(self) -> None:
        return None
