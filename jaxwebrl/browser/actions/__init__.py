"""Action spaces, chosen by name: `get_action_space("webarena" | "webagent_r1" | "openwebrl" | "webgym" | "bid")`.

Each space is an `ActionSpace(name, parse, execute, description, multi_call)`:
- `parse(text) -> list[Action] | ParseError` never raises;
- `await execute(session, action) -> ExecResult(feedback, invalid, failed, done, answer)` never raises for
  bad input (only for a dead browser, which the environment turns into `env_error`).
"""

from __future__ import annotations

from jaxwebrl.browser.actions import bid, openwebrl, webagent_r1, webarena, webgym
from jaxwebrl.browser.actions.base import Action, ActionSpace, ExecResult, ParseError

ACTION_SPACES: dict[str, ActionSpace] = {
    s.name: s for s in (webarena.SPACE, webagent_r1.SPACE, openwebrl.SPACE, webgym.SPACE, bid.SPACE)
}


def get_action_space(name: str) -> ActionSpace:
    try:
        return ACTION_SPACES[name]
    except KeyError:
        raise ValueError(f"unknown action space {name!r}; choose one of {sorted(ACTION_SPACES)}") from None


__all__ = ["ACTION_SPACES", "Action", "ActionSpace", "ExecResult", "ParseError", "get_action_space"]
