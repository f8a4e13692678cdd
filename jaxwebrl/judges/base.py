"""The Judge protocol, its `Verdict`, and `JudgeInput`: what a judge reads from a finished episode.

A judge is `async judge(trajectory) -> Verdict` and never raises for a judge failure: a timeout, a dead judge
server or an unparsable answer is a Verdict with `error = "judge_error"` (OpenWebRL A.4: such samples get loss
mask 0), so one bad judge call never stops a run.

Observations are text today; `JudgeStep.screenshot` is the seam for images (PNG bytes): a chat backend sends
them as image parts, a text-only in-process judge reports judge_error naming the missing vision processor.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, Mapping, Protocol, Sequence, runtime_checkable

from jaxwebrl.data.records import Trajectory

JUDGE_ERROR = "judge_error"  # the termination reason (and Verdict.error) for a failed judgment
# success / failure: judged; skipped: a rule decided without calling the judge (no done(answer));
# format_error: OpenWebRL's repeated-format-error rule; labeled: the NNetNav labeler wrote an instruction.
Label = Literal["success", "failure", "skipped", "format_error", "labeled", "judge_error"]
ErrorKind = Literal["timeout", "unavailable", "unparsable", "bad_input", "engine_error"]
FINAL_ACTIONS = {"done": "answer", "stop": "answer", "exit": "message", "send_msg_to_user": "text"}


@dataclasses.dataclass(frozen=True)
class JudgeCall:
    """One model call a judgment made: the prompt ids (token backends), the raw text and ids it returned."""

    purpose: str  # "verdict", "criterion_a[2]", "vote[1]", "summary[3]", ...
    text: str = ""
    token_ids: tuple[int, ...] = ()
    prompt_ids: tuple[int, ...] = ()
    latency_s: float = 0.0
    attempts: int = 0
    error_kind: ErrorKind | None = None
    error_detail: str = ""
    dropped_ids: int = 0  # sampled ids the tokenizer has no text for (kept in token_ids, not in text)
    timeouts: int = 0  # attempts that ran past the judge's timeout (retried or not): counted in the run's records


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A judgment of one episode.

    `reward` is the paper's reward for the episode (OpenWebRL: +1 / 0 / -1, the others 1 / 0); `score` is the
    judge's raw score (1 / 0 for SUCCESS / NOT SUCCESS, NNetNav's 1..5); `text` / `token_ids` are the judge's
    raw output of the deciding call (every call is in `calls`); `error` is "judge_error" or None.
    """

    label: Label
    score: float
    reward: float
    text: str = ""
    token_ids: tuple[int, ...] = ()
    latency_s: float = 0.0
    error: str | None = None
    error_kind: ErrorKind | None = None
    error_detail: str = ""
    output: str = ""  # what a generative judge produced besides a verdict (the labeler's instruction)
    calls: tuple[JudgeCall, ...] = ()
    judge: str = ""
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def called(self) -> bool:
        """True when at least one judge model call was made (rules alone decide skipped episodes)."""
        return bool(self.calls)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able record for `Trajectory.metadata['judge']` (call texts clipped to keep records small)."""
        d = dataclasses.asdict(self)
        d["calls"] = [{**c, "text": c["text"][:2000], "token_ids": list(c["token_ids"])[:2000],
                       "prompt_ids": []} for c in d["calls"]]
        d["token_ids"] = list(self.token_ids)[:2000]
        d["text"] = self.text[:2000]
        d["extra"] = dict(self.extra)
        return d


def judge_error(kind: ErrorKind, detail: str, *, judge: str = "", calls: Sequence[JudgeCall] = (),
                latency_s: float = 0.0, text: str = "", token_ids: Sequence[int] = ()) -> Verdict:
    """The Verdict for a failed judgment: reward 0, error 'judge_error' (the caller masks the episode)."""
    return Verdict("judge_error", 0.0, 0.0, text=text, token_ids=tuple(token_ids), latency_s=latency_s,
                   error=JUDGE_ERROR, error_kind=kind, error_detail=detail, calls=tuple(calls), judge=judge)


@runtime_checkable
class Judge(Protocol):
    """Scores one finished episode. Implementations never raise for judge failures (see module doc)."""

    name: str

    async def judge(self, trajectory: Trajectory) -> Verdict:
        ...


# ---- what a judge reads ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JudgeStep:
    """One turn as a judge sees it: the page before the action, the action, the environment's feedback."""

    observation: str
    action: str
    feedback: str | None = None
    screenshot: bytes | None = None
    format_ok: bool = True


@dataclasses.dataclass(frozen=True)
class JudgeInput:
    """Everything the four judges read, gathered once from a Trajectory (+ its task spec when given).

    Sources, in order: `trajectory.metadata` keys (`instruction` or `goal`, `answer`, `feedback` (one string per
    turn), `screenshots` (PNG bytes per turn), `final_observation`, `state_changes`, `rubric`,
    `reference_answers`), then the task spec (`intent`, `rubric`, `eval.reference_answers`), then the turns
    (the answer is parsed from the last response with `action_space`).
    """

    task_id: str
    instruction: str
    steps: tuple[JudgeStep, ...]
    answer: str | None
    ended_with_answer: bool
    termination: str
    final_observation: str = ""
    reference_answers: tuple[str, ...] = ()
    rubric: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (group name, facts)
    state_changes: tuple[str, ...] | None = None
    references_raw: Any = None  # the reference block as given (a WebArena dict keeps exact_match / must_include)

    @classmethod
    def from_trajectory(cls, traj: Trajectory, *, action_space: str | None = None,
                        task_spec: Mapping[str, Any] | None = None) -> "JudgeInput":
        meta = traj.metadata or {}
        spec = task_spec or {}
        instruction = str(meta.get("instruction") or meta.get("goal") or spec.get("intent") or "")
        feedback = list(meta.get("feedback") or [])
        shots = list(meta.get("screenshots") or [])
        steps = []
        for i, turn in enumerate(traj.turns):
            steps.append(JudgeStep(
                observation=turn.observation, action=_action_text(turn.action, action_space),
                feedback=feedback[i] if i < len(feedback) else None,
                screenshot=shots[i] if i < len(shots) and isinstance(shots[i], (bytes, bytearray)) else None,
                format_ok=bool(turn.format_ok),
            ))
        answer = meta.get("answer")
        if answer is None and traj.turns:
            answer = final_answer(traj.turns[-1].action, action_space)
        answer = None if answer is None or not str(answer).strip() else str(answer)
        refs = meta.get("reference_answers")
        if refs is None:
            refs = ((spec.get("eval") or {}).get("reference_answers") or {})
        rubric = meta.get("rubric") or spec.get("rubric") or ()
        changes = meta.get("state_changes")
        return cls(
            task_id=traj.task_id, instruction=instruction, steps=tuple(steps), answer=answer,
            ended_with_answer=traj.termination == "done" and answer is not None, termination=traj.termination,
            final_observation=str(meta.get("final_observation") or ""), reference_answers=reference_list(refs),
            references_raw=refs or None,
            rubric=parse_rubric(rubric), state_changes=tuple(map(str, changes)) if changes is not None else None,
        )


def _parse_actions(text: str, action_space: str | None) -> list[Any] | None:
    if not action_space:
        return None
    from jaxwebrl.browser.actions import get_action_space

    parsed = get_action_space(action_space).parse(text)
    return parsed if isinstance(parsed, list) else None


def _action_text(text: str, action_space: str | None) -> str:
    """The tool calls of a response (what the judge's action history shows), else its text after thinking."""
    actions = _parse_actions(text, action_space)
    if actions:
        return "; ".join(a.raw.strip() for a in actions)
    from jaxwebrl.browser.actions.base import strip_think

    return strip_think(text).strip()[:1000]


def final_answer(response: str, action_space: str | None) -> str | None:
    """The answer of the terminal call (done(answer) / stop [answer] / exit(message) / send_msg_to_user)."""
    actions = _parse_actions(response, action_space) or []
    for action in reversed(actions):
        key = FINAL_ACTIONS.get(action.name)
        if key is not None:
            value = action.args.get(key)
            return None if value is None else str(value)
    return None


def reference_list(refs: Any) -> tuple[str, ...]:
    """Reference answers from a list, a string, or a WebArena block (`exact_match` / `must_include`)."""
    if not refs:
        return ()
    if isinstance(refs, str):
        return (refs,)
    if isinstance(refs, Mapping):
        out = []
        if refs.get("exact_match"):
            out.append(str(refs["exact_match"]))
        out += [str(x) for x in refs.get("must_include") or []]
        return tuple(out)
    return tuple(str(r) for r in refs)


def parse_rubric(rubric: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """WebGym rubric -> ((group, facts), ...). Accepts {"groups": [{"name", "facts"}]} or a list of groups."""
    groups = rubric.get("groups", []) if isinstance(rubric, Mapping) else rubric
    out = []
    for i, g in enumerate(groups or ()):
        if isinstance(g, Mapping):
            name, facts = str(g.get("name") or f"Group {i + 1}"), g.get("facts") or ()
        else:
            name, facts = str(g[0]), g[1]
        facts = tuple(str(f) for f in facts)
        if not facts:
            raise ValueError(f"rubric group {name!r} has no facts; every WebGym fact group lists at least one")
        out.append((name, facts))
    return tuple(out)


TaskSpecLookup = Callable[[str], Mapping[str, Any] | None]
