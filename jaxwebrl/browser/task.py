"""The Task protocol the environment runs. Task suites (`envs/`) implement it; the browser layer never
imports them.

A task says which origins it may reach, sets up its start state in a fresh session and returns the goal
text, can report that the page itself ended the episode (MiniWoB++), and evaluates the end state.

A task may also set `reuse_context = True` when its start state is a fresh page load that no cookie or
storage can change (MiniWoB++): the pool then reuses a finished episode's context for its next reset instead
of opening a new one. Tasks without it (local sites with logins and carts) always get a fresh context.

A task without a rule evaluator (an open-web task) sets `has_rule_evaluator = False`; its `evaluate` then
scores nothing and a run with `reward.source = 'rule_or_judge'` has a model judge score its episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jaxwebrl.browser.session import BrowserSession


@dataclass
class EvalResult:
    """`reward` is the raw task reward; `success` the thresholded verdict used for training and metrics."""

    reward: float
    success: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    task_id: str

    def allowed_origins(self) -> tuple[str, ...]:
        """Origins the episode's context may load (everything else is aborted)."""
        ...

    async def setup(self, session: BrowserSession, seed: int) -> str:
        """Bring the session to the start state for `seed` and return the goal utterance."""
        ...

    async def is_done(self, session: BrowserSession) -> bool:
        """True when the page itself ended the episode (e.g. MiniWoB++ submit)."""
        ...

    async def evaluate(self, session: BrowserSession, answer: str | None) -> EvalResult:
        """Score the end state and the agent's answer."""
        ...
