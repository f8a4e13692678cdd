"""Judges against a real sglang-jax server on loopback (CPU): the OpenAI-compatible chat client on its
/v1/chat/completions route and the same judge through SGLangEngine (token in / token out). The model is a
tiny random Qwen3 (head_dim 128, which sglang-jax needs). A judge server killed mid-run and restarted is
tested through the online RL loop in test_judges_online_sglang.py (the episodes it could not judge get
judge_error 'unavailable' with mask 0; after the restart every episode is judged again).

Needs the Python 3.12 venv with sglang-jax (scripts/setup_sglang_env.sh, or $JAXWEBRL_SGLANG_PYTHON); without
it the module is skipped with that reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jaxwebrl.engines import OpenAIChatEngine, SamplingParams, SGLangEngine, SGLangServer
from jaxwebrl.judges import ChatBackend, EngineBackend, JudgeInput, JudgeOptions, OpenWebRLJudge
from jaxwebrl.judges.backends import ChatMessage
from jaxwebrl.models import load_tokenizer
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
from judge_fixtures import sglang_python_or_skip, CORPUS, tool_call, trajectory


PYTHON = sglang_python_or_skip()
CFG = tiny_config("qwen3", head_dim=128, num_heads=2, num_kv_heads=1)
SHORT_PROMPT = "You judge web agents. End with Verdict: SUCCESS or Verdict: NOT SUCCESS."


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # A directory name without a model family in it: sglang-jax guesses a built-in conversation template from
    # the path, and we want it to use the checkpoint's own chat template.
    path = tmp_path_factory.mktemp("judge_ckpt")
    make_tiny_checkpoint(path, CFG, seed=0, std=0.3, corpus=CORPUS)
    server = SGLangServer(path, device="cpu", python=PYTHON, log_path=path / "server.log", context_length=2048,
                          max_total_tokens=16384)
    server.start()
    try:
        yield {"path": path, "server": server, "tok": load_tokenizer(path)}
    finally:
        server.stop()


def _messages() -> list[ChatMessage]:
    return [ChatMessage("system", SHORT_PROMPT), ChatMessage("user", "Task: click the submit button\nFinal answer: done")]


def test_chat_client_renders_like_us_and_decodes_like_generate(served: Any) -> None:
    """The server's chat template gives the same prompt ids as ours (usage.prompt_tokens), and its greedy answer
    equals /generate on our rendered ids, decoded."""
    tok = served["tok"]
    sp = SamplingParams(greedy=True, max_new_tokens=24)
    msgs = _messages()

    async def main() -> tuple[Any, Any, list[str]]:
        chat = ChatBackend(OpenAIChatEngine(served["server"].url, retries=0), tokenizer=tok)
        raw = EngineBackend(SGLangEngine(served["server"].url), tok)
        try:
            models = await chat.client.models()
            return await chat.complete(msgs, sp), await raw.complete(msgs, sp), models
        finally:
            await chat.close()
            await raw.close()

    via_chat, via_generate, models = asyncio.run(main())
    assert models and via_chat.prompt_ids == via_generate.prompt_ids
    assert via_chat.server_prompt_tokens == len(via_generate.prompt_ids)
    assert len(via_generate.token_ids) >= 1 and via_chat.text == via_generate.text
    assert via_chat.token_ids == ()  # the chat API returns no ids; the engine path does


def test_openwebrl_judge_same_verdict_over_chat_and_engine(served: Any) -> None:
    tok = served["tok"]
    traj = trajectory([tool_call("click", x=1, y=2), tool_call("done", answer="42")], goal="Answer 42")
    opts = JudgeOptions(max_new_tokens=16, retries=0, timeout_s=120)

    async def main() -> tuple[Any, Any]:
        a = OpenWebRLJudge(ChatBackend(OpenAIChatEngine(served["server"].url, retries=0), tokenizer=tok), opts,
                           system_prompt=SHORT_PROMPT)
        b = OpenWebRLJudge(EngineBackend(SGLangEngine(served["server"].url), tok), opts, system_prompt=SHORT_PROMPT)
        try:
            return await a.judge(traj), await b.judge(traj)
        finally:
            await a.close()
            await b.close()

    over_chat, over_engine = asyncio.run(main())
    assert over_chat.called and over_engine.called
    assert over_chat.calls[0].text == over_engine.calls[0].text and over_engine.token_ids
    assert over_chat.calls[0].prompt_ids == over_engine.calls[0].prompt_ids
    # a random model writes no verdict: judge_error, recorded, never raised
    assert over_chat.label == over_engine.label == "judge_error" and over_chat.error_kind == "unparsable"
    inp = JudgeInput.from_trajectory(traj, action_space="openwebrl")
    assert "Final answer: 42" in tok.decode(list(over_engine.calls[0].prompt_ids))
    assert inp.ended_with_answer
