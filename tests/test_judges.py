"""The judges on CPU: token-exact prompts, adversarial verdict parsing, each paper's rule (with a scripted judge
model through the Engine protocol, see judge_fixtures), the reward seam, the JudgeQueue's concurrency, the
WebGym task-synthesis tool, and an end-to-end judgment by a tiny random Flax model on the in-process JaxEngine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from jaxwebrl.engines import EngineUnavailableError, Generation, JaxEngine, SamplingParams
from jaxwebrl.judges import (
    BrowserAgentJudge, ChatMessage, EngineBackend, JudgeConfig, JudgeInput, JudgeOptions, JudgeQueue, NNetNavORM,
    OpenWebRLJudge, StateChangeSummarizer, TrajectoryLabeler, WebGymRubricJudge, apply_decision,
    decomposition_subsets, difficulty, difficulty_level, make_judge, needs_judge, reward_from_verdict,
    rollout_and_judge, synthesize_tasks, write_task_file,
)
from jaxwebrl.judges.parsing import (
    exact_match, normalize_answer, parse_field, parse_reward, parse_success, parse_yes_no, safe_decode,
)
from jaxwebrl.judges.synthesis import ModelTaskWriter
from judge_fixtures import ScriptedEngine, chatml_ids, tiny_tokenizer, tool_call, trajectory


@pytest.fixture(scope="module")
def tok() -> Any:
    return tiny_tokenizer()


def backend(tok: Any, answer: Any, **kwargs: Any) -> tuple[EngineBackend, ScriptedEngine]:
    engine = ScriptedEngine(tok, answer if callable(answer) else (lambda _p: answer), **kwargs)
    return EngineBackend(engine, tok), engine


def done_traj(answer: str = "34.99", n: int = 5, **kwargs: Any) -> Any:
    actions = [tool_call("click", x=100 * i, y=50) for i in range(n - 1)] + [tool_call("done", answer=answer)]
    return trajectory(actions, feedback=[f"Succeed: step {i} did something" for i in range(n)], **kwargs)


RUBRIC = {"groups": [{"name": "Identify the lamp", "facts": ["product is the Aurora Desk Lamp"]},
                     {"name": "Price details", "facts": ["price in dollars", "price of the lamp", "currency shown"]}]}


# ---- prompts: token-exact -----------------------------------------------------------------------


def _dicts(messages: list[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def test_every_judge_prompt_renders_to_the_chat_template_ids(tok: Any) -> None:
    be, _ = backend(tok, "")
    traj = done_traj(rubric=RUBRIC, reference_answers=["34.99"], state_changes=["a", "b", "c", "d", "e"])
    inp = JudgeInput.from_trajectory(traj, action_space="openwebrl")
    prompts = {
        "openwebrl": OpenWebRLJudge(be).messages(inp),
        "webgym_a": WebGymRubricJudge(be).criterion_a_messages(inp, "Price details", "price in dollars"),
        "webgym_b": WebGymRubricJudge(be).criterion_b_messages(inp),
        "nnetnav_orm": NNetNavORM(be).messages(inp.instruction, list(inp.state_changes or ())),
        "nnetnav_label": TrajectoryLabeler(be).messages(list(inp.state_changes or ())),
        "nnetnav_summary": StateChangeSummarizer(be).summary_messages("page a", "click [12]", "page b"),
        "browseragent": BrowserAgentJudge([be]).messages(inp),
        "task_writer": ModelTaskWriter(be).messages("Buy a lamp", [("Price", ("price",))]),
    }
    for name, messages in prompts.items():
        ids = be.prompt_ids(messages)
        template = tok.apply_chat_template(_dicts(messages), tokenize=True, add_generation_prompt=True)["input_ids"]
        assert ids == list(template), name
        assert ids == chatml_ids(tok, _dicts(messages)), name
        assert len(ids) > 50, name


def test_openwebrl_prompt_carries_the_papers_inputs_and_the_engine_gets_exactly_those_ids(tok: Any) -> None:
    be, engine = backend(tok, "Verdict: SUCCESS")
    judge = OpenWebRLJudge(be)
    traj = done_traj("34.99", n=5)
    verdict = asyncio.run(judge.judge(traj))
    assert verdict.label == "success" and len(engine.prompts) == 1
    expected = judge.messages(JudgeInput.from_trajectory(traj, action_space="openwebrl"))
    assert engine.prompts[0] == chatml_ids(tok, _dicts(expected))
    user = expected[1].content
    assert "What is the price of the lamp?" in user and "Final answer: 34.99" in user
    assert "Succeed: step 3 did something" in user and '"name": "done"' in user
    # the last 3 observations only
    assert "page 4:" in user and "page 2:" in user and "page 1:" not in user
    assert verdict.token_ids and verdict.calls[0].prompt_ids == tuple(engine.prompts[0])


def test_screenshots_are_a_seam_text_engine_reports_judge_error(tok: Any) -> None:
    be, engine = backend(tok, "Verdict: SUCCESS")
    traj = done_traj(screenshots=[b"\x89PNG fake"] * 5)
    verdict = asyncio.run(OpenWebRLJudge(be).judge(traj))
    assert verdict.error == "judge_error" and verdict.error_kind == "bad_input" and "vision" in verdict.error_detail
    assert engine.prompts == []
    msgs = OpenWebRLJudge(be).messages(JudgeInput.from_trajectory(traj, action_space="openwebrl"))
    assert len(msgs[1].images) == 3  # the chat backend would send the last 3 as image parts


# ---- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("Verdict: SUCCESS", True),
    ("Verdict: NOT SUCCESS", False),
    ("The agent did well overall but the cart is empty. Verdict: NOT SUCCESS. Done.", False),
    ("SUCCESS would need the price; it is missing. NOT SUCCESS", False),  # both words: NOT SUCCESS first
    ("NOT SUCCESS ... on reflection SUCCESS", False),
    ("Verdict: NOT\n\n  SUCCESS", False),
    ("<think>maybe SUCCESS? no, NOT SUCCESS</think>Verdict: SUCCESS", True),  # only after thinking
    ("<think>looks like SUCCESS</think>", None),
    ("", None),
    ("the task was successful", None),  # lower case is not the verdict word
    ("UNSUCCESSFUL", None),
    ("**SUCCESS**", True),
])
def test_parse_success_adversarial(text: str, expected: bool | None) -> None:
    assert parse_success(text) is expected


def test_parsers_on_huge_inputs_are_linear() -> None:
    def timed(fn: Any, text: str) -> float:  # best of 3: the machine is shared
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            fn(text)
            best = min(best, time.perf_counter() - t0)
        return best

    for fn in (parse_success, parse_yes_no, parse_reward, lambda t: parse_field(t, "Instruction")):
        small = ("NOT " * 250_000)  # 1 MB of near-misses
        big = small * 4
        t1, t4 = timed(fn, small), timed(fn, big)
        assert t1 < 1.0, (fn, t1)
        assert t4 < 8 * t1 + 0.05, (fn, t1, t4)  # linear, not quadratic
    assert parse_success("x" * 1_000_000 + " NOT SUCCESS") is False
    assert parse_success(" " * 1_000_000) is None
    assert parse_reward("Reward: " + "9" * 1_000_000) is None


@pytest.mark.parametrize("text,expected", [
    ("Thought: mostly done.\nReward: 4", 4), ("Reward: 5.0", 5), ("Reward: **3**", 3), ("reward: 2", 2),
    ("Reward: 7", None), ("Reward: 4.5", None), ("Reward: 0", None), ("no score here", None), ("", None),
    ("Reward: 1 ... actually Reward: 5", 5),
])
def test_parse_reward(text: str, expected: int | None) -> None:
    assert parse_reward(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("yes", True), ("No.", False), ("Yes, the answer matches.", True), ("The answer is correct: yes", True),
    ("yes and no", True), ("I cannot say yes or no", None), ("", None), ("<think>no</think>yes", True),
])
def test_parse_yes_no(text: str, expected: bool | None) -> None:
    assert parse_yes_no(text) is expected


def test_parse_field_and_exact_match() -> None:
    assert parse_field("Thought: x\nInstruction: Add a mug to the cart.", "Instruction") == "Add a mug to the cart."
    assert parse_field("Instruction:   ", "Instruction") is None
    assert parse_field("State change: The cart shows 1 item.\n\nExtra", "State change") == "The cart shows 1 item."
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert exact_match("  the eiffel  tower.", ["Eiffel Tower"]) and not exact_match("Paris", ["Eiffel Tower"])
    assert not exact_match(None, ["x"])


def test_bad_token_ids_and_invalid_utf8(tok: Any) -> None:
    ids = tok.encode("é", add_special_tokens=False)
    assert len(ids) == 2  # a byte-level split: the first id alone is not valid UTF-8
    text, dropped = safe_decode(tok, ids[:1] + [10_000, -1])
    assert text == "\ufffd" and dropped == 2

    class BadIds(ScriptedEngine):
        async def generate(self, prompt_ids: Any, params: SamplingParams, *, session_id: str | None = None) -> Generation:
            return Generation([5, 99_999], [0.0, 0.0], "stop", len(prompt_ids), 0, 0)

    verdict = asyncio.run(OpenWebRLJudge(EngineBackend(BadIds(tok, lambda _: ""), tok)).judge(done_traj()))
    assert verdict.error == "judge_error" and verdict.error_kind == "unparsable" and "1 sampled ids" in verdict.error_detail
    assert verdict.token_ids == (5, 99_999) and verdict.calls[0].dropped_ids == 1  # raw ids kept, text without them

    class BadIdsSaySuccess(ScriptedEngine):
        async def generate(self, prompt_ids: Any, params: SamplingParams, *, session_id: str | None = None) -> Generation:
            ids = tok.encode("Verdict: SUCCESS", add_special_tokens=False)
            return Generation([99_999] + ids + [-7], [0.0] * (len(ids) + 2), "stop", len(prompt_ids), 0, 0)

    verdict = asyncio.run(OpenWebRLJudge(EngineBackend(BadIdsSaySuccess(tok, lambda _: ""), tok)).judge(done_traj()))
    assert verdict.label == "success" and verdict.calls[0].dropped_ids == 2

    # invalid UTF-8 from the model: decoded with replacement characters, then no verdict -> unparsable
    class Partial(ScriptedEngine):
        async def generate(self, prompt_ids: Any, params: SamplingParams, *, session_id: str | None = None) -> Generation:
            return Generation(ids[:1], [0.0], "stop", len(prompt_ids), 0, 0)

    verdict = asyncio.run(OpenWebRLJudge(EngineBackend(Partial(tok, lambda _: ""), tok)).judge(done_traj()))
    assert verdict.error_kind == "unparsable" and verdict.text == "\ufffd"


# ---- OpenWebRL ----------------------------------------------------------------------------------


def _ow(tok: Any, answer: Any, traj: Any, **opts: Any) -> tuple[Any, ScriptedEngine]:
    be, engine = backend(tok, answer, delay=opts.pop("delay", 0.0))
    judge = OpenWebRLJudge(be, JudgeOptions(**{"retries": 0, **opts}))
    return asyncio.run(judge.judge(traj)), engine


def test_openwebrl_rules(tok: Any) -> None:
    v, e = _ow(tok, "Verdict: SUCCESS", trajectory([tool_call("click", x=1, y=2)] * 3, termination="format_errors"))
    assert (v.label, v.reward, e.prompts) == ("format_error", -1.0, [])
    v, e = _ow(tok, "Verdict: SUCCESS", trajectory([tool_call("click", x=1, y=2)] * 3, termination="max_steps"))
    assert (v.label, v.reward, v.score, e.prompts) == ("skipped", 0.0, 0.0, [])
    v, e = _ow(tok, "Verdict: SUCCESS", done_traj(answer=""))  # done() without an answer: skipped
    assert (v.label, v.reward, e.prompts) == ("skipped", 0.0, [])
    v, e = _ow(tok, "Checked the price page. Verdict: SUCCESS", done_traj())
    assert (v.label, v.score, v.reward, len(e.prompts)) == ("success", 1.0, 1.0, 1) and v.error is None
    v, e = _ow(tok, "SUCCESS is not reached: Verdict: NOT SUCCESS", done_traj())
    assert (v.label, v.reward, len(e.prompts)) == ("failure", 0.0, 1)
    # judged SUCCESS but one turn failed the per-turn format gate: no positive reward
    v, e = _ow(tok, "Verdict: SUCCESS", done_traj(format_ok=[True, False, True, True, True]))
    assert (v.label, v.score, v.reward, v.extra["format_gate"]) == ("failure", 1.0, 0.0, False)
    v, e = _ow(tok, "I am not sure.", done_traj())
    assert v.error == "judge_error" and v.error_kind == "unparsable" and v.text == "I am not sure." and v.token_ids


def test_openwebrl_dead_server_and_timeout_are_judge_errors(tok: Any) -> None:
    v, e = _ow(tok, EngineUnavailableError("server gone"), done_traj(), retries=2, backoff_s=0.01)
    assert v.error == "judge_error" and v.error_kind == "unavailable" and v.calls[0].attempts == 3
    assert len(e.prompts) == 3
    v, e = _ow(tok, "Verdict: SUCCESS", done_traj(), delay=5.0, timeout_s=0.2, retries=1, backoff_s=0.01)
    # both attempts were cut by the timeout (the engine saw them cancelled, not answered), and counted
    assert v.error_kind == "timeout" and v.calls[0].attempts == 2 and e.cancelled == 2 and v.calls[0].timeouts == 2
    v, e = _ow(tok, RuntimeError("boom"), done_traj())
    assert v.error_kind == "engine_error" and "boom" in v.error_detail


def test_judge_reused_across_event_loops(tok: Any) -> None:
    be, engine = backend(tok, "Verdict: SUCCESS", delay=0.01)
    judge = OpenWebRLJudge(be, JudgeOptions(concurrency=1))

    async def three() -> list[Any]:
        return list(await asyncio.gather(*(judge.judge(done_traj()) for _ in range(3))))

    for _ in range(2):  # contention on the limit in two different loops
        assert [v.reward for v in asyncio.run(three())] == [1.0] * 3
    assert len(engine.prompts) == 6 and engine.max_in_flight == 1


def test_chat_backend_on_a_closed_port_is_judge_error_unavailable(tok: Any) -> None:
    from jaxwebrl.engines import OpenAIChatEngine
    from jaxwebrl.engines.sglang_server import free_port
    from jaxwebrl.judges import ChatBackend

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    judge = OpenWebRLJudge(ChatBackend(OpenAIChatEngine(url, retries=1, backoff=0.01, api_key_env=None), tokenizer=tok),
                           JudgeOptions(retries=1, backoff_s=0.01))
    verdict = asyncio.run(judge.judge(done_traj()))
    assert verdict.error == "judge_error" and verdict.error_kind == "unavailable"
    assert verdict.calls[0].attempts == 2 and "did not answer" in verdict.error_detail


# ---- WebGym -------------------------------------------------------------------------------------


def _wg(tok: Any, answer: Any, traj: Any, **kw: Any) -> tuple[Any, ScriptedEngine]:
    be, engine = backend(tok, answer)
    return asyncio.run(WebGymRubricJudge(be, JudgeOptions(retries=0), **kw).judge(traj)), engine


def test_webgym_rubric_rules(tok: Any) -> None:
    stop = ["<think>x</think>```click [12]```", "<think>x</think>```stop [$34.99]```"]
    traj = trajectory(stop, rubric=RUBRIC)
    v, e = _wg(tok, "Verdict: SUCCESS", traj)
    assert (v.label, v.reward, len(e.prompts)) == ("success", 1.0, 5)  # 4 facts (criterion A) + criterion B
    assert v.extra["difficulty"] == 4 and v.extra["level"] == "medium"
    prompts = [tok.decode(p) for p in e.prompts]
    assert sum("Fact to verify: price in dollars" in p for p in prompts) == 1
    assert sum("hallucination" in p for p in prompts) == 1 and all("Final answer: $34.99" in p for p in prompts)

    def one_fact_fails(prompt: str) -> str:
        return "Verdict: NOT SUCCESS" if "currency shown" in prompt else "Verdict: SUCCESS"

    v, _ = _wg(tok, one_fact_fails, traj)
    assert (v.label, v.reward) == ("failure", 0.0) and [c["holds"] for c in v.extra["criteria"]].count(False) == 1

    def b_fails(prompt: str) -> str:
        return "Verdict: NOT SUCCESS" if "hallucination" in prompt else "Verdict: SUCCESS"

    v, _ = _wg(tok, b_fails, traj)
    assert v.reward == 0.0 and v.extra["criteria"][-1] == {"purpose": "criterion_b", "holds": False}

    def one_garbled(prompt: str) -> str:
        return "hmm" if "Fact to verify: price of the lamp" in prompt else "Verdict: SUCCESS"

    v, _ = _wg(tok, one_garbled, traj)
    assert v.error == "judge_error" and v.error_kind == "unparsable"

    def garbled_and_failed(prompt: str) -> str:  # a definite NOT SUCCESS decides even if another call broke
        return "hmm" if "Fact to verify: price of the lamp" in prompt else one_fact_fails(prompt)

    v, _ = _wg(tok, garbled_and_failed, traj)
    assert (v.label, v.reward, v.error) == ("failure", 0.0, None)


def test_webgym_reference_answers_override_and_missing_rubric(tok: Any) -> None:
    stop = ["<think>x</think>```stop [It costs $34.99]```"]
    v, e = _wg(tok, "Verdict: NOT SUCCESS", trajectory(stop, rubric=RUBRIC,
                                                         reference_answers={"must_include": ["34.99"]}))
    assert (v.label, v.reward, v.extra["source"], e.prompts) == ("success", 1.0, "reference", [])
    v, e = _wg(tok, "Verdict: SUCCESS", trajectory(stop, rubric=RUBRIC, reference_answers=["12.00"]))
    assert (v.reward, e.prompts) == (0.0, [])
    v, e = _wg(tok, "Verdict: SUCCESS", trajectory(stop))
    assert v.error_kind == "bad_input" and "rubric" in v.error_detail and e.prompts == []
    spec = {"shop_001": {"intent": "Find the lamp price", "rubric": RUBRIC}}
    v, e = _wg(tok, "Verdict: SUCCESS", trajectory(stop), task_specs=spec.get)  # rubric from the task spec
    assert v.reward == 1.0 and len(e.prompts) == 5


def test_difficulty_levels() -> None:
    assert [difficulty_level(n) for n in (1, 3, 4, 6, 7, 20)] == ["easy", "easy", "medium", "medium", "hard", "hard"]
    assert difficulty([("a", ("x",)), ("b", ("y", "z"))]) == 3
    with pytest.raises(ValueError, match="at least one fact"):
        difficulty_level(0)


def test_task_synthesis_follows_algorithm_1(tok: Any, tmp_path: Path) -> None:
    # The paper's example: G1 (2 facts), G2 (3), G3 (4) -> {G2}, {G3}, {G1,G2}, {G1,G3}, {G2,G3}
    groups = [("G1", ("t", "l")), ("G2", ("n", "p", "y")), ("G3", ("d", "c", "v", "e"))]
    subsets = decomposition_subsets(groups)
    assert sorted(subsets) == sorted([(1,), (2,), (0, 1), (0, 2), (1, 2)])
    assert sorted(difficulty([groups[i] for i in s]) for s in subsets) == [3, 4, 5, 6, 7]
    assert decomposition_subsets([("only", ("a", "b", "c"))]) == []  # one group
    assert decomposition_subsets([("a", ("x", "y")), ("b", ("z",))]) == []  # no large group

    be, engine = backend(tok, lambda p: "Thought: ok\nTask: Find the " + ("pianist" if "Facts:\n- n" in p else "concert"))
    spec = {"task_id": "live_007", "site": "shop", "category": "search", "intent": "Find a concert and pianist.",
            "start_url": "__SHOP__/", "eval": {"eval_types": []},
            "rubric": {"groups": [{"name": n, "facts": list(f)} for n, f in groups]}}
    plain = {**spec, "task_id": "plain", "rubric": None}
    tasks, dropped = asyncio.run(synthesize_tasks([spec, plain], ModelTaskWriter(be, JudgeOptions(retries=0))))
    assert len(tasks) == 5 and dropped == [] and len(engine.prompts) == 5
    assert {t["difficulty"] for t in tasks} == {"easy", "medium", "hard"}
    assert all(t["parent_task_id"] == "live_007" and t["eval"] == {"eval_types": []} for t in tasks)
    path = write_task_file(tasks, tmp_path / "tasks" / "synth.json")
    from envs.local_sites import load_task_specs

    loaded = load_task_specs(path.parent)
    assert [t["task_id"] for t in loaded] == [t["task_id"] for t in tasks]
    with pytest.raises(FileExistsError):
        write_task_file(tasks, path)
    # a writer that produces nothing drops the candidate, with the reason
    be2, _ = backend(tok, "no task line")
    tasks2, dropped2 = asyncio.run(synthesize_tasks([spec], ModelTaskWriter(be2, JudgeOptions(retries=0))))
    assert tasks2 == [] and len(dropped2) == 5


# ---- NNetNav ------------------------------------------------------------------------------------


def test_nnetnav_orm_with_recorded_summaries(tok: Any) -> None:
    traj = trajectory(["click('12')", "click('7')"], state_changes=["Opened the cart.", "Removed the mug."],
                      instruction="Remove the mug from the cart")
    for reply, label, reward in (("Thought: fine\nReward: 4", "success", 1.0), ("Reward: 3", "failure", 0.0),
                                 ("Reward: 5", "success", 1.0)):
        be, engine = backend(tok, reply)
        v = asyncio.run(NNetNavORM(be).judge(traj))
        assert (v.label, v.reward) == (label, reward) and len(engine.prompts) == 1
        prompt = tok.decode(engine.prompts[0])
        assert "Instruction: Remove the mug from the cart" in prompt and "2. Removed the mug." in prompt
    be, _ = backend(tok, "Reward: 9")
    assert asyncio.run(NNetNavORM(be, JudgeOptions(retries=0)).judge(traj)).error_kind == "unparsable"


def test_nnetnav_summarises_when_not_recorded_then_labels(tok: Any) -> None:
    def model(prompt: str) -> str:
        if "description of the changes" in prompt:
            return "State change: The page changed."
        if "guess the instruction" in prompt:
            return "Thought: they browsed.\nInstruction: Browse the books category."
        return "Reward: 4"

    traj = trajectory(["click('12')", "click('7')", "click('3')"], final_observation="final page")
    be, engine = backend(tok, model)
    v = asyncio.run(NNetNavORM(be).judge(traj))
    assert v.reward == 1.0 and len(engine.prompts) == 4 and v.extra["summaries"] == ["The page changed."] * 3
    last_summary = tok.decode(engine.prompts[2])
    assert "Final state of the browser:\nfinal page" in last_summary
    be, engine = backend(tok, model)
    v = asyncio.run(TrajectoryLabeler(be).judge(traj))
    assert (v.label, v.output, len(engine.prompts)) == ("labeled", "Browse the books category.", 4)
    be, _ = backend(tok, "no format")
    v = asyncio.run(StateChangeSummarizer(be, JudgeOptions(retries=0)).judge(traj))
    assert v.error_kind == "unparsable"


# ---- BrowserAgent -------------------------------------------------------------------------------


def test_browseragent_exact_match_and_majority(tok: Any) -> None:
    stop = ["<think>x</think>```stop [The Eiffel Tower.]```"]
    traj = trajectory(stop, goal="Which tower is in Paris?", reference_answers=["Eiffel Tower"])
    v = asyncio.run(BrowserAgentJudge(mode="exact_match").judge(traj))
    assert (v.label, v.reward, v.called) == ("success", 1.0, False)

    def voters(*replies: Any) -> tuple[BrowserAgentJudge, list[ScriptedEngine]]:
        pairs = [backend(tok, r) for r in replies]
        return BrowserAgentJudge([b for b, _ in pairs], JudgeOptions(retries=0), mode="majority"), [e for _, e in pairs]

    wrong = trajectory(["```stop [Big tower]```"], goal="Which tower is in Paris?", reference_answers=["Eiffel Tower"])
    judge, engines = voters("yes", "no", "Yes.")
    v = asyncio.run(judge.judge(wrong))
    assert (v.label, v.reward, v.extra["yes"]) == ("success", 1.0, 2) and all(len(e.prompts) == 1 for e in engines)
    assert [e.params[0].seed for e in engines] == [0, 1, 2]  # independent draws when one model casts every vote
    prompt = tok.decode(engines[0].prompts[0])
    assert "question: Which tower is in Paris?" in prompt and "ground truth: Eiffel Tower" in prompt
    judge, _ = voters("no", "no", "yes")
    assert asyncio.run(judge.judge(wrong)).reward == 0.0
    judge, _ = voters("yes", "no", EngineUnavailableError("down"))
    v = asyncio.run(judge.judge(wrong))
    assert v.error == "judge_error" and v.error_kind == "unavailable"
    judge, _ = voters("no", "no", EngineUnavailableError("down"))  # decided without the dead vote
    assert asyncio.run(judge.judge(wrong)).label == "failure"
    # em_or_majority: EM passes without calling any judge
    judge = BrowserAgentJudge([backend(tok, "no")[0]] * 3, mode="em_or_majority")
    v = asyncio.run(judge.judge(traj))
    assert v.reward == 1.0 and not v.called
    v = asyncio.run(BrowserAgentJudge(mode="exact_match").judge(trajectory(stop)))
    assert v.error_kind == "bad_input"


# ---- reward seam and queue ----------------------------------------------------------------------


def test_reward_from_verdict_and_apply(tok: Any) -> None:
    be, _ = backend(tok, "garbage")
    traj = done_traj()
    bad = asyncio.run(OpenWebRLJudge(be, JudgeOptions(retries=0)).judge(traj))
    d = reward_from_verdict(bad, source="judge")
    assert (d.reward, d.train, d.termination) == (0.0, False, "judge_error")
    apply_decision(traj, d, bad)
    assert traj.termination == "judge_error" and all(t.num_trained == 0 for t in traj.turns)
    assert traj.metadata["judge"]["error_kind"] == "unparsable" and traj.metadata["termination_before_judge"] == "done"
    json.dumps(traj.to_dict())  # the record stays JSON-able

    be, _ = backend(tok, "Verdict: SUCCESS")
    good = asyncio.run(OpenWebRLJudge(be).judge(done_traj()))
    assert reward_from_verdict(good).reward == 1.0
    assert reward_from_verdict(good, source="rule", rule_reward=0.0).source == "rule"
    assert reward_from_verdict(good, source="rule_or_judge", rule_reward=0.0).reward == 0.0
    assert reward_from_verdict(good, source="rule_or_judge", rule_reward=None).reward == 1.0
    assert needs_judge("rule_or_judge", has_rule=False) and not needs_judge("rule_or_judge", has_rule=True)
    with pytest.raises(ValueError, match="rule evaluator"):
        reward_from_verdict(None, source="rule")
    with pytest.raises(ValueError, match="source"):
        needs_judge("judges", True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="model_path"):
        JudgeConfig(engine="jax").validate()


def test_queue_judges_as_episodes_end_and_limits_hold(tok: Any) -> None:
    """8 episodes end at once, 4 more end only once those 8 are judged; each is judged when it ends (no
    barrier: with one, the first 8 would wait for the last 4, which wait for them, until the safety limit, and
    the order below would break). Queue limit 3 episodes, judge limit 2 model calls (a WebGym rubric makes 5
    calls per episode): both measured."""
    be, engine = backend(tok, "Verdict: SUCCESS", delay=0.02)
    judge = WebGymRubricJudge(be, JudgeOptions(concurrency=2, retries=0))
    ends: dict[str, float] = {}
    judged: dict[str, float] = {}
    early_judged = asyncio.Event()

    def on_verdict(traj: Any, _v: Any) -> None:
        judged.setdefault(traj.task_id, time.perf_counter())
        if all(f"t{i}" in judged for i in range(8)):
            early_judged.set()

    queue = JudgeQueue(judge, concurrency=3, on_verdict=on_verdict)

    async def episode(i: int) -> Any:
        await asyncio.sleep(0)
        if i >= 8:
            with contextlib.suppress(asyncio.TimeoutError):  # safety limit only
                await asyncio.wait_for(early_judged.wait(), 120)
            await asyncio.sleep(0.001 * i)
        ends[f"t{i}"] = time.perf_counter()
        return trajectory(["```stop [34.99]```"], task_id=f"t{i}", rubric=RUBRIC)

    results = asyncio.run(rollout_and_judge([episode(i) for i in range(12)], queue))
    assert len(results) == 12 and queue.finished == 12 and len(judged) == 12 and all(v.reward == 1.0 for _, v in results)
    assert len(engine.prompts) == 12 * 5
    assert 1 <= judge.runner.max_in_flight <= 2 and engine.max_in_flight == judge.runner.max_in_flight == 2
    assert queue.max_in_flight == 3
    # overlap: the first 8 were judged before the later ones ended (no barrier at the end of the batch)
    first_late_end = min(ends[f"t{i}"] for i in range(8, 12))
    assert sum(judged[f"t{i}"] < first_late_end for i in range(8)) == 8
    assert all(judged[k] >= ends[k] for k in ends)


def test_make_judge_builds_each_kind_and_engine() -> None:
    from jaxwebrl.judges import ChatBackend, JUDGE_KINDS

    for kind in JUDGE_KINDS:
        judge = make_judge(JudgeConfig(kind=kind, engine="openai", url="http://127.0.0.1:9/v1", model_name="judge"))
        assert judge.name.startswith(kind.split("_")[0]) and isinstance(judge.backend, ChatBackend)
        assert judge.backend.client.base_url == "http://127.0.0.1:9"
    judge = make_judge(JudgeConfig(kind="browseragent", mode="exact_match", engine="openai", url="http://x"))
    assert judge.backends == []
    three = make_judge(JudgeConfig(kind="browseragent", engine="openai", urls="http://a, http://b,http://c"))
    assert len(three.backends) == 3 and three.votes_needed == 2
    with pytest.raises(ValueError, match="kind: 'gpt' is not allowed"):
        JudgeConfig(kind="gpt")
    with pytest.raises(ValueError, match="url: is empty"):
        make_judge(JudgeConfig(engine="openai"))
    with pytest.raises(ValueError, match="concurrency"):
        JudgeConfig(concurrency=0, url="http://x")


def test_make_judge_from_config_and_jax_engine_end_to_end(tmp_path: Path) -> None:
    """A tiny random Flax judge on the in-process JaxEngine (its own params): it runs on the rendered prompt;
    its random text holds no verdict, so the verdict is judge_error 'unparsable', with the model's token ids."""
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

    from judge_fixtures import CORPUS

    cfg, params = make_tiny_checkpoint(tmp_path, tiny_config("qwen3"), seed=3, std=0.3, corpus=CORPUS)
    jcfg = JudgeConfig(kind="openwebrl", engine="jax", model_path=str(tmp_path), max_new_tokens=12, jax_max_len=256,
                       jax_num_slots=2, retries=0, system_prompt="Judge the agent. End with Verdict: SUCCESS or NOT SUCCESS.")
    judge = make_judge(jcfg)
    assert isinstance(judge, OpenWebRLJudge) and isinstance(judge.backend.engine, JaxEngine)
    traj = trajectory([tool_call("done", answer="42")], goal="Answer 42")
    tok = load_tokenizer(tmp_path)

    async def main() -> tuple[Any, Generation]:
        try:
            verdict = await judge.judge(traj)
            ids = judge.backend.prompt_ids(judge.messages(JudgeInput.from_trajectory(traj, action_space="openwebrl")))
            direct = await judge.backend.engine.generate(ids, jcfg.options().sampling())
            return verdict, direct
        finally:
            await judge.close()

    verdict, direct = asyncio.run(main())
    assert verdict.called and verdict.calls[0].prompt_ids
    assert list(verdict.calls[0].prompt_ids) == chatml_ids(tok, _dicts(judge.messages(
        JudgeInput.from_trajectory(traj, action_space="openwebrl"))))
    assert len(verdict.token_ids) >= 1 and list(verdict.token_ids) == direct.token_ids  # greedy: same model output
    assert verdict.error == "judge_error" and verdict.error_kind == "unparsable"
    assert reward_from_verdict(verdict).train is False
