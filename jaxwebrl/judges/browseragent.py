"""BrowserAgent's answer judge (paper §4 "Evaluation" and Appendix B.2): exact match, or an LLM-judge majority.

- Exact match (EM): the answer of the terminal `stop [answer]`, normalised (lower case, no punctuation or
  articles, single spaces), equals a normalised ground-truth answer.
- LLM judgment: each of 3 judges (the paper: GPT-4.1, Gemini Flash 2.5, Claude Sonnet 3.7) gets the question,
  the ground truth and the answer with the B.2 prompt and answers "yes" or "no"; the answer is valid when at
  least 2 say yes.

`mode`: "exact_match" (EM only), "majority" (votes only), "em_or_majority" (EM first, votes when EM fails:
the combined view the paper argues for). A vote that fails (timeout, dead server, no yes/no) counts for
neither side; when the remaining votes cannot reach a majority the verdict is judge_error.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Literal, Sequence

from jaxwebrl.judges.backends import CallRunner, ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeInput, TaskSpecLookup, Verdict, judge_error
from jaxwebrl.judges.common import ModelJudge, unparsable
from jaxwebrl.judges.parsing import exact_match, parse_yes_no

Mode = Literal["exact_match", "majority", "em_or_majority"]
EVAL_PROMPT = (
    "You are an agent tasked with determining the correctness of an answer. Given a question, its corresponding "
    "ground truth, and an answer, you need to decide whether the answer is correct. If it is correct, please "
    "output \"yes\" otherwise output \"no\".\n\n"
    "question: {question}\n ground truth: {truth}\n answer: {answer}"
)


class BrowserAgentJudge(ModelJudge):
    """See the module doc. `backends`: the voting judges (3 in the paper); none needed for mode exact_match."""

    name = "browseragent"

    def __init__(self, backends: Sequence[JudgeBackend] = (), options: JudgeOptions | None = None, *,
                 mode: Mode = "em_or_majority", votes_needed: int | None = None, action_space: str = "webarena",
                 task_specs: TaskSpecLookup | None = None, name: str | None = None) -> None:
        super().__init__(backends[0] if backends else None, options, action_space=action_space,
                         task_specs=task_specs, name=name)
        if mode not in ("exact_match", "majority", "em_or_majority"):
            raise ValueError(f"mode={mode!r}: use exact_match, majority or em_or_majority")
        if mode != "exact_match" and not backends:
            raise ValueError(f"mode={mode!r} needs judge backends (the paper uses 3); or use mode='exact_match'")
        self.mode = mode
        self.backends = list(backends)
        self.runners = [CallRunner(b, self.options) for b in self.backends]
        self.votes_needed = votes_needed or len(self.backends) // 2 + 1
        if self.backends and not 1 <= self.votes_needed <= len(self.backends):
            raise ValueError(f"votes_needed={self.votes_needed}: must be in 1..{len(self.backends)}")

    def messages(self, inp: JudgeInput) -> list[ChatMessage]:
        truth = " | ".join(inp.reference_answers)
        return [ChatMessage("user", EVAL_PROMPT.format(question=inp.instruction, truth=truth, answer=inp.answer))]

    async def _judge(self, inp: JudgeInput) -> Verdict:
        if not inp.reference_answers:
            return judge_error("bad_input", f"task {inp.task_id!r} has no ground-truth answer; BrowserAgent's judge "
                                            "compares against one (metadata 'reference_answers' or the task's eval)")
        if inp.answer is None:
            return Verdict("failure", 0.0, 0.0, extra={"reason": "no stop [answer]"})
        em = exact_match(inp.answer, inp.reference_answers)
        if self.mode == "exact_match" or (self.mode == "em_or_majority" and em):
            return Verdict("success" if em else "failure", float(em), float(em), extra={"exact_match": em})
        msgs = self.messages(inp)
        base = self.options.sampling()
        # One seed per vote, so votes sampled from one model (temperature > 0) are independent draws.
        params = [dataclasses.replace(base, seed=None if base.seed is None else base.seed + i)
                  for i in range(len(self.runners))]
        calls = list(await asyncio.gather(*(r.call(f"vote[{i}]", msgs, params[i]) for i, r in enumerate(self.runners))))
        votes: list[bool | None] = []
        for i, call in enumerate(calls):
            vote = parse_yes_no(call.text) if call.error_kind is None else None
            if vote is None and call.error_kind is None:
                calls[i] = unparsable(call, "yes / no")
            votes.append(vote)
        yes, no = votes.count(True), votes.count(False)
        extra = {"exact_match": em, "votes": votes, "yes": yes, "no": no}
        if yes >= self.votes_needed or no > len(votes) - self.votes_needed:
            ok = yes >= self.votes_needed
            return Verdict("success" if ok else "failure", yes / len(votes), float(ok), calls=tuple(calls), extra=extra)
        broken = next(c for c in calls if c.error_kind is not None)
        return judge_error(broken.error_kind or "unparsable", f"{yes} yes / {no} no of {len(votes)} votes, "
                           f"no majority: {broken.error_detail}", calls=calls)

    async def close(self) -> None:
        for b in self.backends:
            await b.close()
