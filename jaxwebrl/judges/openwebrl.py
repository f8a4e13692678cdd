"""OpenWebRL's trajectory judge and reward (paper §4.3 and Appendix A.4; judge inputs as in Appendix F.2).

Rule, in order:
1. The episode ended on repeated format errors (termination `format_errors`): reward -1, no judge call.
2. The episode did not end with `done(answer)` (max steps, context overflow, env error, ...), or the terminal
   done call has no answer: judge score 0, reward 0, no judge call ("skipped").
3. Otherwise the judge reads the instruction, the final answer, the last 3 screenshots (page text until
   screenshots are recorded) and the action history with the environment's feedback, and answers SUCCESS or
   NOT SUCCESS; the parser checks NOT SUCCESS first. No verdict, a timeout or a dead judge: judge_error.
4. Reward = judge score x format gate: +1 only if judged SUCCESS *and* every turn passed the per-turn format
   gate (closed thinking block + a parsable tool call, `Turn.format_ok`); else 0.
"""

from __future__ import annotations

from typing import Any

from jaxwebrl.judges.backends import ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeInput, TaskSpecLookup, Verdict
from jaxwebrl.judges.common import ModelJudge, clip, failed, history_text, unparsable
from jaxwebrl.judges.parsing import parse_success

SYSTEM_PROMPT = (
    "You are an expert evaluator of web-browsing agents. An agent was given a task to complete in a web browser "
    "and ended its episode by calling done(answer). Decide whether the agent successfully completed the task.\n"
    "You are given: the task instruction; the agent's final answer; the most recent screenshots of the browser "
    "(as page text when no image is available); and the history of the agent's tool calls, each followed by "
    "the environment's feedback on what the call did.\n"
    "The task counts as successful only if every requirement of the instruction is met, and any information in "
    "the final answer is supported by what the pages show. Missing steps, wrong items, unverified claims or an "
    "answer that does not address the instruction mean it was not successful.\n"
    "Explain your reasoning briefly, then end with exactly one line: \"Verdict: SUCCESS\" or "
    "\"Verdict: NOT SUCCESS\"."
)


class OpenWebRLJudge(ModelJudge):
    """See the module doc. `num_observations` = 3 (the paper's judge screenshots per trajectory)."""

    name = "openwebrl"

    def __init__(self, backend: JudgeBackend, options: JudgeOptions | None = None, *, action_space: str = "openwebrl",
                 num_observations: int = 3, max_observation_chars: int = 4000, system_prompt: str | None = None,
                 task_specs: TaskSpecLookup | None = None, name: str | None = None) -> None:
        super().__init__(backend, options, action_space=action_space, task_specs=task_specs, name=name)
        if num_observations < 1:
            raise ValueError(f"num_observations={num_observations}: the judge needs at least the last observation")
        self.num_observations = num_observations
        self.max_observation_chars = max_observation_chars
        self.system_prompt = system_prompt or SYSTEM_PROMPT

    def messages(self, inp: JudgeInput) -> list[ChatMessage]:
        """The judge prompt for one episode (also what the golden tests render)."""
        pages: list[tuple[str, str, bytes | None]] = [
            (f"after step {i}" if i else "at the start", s.observation, s.screenshot) for i, s in enumerate(inp.steps)
        ]
        if inp.final_observation:
            pages.append(("at the end", inp.final_observation, None))
        recent = pages[-self.num_observations:]
        shown = "\n\n".join(f"[Page {label}]\n{clip(text, self.max_observation_chars)}" for label, text, _ in recent)
        user = (
            f"Task instruction: {inp.instruction}\n\n"
            f"Final answer: {inp.answer}\n\n"
            f"Action history:\n{history_text(inp)}\n\n"
            f"Last {len(recent)} screenshot(s):\n{shown}"
        )
        images = tuple(png for _, _, png in recent if png)
        return [ChatMessage("system", self.system_prompt), ChatMessage("user", user, images)]

    async def _judge(self, inp: JudgeInput) -> Verdict:
        gate = all(s.format_ok for s in inp.steps)
        extra: dict[str, Any] = {"format_gate": gate, "termination": inp.termination}
        if inp.termination == "format_errors":
            return Verdict("format_error", 0.0, -1.0, extra=extra)
        if not inp.ended_with_answer:
            return Verdict("skipped", 0.0, 0.0, extra=extra)
        call = await self._call("verdict", self.messages(inp))
        if call.error_kind is not None:
            return failed(call)
        success = parse_success(call.text)
        if success is None:
            return failed(unparsable(call, "SUCCESS / NOT SUCCESS verdict"))
        reward = 1.0 if success and gate else 0.0
        label = "success" if reward > 0 else "failure"
        return Verdict(label, float(success), reward, text=call.text, token_ids=call.token_ids, calls=(call,),
                       extra=extra)
