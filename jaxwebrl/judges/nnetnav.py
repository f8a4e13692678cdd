"""NNetNav's judges (paper §2 and Appendix, Listings 3-5), all one model with different prompts:

- state-change summariser Delta(o_t, a_t, o_t+1) -> "State change: ..." (Listing 3);
- trajectory labeler: summaries -> "Instruction: ..." (Listing 4), a plausible instruction for the trajectory;
- outcome reward model (ORM): instruction + summaries -> "Reward: n", n in 1..5 (Listing 5); pass = n >= 4
  (the prompt's own scale: 4 = very minor errors or > 70 % done, 3 or below = little progress; §2 calls the
  ORM's output binary, and thresholding at 4 is its natural reading).

Summaries come from `trajectory.metadata['state_changes']` when the explorer recorded them (one per turn);
otherwise the judge makes them, one summariser call per turn. The final page o_T+1 is
`metadata['final_observation']` when recorded.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jaxwebrl.judges.backends import ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeCall, JudgeInput, TaskSpecLookup, Verdict
from jaxwebrl.judges.common import ModelJudge, clip, failed, unparsable
from jaxwebrl.judges.parsing import parse_field, parse_reward

SUMMARY_PROMPT = (
    "You are given the output of an action taken by an autonomous intelligent agent navigating a web interface "
    "to fulfill a task given by a user. Your objective is to produce a description of the changes made to the "
    "state of the browser.\n"
    "Here is the information you will have:\n"
    "Initial state of the browser: the page before the action.\n"
    "Final state of the browser: the page after the agent took the action.\n"
    "The action taken by the agent: the action that changed the state of the browser.\n"
    "The actions the agent can take come from the following categories: {actions}\n"
    "To be successful, it is very important to follow these rules:\n"
    "1. Explicitly think about the various features on the website and how the interaction with the website "
    "changed these features.\n"
    "2. Provide the description of changes in one or two sentences.\n"
    "3. Strictly follow the format \"State change: <your-answer>\" for your output."
)
LABEL_PROMPT = (
    "Given a task from a user, an autonomous intelligent agent carries out a sequence of actions on a web "
    "interface.\n"
    "The actions the agent can take fall under the following categories: {actions}\n"
    "Your objective is to guess the instruction the user gave, given the following information:\n"
    "Trajectory: a sequence of natural language descriptions of the agent's interaction with the web browser.\n"
    "To be successful, it is very important to follow these rules:\n"
    "1. Explicitly think about how the trajectory is a valid way to achieve the instruction, before outputting "
    "the instruction.\n"
    "2. Start by thinking, writing Thought: <your-reasoning>.\n"
    "3. End your answer by strictly following the format \"Instruction: <your-answer>\" for your output."
)
ORM_PROMPT = (
    "An autonomous intelligent agent navigating a web browser is given an instruction by a user. Your objective "
    "is to give a score to the agent based on how well it completed its task. Your score must be on the scale of "
    "1 to 5. Give a score of 5 only when there are no errors. To do this task you are provided with the "
    "following information:\n"
    "Instruction: the natural language instruction given to the agent.\n"
    "Trajectory: a sequence of natural language descriptions of the agent's interaction with the web browser.\n"
    "To be successful, it is very important to follow these rules:\n"
    "1. Explicitly think about what is needed to follow the instruction correctly on the website and whether "
    "the trajectory reflects these steps.\n"
    "2. Give a score of 4 if there are very minor errors, or if the task was more than 70% completed. Give a "
    "score of 3 (or below) if the model made very little progress towards the given instruction or if there "
    "are major errors.\n"
    "3. Start by thinking, writing Thought: <your-reasoning>.\n"
    "4. End your answer by strictly following the format \"Reward: <your-answer>\" for your output."
)


def _actions_text(action_space: str | None) -> str:
    if not action_space:
        return "click, type, hover, press, scroll, new_tab, tab_focus, close_tab, goto, go_back, go_forward, stop"
    from jaxwebrl.browser.actions import get_action_space

    return get_action_space(action_space).description


def trajectory_text(summaries: tuple[str, ...] | list[str]) -> str:
    return "\n".join(f"{i + 1}. {s}" for i, s in enumerate(summaries)) or "(no actions)"


class _NNetNavModel(ModelJudge):
    """The shared summariser: every NNetNav judge reads state-change summaries."""

    def __init__(self, backend: JudgeBackend, options: JudgeOptions | None = None, *, action_space: str | None = "bid",
                 max_observation_chars: int = 3000, task_specs: TaskSpecLookup | None = None,
                 name: str | None = None) -> None:
        super().__init__(backend, options, action_space=action_space, task_specs=task_specs, name=name)
        self.max_observation_chars = max_observation_chars

    def summary_messages(self, before: str, action: str, after: str) -> list[ChatMessage]:
        user = (f"Initial state of the browser:\n{clip(before, self.max_observation_chars)}\n\n"
                f"Final state of the browser:\n{clip(after, self.max_observation_chars)}\n\n"
                f"The action taken by the agent: {action}")
        return [ChatMessage("system", SUMMARY_PROMPT.format(actions=_actions_text(self.action_space))),
                ChatMessage("user", user)]

    async def summaries(self, inp: JudgeInput) -> tuple[list[str] | None, list[JudgeCall]]:
        """The recorded summaries, else one summariser call per turn; None (with the failing call) on failure."""
        if inp.state_changes is not None and len(inp.state_changes) == len(inp.steps):
            return list(inp.state_changes), []
        pages = [s.observation for s in inp.steps] + [inp.final_observation]
        jobs = [self.summary_messages(pages[i], s.action, pages[i + 1]) for i, s in enumerate(inp.steps)]
        calls = list(await asyncio.gather(*(self._call(f"summary[{i}]", m) for i, m in enumerate(jobs))))
        out: list[str] = []
        for i, call in enumerate(calls):
            text = parse_field(call.text, "State change") if call.error_kind is None else None
            if text is None:
                if call.error_kind is None:
                    calls[i] = unparsable(call, '"State change:" line')
                return None, calls
            out.append(text)
        return out, calls


class NNetNavORM(_NNetNavModel):
    """Outcome reward model: Reward 1..5 on (instruction, summaries); reward 1 when the score >= `pass_score`."""

    name = "nnetnav_orm"

    def __init__(self, backend: JudgeBackend, options: JudgeOptions | None = None, *, pass_score: int = 4,
                 **kwargs: Any) -> None:
        super().__init__(backend, options, **kwargs)
        if not 1 <= pass_score <= 5:
            raise ValueError(f"pass_score={pass_score}: the ORM scores 1..5")
        self.pass_score = pass_score

    def messages(self, instruction: str, summaries: list[str] | tuple[str, ...]) -> list[ChatMessage]:
        return [ChatMessage("system", ORM_PROMPT),
                ChatMessage("user", f"Instruction: {instruction}\n\nTrajectory:\n{trajectory_text(summaries)}")]

    async def _judge(self, inp: JudgeInput) -> Verdict:
        summaries, pre = await self.summaries(inp)
        if summaries is None:
            return failed(next((c for c in pre if c.error_kind), pre[-1]), pre)
        call = await self._call("reward", self.messages(inp.instruction, summaries))
        calls = (*pre, call)
        if call.error_kind is not None:
            return failed(call, calls)
        score = parse_reward(call.text)
        if score is None:
            return failed(unparsable(call, '"Reward: <1..5>" line'), calls)
        passed = score >= self.pass_score
        return Verdict("success" if passed else "failure", float(score), float(passed), text=call.text,
                       token_ids=call.token_ids, calls=calls, extra={"summaries": summaries})


class TrajectoryLabeler(_NNetNavModel):
    """Hindsight labeler: summaries -> the instruction (in `Verdict.output`, label 'labeled', reward 0)."""

    name = "nnetnav_labeler"

    def messages(self, summaries: list[str] | tuple[str, ...]) -> list[ChatMessage]:
        return [ChatMessage("system", LABEL_PROMPT.format(actions=_actions_text(self.action_space))),
                ChatMessage("user", f"Trajectory:\n{trajectory_text(summaries)}")]

    async def _judge(self, inp: JudgeInput) -> Verdict:
        summaries, pre = await self.summaries(inp)
        if summaries is None:
            return failed(next((c for c in pre if c.error_kind), pre[-1]), pre)
        call = await self._call("label", self.messages(summaries))
        calls = (*pre, call)
        if call.error_kind is not None:
            return failed(call, calls)
        instruction = parse_field(call.text, "Instruction")
        if instruction is None:
            return failed(unparsable(call, '"Instruction:" line'), calls)
        return Verdict("labeled", 1.0, 0.0, text=call.text, token_ids=call.token_ids, output=instruction, calls=calls,
                       extra={"summaries": summaries})


class StateChangeSummarizer(_NNetNavModel):
    """Delta(o_t, a_t, o_t+1) for every turn; the summaries are in `Verdict.extra['summaries']`."""

    name = "nnetnav_summarizer"

    async def _judge(self, inp: JudgeInput) -> Verdict:
        summaries, calls = await self.summaries(inp)
        if summaries is None:
            return failed(next((c for c in calls if c.error_kind), calls[-1]), calls)
        last = calls[-1] if calls else None
        return Verdict("labeled", 1.0, 0.0, text=last.text if last else "", token_ids=last.token_ids if last else (),
                       output="\n".join(summaries), calls=tuple(calls), extra={"summaries": summaries})
