"""Shared pieces of every action space: the parsed `Action`, `ParseError`, `ExecResult`, the
`ActionSpace` record, and the safe text helpers (code-fence / tag extraction, literal-only call parsing).

Contract: `parse(text)` never raises; it returns a non-empty list of actions (several only for spaces that
allow multi-call responses) or a `ParseError`. `execute(session, action)` never raises either; an invalid
action (unknown element id, bad tab index) returns `ExecResult(invalid=True)` whose feedback says what was
wrong, which the environment counts as a format error.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from jaxwebrl.browser.actions import scan
from jaxwebrl.browser.session import AgentTimeout, InvalidAction

MAX_ACTION_CHARS = 20_000
MAX_CALLS = 64  # statements `parse_calls` reads from one response (each costs an ast walk)


@dataclass(frozen=True)
class Action:
    """One parsed call: `name` plus keyword `args`; `raw` is the text it came from."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    raw: str = ""


@dataclass(frozen=True)
class ParseError:
    """Why the text is not an action; `message` is shown to the agent as feedback."""

    message: str
    raw: str = ""


@dataclass
class ExecResult:
    """Outcome of executing one action. `done`/`answer` end the episode (stop/exit/done/send_msg_to_user)."""

    feedback: str
    invalid: bool = False
    failed: bool = False
    done: bool = False
    answer: str | None = None
    timeout: bool = False  # an action timeout (Playwright's auto-wait) fired: counted in the episode's record


ParseResult = list[Action] | ParseError


def never_raises(parse: Callable[[str], ParseResult], what: str = "the action") -> Callable[[str], ParseResult]:
    """Wrap a parser so any exception (regexes on hostile input) becomes a ParseError: the contract above."""

    def safe(text: str) -> ParseResult:
        try:
            return parse(text)
        except Exception as exc:
            return ParseError(f"could not parse {what} ({type(exc).__name__})", str(text)[:200])

    safe.__doc__ = f"Text -> actions or ParseError ({parse.__module__}); never raises."
    return safe


@dataclass(frozen=True)
class ActionSpace:
    """A named grammar: `parse` text into actions and `execute` one action on a BrowserSession."""

    name: str
    parse: Callable[[str], ParseResult]
    execute: Callable[[Any, Action], Awaitable[ExecResult]]
    description: str
    multi_call: bool = False


def strip_think(text: str) -> str:
    """Drop `<think>...</think>` reasoning so that actions quoted inside it are not picked up (one linear
    pass; an unclosed `<think>` is kept)."""
    return scan.remove_pairs(text, "<think>", "</think>", " ")


def last_fenced(text: str) -> str | None:
    """Content of the last ``` fenced block, language tag (letters then a newline) removed; None when there
    is none."""
    inner = scan.last_inner(text, "```", "```")
    if inner is None:
        return None
    i = 0
    while i < len(inner) and inner[i] in _LANG_CHARS:
        i += 1
    scan.METER.add(i + 1)
    if i < len(inner) and inner[i] == "\n":
        inner = inner[i + 1:]
    return inner.strip()


_LANG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def tag_content(text: str, tag: str) -> str | None:
    """Inner text of the last `<tag>...</tag>`, stripped; None when there is none."""
    inner = scan.last_inner(text, f"<{tag}>", f"</{tag}>")
    return None if inner is None else inner.strip()


_QUOTES = {"\u2018\u2018": '"', "\u2019\u2019": '"', "\u201c": '"', "\u201d": '"', "``": '"', "''": '"'}


def normalise_quotes(text: str) -> str:
    """Papers print `do(action=‘‘Click’’)`; models copy that. Map typographic quotes to ASCII."""
    for src, dst in _QUOTES.items():
        text = text.replace(src, dst)
    return text.replace("\u2018", "'").replace("\u2019", "'")


def parse_calls(code: str) -> list[tuple[str, list[Any], dict[str, Any]]] | str:
    """Parse `f(a, k=b)` statements whose arguments are literals only. Returns calls or an error string.

    Uses `ast` (no evaluation), so hostile text cannot run code; every failure becomes a message.
    """
    if len(code) > MAX_ACTION_CHARS:
        return f"action text longer than {MAX_ACTION_CHARS} characters"
    scan.METER.add(len(code))  # ast.parse and literal_eval are linear in the (bounded) code
    if code.count("\n") + code.count(";") >= MAX_CALLS:
        return f"more than {MAX_CALLS} statements; write one call per line, at most {MAX_CALLS}"
    try:
        tree = ast.parse(code.strip(), mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"could not parse {code.strip()[:80]!r} as a function call ({type(exc).__name__})"
    calls: list[tuple[str, list[Any], dict[str, Any]]] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
            return "expected a function call such as click('12')"
        call = stmt.value
        if not isinstance(call.func, ast.Name):
            return "the called function must be a plain name"
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kwargs = {}
            for kw in call.keywords:
                if kw.arg is None:
                    return "**kwargs are not allowed"
                kwargs[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return f"arguments of {call.func.id}() must be literals (strings or numbers)"
        calls.append((call.func.id, args, kwargs))
    if not calls:
        return "no action found"
    return calls


async def run_safely(coro: Awaitable[ExecResult], what: str) -> ExecResult:
    """Turn any exception from Playwright into a `Failed:` feedback; InvalidAction into an invalid result."""
    try:
        return await coro
    except AgentTimeout:
        raise  # ends the episode (the env books it as agent_timeout)
    except InvalidAction as exc:
        return ExecResult(feedback=f"Invalid action: {exc}.", invalid=True)
    except PermissionError as exc:
        return ExecResult(feedback=f"Failed: '{what}' refused: {exc}.", failed=True)
    except Exception as exc:  # Playwright errors, timeouts: data, not crashes
        msg = str(exc).strip().split("\n")[0][:300]
        if is_closed_error(exc):
            raise
        return ExecResult(feedback=f"Failed: '{what}' execution failed: {msg}", failed=True,
                          timeout=type(exc).__name__ == "TimeoutError")


def is_closed_error(exc: Exception) -> bool:
    """Errors that mean the browser/context is gone; these propagate so the env reports env_error."""
    name = type(exc).__name__
    text = str(exc)
    return name == "TargetClosedError" or "Browser has been closed" in text or "Connection closed" in text or (
        "Target page, context or browser has been closed" in text
    )


def is_number(value: Any, lo: float, hi: float) -> bool:
    """A real, finite number in [lo, hi] (bools, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (isinstance(value, int) or math.isfinite(value)) and lo <= value <= hi
