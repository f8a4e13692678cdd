"""WebGym's rubric judge (paper §3.5 and Appendix E.3) and its difficulty levels (§3.2, Algorithm 1).

A task carries a rubric of fact groups, each group one or more facts. The judge makes one criterion-A call
per fact ("is this fact satisfied, with evidence in the key screenshots?") and one criterion-B call per task
("is the final answer free of hallucination, i.e. supported by the screenshots?"). Reward 1 only if every
criterion holds. Where the task has reference answers they override the judge (§3.5): the answer is matched
against them and no model is called.

Key screenshots: the paper selects them with a separate high-recall keypoint call (E.2). Observations here are
page text, so the default keeps the last `max_keypoints` pages; `keypoints=` takes any selector (a model-backed
one included) returning the step indices to show.

Combining criteria: a criterion judged NOT SUCCESS makes the reward 0 even when another call failed (the
outcome is decided); otherwise any failed or unparsable call makes the verdict judge_error.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping, Sequence

from jaxwebrl.judges.backends import ChatMessage, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import JudgeCall, JudgeInput, TaskSpecLookup, Verdict, judge_error
from jaxwebrl.judges.common import ModelJudge, clip, unparsable
from jaxwebrl.judges.parsing import parse_success

LEVELS = (("easy", 1, 3), ("medium", 4, 6), ("hard", 7, None))

CRITERION_A_PROMPT = (
    "You are an expert evaluator of web-browsing agents. You check ONE fact from the evaluation rubric of a web "
    "task against the agent's trajectory.\n"
    "You are given: the task; the rubric group the fact belongs to; the fact; the agent's final answer; and the "
    "key screenshots of the trajectory (as page text when no image is available).\n"
    "The fact is satisfied only if the key screenshots show evidence for it and the agent's final answer (or "
    "the final state of the website, for tasks that change it) agrees with that evidence. Do not assume "
    "anything the screenshots do not show.\n"
    "Explain briefly, then end with exactly one line: \"Verdict: SUCCESS\" if the fact is satisfied, or "
    "\"Verdict: NOT SUCCESS\" if it is not."
)
CRITERION_B_PROMPT = (
    "You are an expert evaluator of web-browsing agents. You check the agent's final answer for hallucination.\n"
    "You are given: the task; the agent's final answer; and the key screenshots of the trajectory (as page "
    "text when no image is available).\n"
    "The answer passes only if it responds to the task and every piece of information in it is supported by "
    "the screenshots: nothing invented, nothing contradicted.\n"
    "Explain briefly, then end with exactly one line: \"Verdict: SUCCESS\" if the answer passes, or "
    "\"Verdict: NOT SUCCESS\" if it does not."
)


def difficulty(rubric: Sequence[tuple[str, Sequence[str]]]) -> int:
    """Algorithm 1, line 6: a task's difficulty is the total number of facts over all its groups."""
    return sum(len(facts) for _, facts in rubric)


def difficulty_level(num_facts: int) -> str:
    """easy 1-3 facts, medium 4-6, hard 7+ (§4: the difficulty levels used for horizons and sampling)."""
    if num_facts < 1:
        raise ValueError(f"difficulty {num_facts}: a rubric has at least one fact")
    for name, low, high in LEVELS:
        if num_facts >= low and (high is None or num_facts <= high):
            return name
    raise AssertionError("unreachable: LEVELS cover every positive count")


def reference_match(answer: str | None, refs: Any) -> bool:
    """The agent's answer against reference answers: a WebArena block (`exact_match`, `must_include` with
    ` |OR| ` alternatives) keeps its meaning; a plain list passes when some reference is in the answer."""
    from jaxwebrl.judges.parsing import normalize_answer

    if answer is None:
        return False
    got = normalize_answer(answer)
    if isinstance(refs, Mapping):
        if "exact_match" in refs and normalize_answer(str(refs["exact_match"])) != got:
            return False
        for needle in refs.get("must_include") or []:
            if not any(normalize_answer(a) in got for a in str(needle).split(" |OR| ")):
                return False
        return "exact_match" in refs or bool(refs.get("must_include"))
    refs = [refs] if isinstance(refs, str) else list(refs)
    return any(normalize_answer(r) and normalize_answer(r) in got for r in refs)


class WebGymRubricJudge(ModelJudge):
    """See the module doc."""

    name = "webgym_rubric"

    def __init__(self, backend: JudgeBackend, options: JudgeOptions | None = None, *, action_space: str = "webarena",
                 max_keypoints: int = 5, max_observation_chars: int = 3000,
                 keypoints: Callable[[JudgeInput], Sequence[int]] | None = None, references_override: bool = True,
                 task_specs: TaskSpecLookup | None = None, name: str | None = None) -> None:
        super().__init__(backend, options, action_space=action_space, task_specs=task_specs, name=name)
        self.max_keypoints = max_keypoints
        self.max_observation_chars = max_observation_chars
        self.keypoints = keypoints
        self.references_override = references_override

    def evidence(self, inp: JudgeInput) -> tuple[str, tuple[bytes, ...]]:
        pages = [(f"step {i + 1}", s.observation, s.screenshot) for i, s in enumerate(inp.steps)]
        if inp.final_observation:
            pages.append(("end", inp.final_observation, None))
        if self.keypoints is not None:
            chosen = [pages[i] for i in sorted(set(self.keypoints(inp))) if 0 <= i < len(pages)]
        else:
            chosen = pages[-self.max_keypoints:]
        text = "\n\n".join(f"[Screenshot at {label}]\n{clip(obs, self.max_observation_chars)}" for label, obs, _ in chosen)
        return text or "(no screenshots)", tuple(png for _, _, png in chosen if png)

    def criterion_a_messages(self, inp: JudgeInput, group: str, fact: str) -> list[ChatMessage]:
        shots, images = self.evidence(inp)
        user = (f"Task: {inp.instruction}\n\nRubric group: {group}\nFact to verify: {fact}\n\n"
                f"Final answer: {inp.answer or '(no answer)'}\n\nKey screenshots:\n{shots}")
        return [ChatMessage("system", CRITERION_A_PROMPT), ChatMessage("user", user, images)]

    def criterion_b_messages(self, inp: JudgeInput) -> list[ChatMessage]:
        shots, images = self.evidence(inp)
        user = f"Task: {inp.instruction}\n\nFinal answer: {inp.answer or '(no answer)'}\n\nKey screenshots:\n{shots}"
        return [ChatMessage("system", CRITERION_B_PROMPT), ChatMessage("user", user, images)]

    async def _judge(self, inp: JudgeInput) -> Verdict:
        facts = difficulty(inp.rubric) if inp.rubric else 0
        extra: dict[str, Any] = {"difficulty": facts, "level": difficulty_level(facts) if facts else None}
        if self.references_override and inp.references_raw:
            ok = reference_match(inp.answer, inp.references_raw)
            return Verdict("success" if ok else "failure", float(ok), float(ok), extra={**extra, "source": "reference"})
        if not inp.rubric:
            return judge_error("bad_input", f"task {inp.task_id!r} has neither a rubric (fact groups) nor reference "
                                            "answers; add a 'rubric' to its task spec or trajectory metadata")
        jobs: list[tuple[str, list[ChatMessage]]] = [
            (f"criterion_a[{g}.{k}]", self.criterion_a_messages(inp, group, fact))
            for g, (group, fact_list) in enumerate(inp.rubric) for k, fact in enumerate(fact_list)
        ]
        jobs.append(("criterion_b", self.criterion_b_messages(inp)))
        calls: list[JudgeCall] = list(await asyncio.gather(*(self._call(p, m) for p, m in jobs)))
        results: list[bool | None] = []
        for i, call in enumerate(calls):
            if call.error_kind is None:
                ok = parse_success(call.text)
                if ok is None:
                    calls[i] = call = unparsable(call, "SUCCESS / NOT SUCCESS verdict")
                results.append(ok)
            else:
                results.append(None)
        extra["criteria"] = [{"purpose": c.purpose, "holds": r} for c, r in zip(calls, results)]
        decisive = next((c for c, r in zip(calls, results) if r is False), None)
        if decisive is not None:
            return Verdict("failure", 0.0, 0.0, text=decisive.text, token_ids=decisive.token_ids, calls=tuple(calls),
                           extra=extra)
        broken = next((c for c, r in zip(calls, results) if r is None), None)
        if broken is not None:
            return judge_error(broken.error_kind or "unparsable", broken.error_detail, calls=calls, text=broken.text,
                               token_ids=broken.token_ids)
        last = calls[-1]
        return Verdict("success", 1.0, 1.0, text=last.text, token_ids=last.token_ids, calls=tuple(calls), extra=extra)
