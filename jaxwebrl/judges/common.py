"""What the four judges share: one backend + call runner, input gathering, and the never-raise wrapper."""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.judges.backends import CallRunner, ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeCall, JudgeInput, TaskSpecLookup, Verdict, judge_error


def clip(text: str, max_chars: int) -> str:
    """Keep the head of a long observation (the prompt must fit the judge's context); say that it was cut."""
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[... {len(text) - max_chars} characters cut]"


def history_text(inp: JudgeInput, max_chars: int = 1000) -> str:
    """The action history with the environment's feedback after each step (OpenWebRL A.4)."""
    lines = []
    for i, step in enumerate(inp.steps):
        lines.append(f"Step {i + 1}: {clip(step.action, max_chars) or '(no action)'}")
        if step.feedback:
            lines.append(f"Feedback: {clip(step.feedback, max_chars)}")
    return "\n".join(lines) or "(no steps)"


class ModelJudge(abc.ABC):
    """Base of the model judges: `judge()` gathers the input, runs `_judge`, and turns any surprise into a
    judge_error verdict (a judge must never raise into the rollout loop)."""

    name = "judge"

    def __init__(self, backend: JudgeBackend | None, options: JudgeOptions | None = None, *,
                 action_space: str | None = None, task_specs: TaskSpecLookup | None = None,
                 name: str | None = None) -> None:
        self.backend = backend
        self.options = options or JudgeOptions()
        self.runner = CallRunner(backend, self.options) if backend is not None else None
        self.action_space = action_space
        self.task_specs = task_specs
        if name:
            self.name = name

    def inputs(self, trajectory: Trajectory) -> JudgeInput:
        spec = self.task_specs(trajectory.task_id) if self.task_specs is not None else None
        return JudgeInput.from_trajectory(trajectory, action_space=self.action_space, task_spec=spec)

    async def judge(self, trajectory: Trajectory) -> Verdict:
        start = time.perf_counter()
        try:
            verdict = await self._judge(self.inputs(trajectory))
        except Exception as exc:  # noqa: BLE001 - bad input or a bug: recorded, never raised into the run
            verdict = judge_error("bad_input", f"{type(exc).__name__}: {exc}")
        return dataclasses.replace(verdict, judge=self.name, latency_s=time.perf_counter() - start)

    @abc.abstractmethod
    async def _judge(self, inp: JudgeInput) -> Verdict:
        """The paper's rule on one gathered input."""

    async def _call(self, purpose: str, messages: Sequence[ChatMessage]) -> JudgeCall:
        if self.runner is None:
            raise ValueError(f"judge {self.name!r} has no model backend; give it one (engine, url)")
        return await self.runner.call(purpose, messages)

    async def close(self) -> None:
        if self.backend is not None:
            await self.backend.close()


def failed(call: JudgeCall, calls: Sequence[JudgeCall] = ()) -> Verdict:
    """judge_error from a call that failed (or whose text did not parse: pass error_kind on the call)."""
    return judge_error(call.error_kind or "unparsable", call.error_detail or f"no verdict in {call.text[:200]!r}",
                       calls=tuple(calls) or (call,), text=call.text, token_ids=call.token_ids)


def unparsable(call: JudgeCall, what: str) -> JudgeCall:
    dropped = f" ({call.dropped_ids} sampled ids outside the tokenizer dropped)" if call.dropped_ids else ""
    return dataclasses.replace(call, error_kind="unparsable",
                               error_detail=f"no {what} in the judge's answer {call.text[:200]!r}{dropped}")


def extra_of(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}
