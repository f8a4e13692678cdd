"""The judge wired into online RL through the OpenAI-compatible client, against a real sglang-jax server on
loopback (CPU), and that server killed mid-run and restarted.

Real parts: Chromium on the local shop site, the OnlineRL loop of the OpenWebRL recipe, sglang-jax serving a
tiny judge model built to answer "Verdict: SUCCESS" (`make_verdict_checkpoint`), reached over
/v1/chat/completions (`reward.judge.engine='openai'`). The policy is scripted through the Engine protocol
(`ScriptedPolicy`: per group one right answer, two wrong answers, one episode without an answer), because
the test needs predictable episodes. Dynamic sampling is off here so every round keeps its first group
whatever the judge did (the in-process test in test_judges_online.py runs the paper's setting).

Needs the Python 3.12 venv with sglang-jax (scripts/setup_sglang_env.sh, or $JAXWEBRL_SGLANG_PYTHON); without
it the module is skipped with that reason.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jaxwebrl.config import with_changes
from jaxwebrl.engines import SGLangServer
from judge_fixtures import sglang_python_or_skip, ROLES, ScriptedPolicy, judged_run, make_verdict_checkpoint


PYTHON = sglang_python_or_skip()
LIMIT = 2  # judge calls in flight
JUDGE_PROMPT = "You judge web agents. End with Verdict: SUCCESS or Verdict: NOT SUCCESS."


def crash(server: SGLangServer) -> None:
    """SIGKILL the whole server process group (a crash, not a graceful shutdown), then reap it."""
    import os
    import signal

    assert server.proc is not None
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(30)
    server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

    policy = tmp_path_factory.mktemp("policy")
    make_tiny_checkpoint(policy, tiny_config("qwen3", max_position_embeddings=4096))
    # no model family in the directory name: sglang-jax would pick a built-in chat template from it
    judge = tmp_path_factory.mktemp("verdict_ckpt")
    make_verdict_checkpoint(judge, head_dim=128, num_heads=2, num_kv_heads=1, max_position_embeddings=4096)
    server = SGLangServer(judge, device="cpu", python=PYTHON, log_path=judge / "server.log", context_length=4096,
                          max_total_tokens=16384)
    server.start()
    try:
        yield {"policy": policy, "server": server}
    finally:
        server.stop()


def test_judge_server_killed_mid_run_then_restarted(served: Any, tmp_path: Path) -> None:
    """Three rounds of one run, judged over the OpenAI client: (0) healthy: every answered episode judged
    SUCCESS by the server, the limit of 2 calls in flight reached and held; (1) the server is SIGKILLed as soon
    as the round's first verdict is in: the episodes it could not judge end `judge_error` ('unavailable') with
    mask 0 and are out of the batch, the rest of the round trains as usual; (2) after the restart every
    answered episode is judged again."""
    from jaxwebrl.judges import ChatBackend
    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.train.trainer import Trainer

    server = served["server"]
    run = judged_run(tmp_path, served["policy"], kind="openwebrl", engine="openai", url=server.url,
                     max_new_tokens=8, concurrency=LIMIT, queue_concurrency=4, timeout_s=60.0, retries=1,
                     system_prompt=JUDGE_PROMPT)
    run = with_changes(run, **{"train.dynamic_sampling": False})
    trainer = Trainer(run, total_steps=4)
    rounds: list[dict[str, Any]] = []

    async def main() -> Any:
        async with OnlineRL(run, trainer) as rl:
            rl.collector.engine = ScriptedPolicy(load_tokenizer(trainer.tokenizer_dir), ROLES, version=lambda: rl.version)
            scorer = rl.collector.scorer
            first_verdict = asyncio.Event()
            seen: list[Any] = []

            async def observed(traj: Any) -> None:  # the run's scorer, watched
                await scorer(traj)
                seen.append(traj)
                if traj.metadata.get("judge", {}).get("calls"):
                    first_verdict.set()

            rl.collector.scorer = observed
            for it in range(3):
                seen.clear()
                first_verdict.clear()
                killer = None
                if it == 1:
                    async def kill_after_first_verdict() -> None:
                        await first_verdict.wait()
                        await asyncio.to_thread(crash, server)
                    killer = asyncio.ensure_future(kill_after_first_verdict())
                work = await rl.next_round(it)
                if killer is not None:
                    await killer
                metrics = dict(work.metrics)
                await rl.after_update(it, trainer, metrics)
                rounds.append({"samples": work.samples, "trajs": list(seen), "metrics": metrics})
                if it == 1:
                    assert server.proc is None  # dead during the round; back for the next one
                    await asyncio.to_thread(server.start)
            return scorer.judge

    judge = asyncio.run(main())
    trainer.close()
    assert isinstance(judge.backend, ChatBackend)  # the OpenAI-compatible client did the judging

    def answered(r: dict[str, Any]) -> list[Any]:
        return [t for t in r["trajs"] if t.metadata.get("answer")]

    # (0) healthy: judged by the server, the limit reached and never passed
    healthy = answered(rounds[0])
    assert len(healthy) == 3 and all(t.metadata["judge"]["calls"][0]["text"] == "Verdict: SUCCESS" for t in healthy)
    assert all(t.metadata["judged_success"] and t.termination == "done" for t in healthy)
    assert judge.runner.max_in_flight == LIMIT

    # (1) killed: some answered episodes were judged before the kill, the others are judge_error with mask 0
    hit = answered(rounds[1])
    assert len(rounds[1]["trajs"]) == 4 and len(hit) == 3
    errors = [t for t in hit if t.termination == "judge_error"]
    judged = [t for t in hit if t.termination == "done"]
    assert len(errors) >= 1 and len(judged) >= 1 and len(errors) + len(judged) == 3
    for t in errors:
        v = t.metadata["judge"]
        assert v["error"] == "judge_error" and v["error_kind"] == "unavailable"
        assert t.metadata["termination_before_judge"] == "done" and t.metadata["judged_success"] is False
        assert all(m == 0 for turn in t.turns for m in turn.mask)
    for t in judged:
        assert t.metadata["judge"]["calls"][0]["text"] == "Verdict: SUCCESS"
        assert all(m == 1 for turn in t.turns for m in turn.mask)
    # nothing else lost: the unaffected episodes train, the masked ones are out of the batch and of the group's
    # statistics; the rule evaluator's outcome is still recorded on every episode
    samples = rounds[1]["samples"]
    trained = [t for t in rounds[1]["trajs"] if t.termination != "judge_error"]
    assert len(samples) == sum(len(t.turns) for t in trained)
    rewards = np.array([1.0 if t.metadata["judged_success"] else 0.0 for t in trained])
    expected = sorted(a for t, a in zip(trained, (rewards - rewards.mean()) / (rewards.std() + run.train.adv_eps))
                      for _ in t.turns)
    np.testing.assert_allclose(sorted(float(s.advantages[s.loss_mask > 0][0]) for s in samples), expected, atol=1e-5)
    assert {t.metadata["answer"]: t.metadata["success"] for t in hit} == {"34.99": True, "12.00": False,
                                                                         "I do not know": False}
    m = rounds[1]["metrics"]
    assert m["rollout/judge_errors"] == len(errors) and m["rollout/episodes"] == 4
    assert m["rollout/termination/judge_error"] == len(errors) / 4

    # (2) restarted: every answered episode judged by the model again
    back = answered(rounds[2])
    assert len(back) == 3 and all(t.metadata["judge"]["calls"][0]["text"] == "Verdict: SUCCESS" for t in back)
    assert rounds[2]["metrics"]["rollout/judge_errors"] == 0 and rounds[2]["samples"]
    assert judge.runner.max_in_flight == LIMIT
