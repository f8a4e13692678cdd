"""The judge wired into online RL (reward.source = judge | rule_or_judge), on CPU with real parts: real
Chromium on the local shop site, the OnlineRL loop and Trainer of the OpenWebRL recipe, and a real tiny judge
model on the in-process JaxEngine (`make_verdict_checkpoint`: it always answers "Verdict: SUCCESS", so it
disagrees with the rule evaluator on wrong answers). The policy is scripted through the Engine protocol
(`ScriptedPolicy`), because the test needs predictable episodes: per group one right answer, two wrong
answers and one episode without an answer. The judge server variant (OpenAI client on sglang-jax, killed
mid-run) is in test_judges_online_sglang.py.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jaxwebrl.config import ConfigError, default_config, parse_config
from judge_fixtures import ROLES, ScriptedPolicy, judged_run, make_verdict_checkpoint, trajectory, tool_call

VERDICT_MODEL = dict(head_dim=128, num_heads=2, num_kv_heads=1, max_position_embeddings=4096)
JUDGE_PROMPT = "You judge web agents. End with Verdict: SUCCESS or Verdict: NOT SUCCESS."


def _set(c: Any, dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for p in path:
        c = c[p]
    c[last] = value


@pytest.mark.parametrize("changes, message", [
    ({"reward.source": "model"}, r"config.reward.source: 'model' is not allowed; use one of \('rule', 'raw', 'judge', 'rule_or_judge'\)"),
    ({"reward.source": "judge"}, r"config.reward.judge.url: is empty but engine='openai' calls a server .*; set the judge server's address"),
    ({"reward.source": "rule_or_judge", "reward.judge.engine": "jax"}, r"config.reward.judge.model_path: is empty .*; point it at the judge's HuggingFace checkpoint"),
    ({"reward.source": "judge", "reward.judge.url": "http://x", "reward.judge.kind": "nnetnav_labeler"}, r"config.reward.judge.kind: 'nnetnav_labeler' writes instructions.*; use one of"),
    ({"reward.judge.engine": "vllm"}, r"config.reward.judge.engine: 'vllm' is not allowed; use one of \('jax', 'sglang', 'openai'\)"),
    ({"reward.judge.concurrency": 0}, r"config.reward.judge.concurrency: 0 must be >= 1"),
    ({"reward.judge.timeout_s": 0.0}, r"config.reward.judge.timeout_s: 0.0 must be > 0"),
    ({"reward.judge.retries": -1}, r"config.reward.judge.retries: -1 must be >= 0"),
    ({"reward.judge.action_space": "vision"}, r"config.reward.judge.action_space: 'vision' is not allowed"),
    ({"reward.judge.prompt": "x"}, r"config.reward.judge.prompt: is not a known field; did you mean config.reward.judge"),
    ({"recipe": "webagent_r1", "reward.source": "judge", "reward.judge.url": "http://x"},
     r"config.reward.source: 'judge' judges episodes as online rollouts end, but data.kind='sft'"),
])
def test_reward_config_errors_name_the_field_and_the_fix(changes: dict[str, Any], message: str) -> None:
    c = default_config()
    for k, v in changes.items():
        _set(c, k, v)
    with pytest.raises(ConfigError, match=message):
        parse_config(c)


def test_reward_config_rule_raw_and_judge_parse() -> None:
    c = default_config()
    c.recipe, c.data.kind = "openwebrl", "online"
    assert parse_config(c).reward.source == "rule" and not parse_config(c).reward.uses_judge
    c.reward.source, c.reward.judge.url, c.reward.judge.urls = "judge", "http://127.0.0.1:30000", "http://a,http://b"
    judged = parse_config(c).reward
    assert judged.uses_judge and judged.judge.url_list == ["http://a", "http://b"]
    c.recipe, c.reward.source = "webagent_r1", "raw"
    assert parse_config(c).reward.source == "raw"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

    policy = tmp_path_factory.mktemp("policy")
    make_tiny_checkpoint(policy, tiny_config("qwen3", max_position_embeddings=4096))
    judge = tmp_path_factory.mktemp("verdict")
    make_verdict_checkpoint(judge, **VERDICT_MODEL)
    return {"policy": policy, "judge": judge}


def group_norm(rewards: list[float], eps: float) -> list[float]:
    """GRPO's advantage, written out: (r - mean) / (population std + eps)."""
    r = np.asarray(rewards, np.float64)
    return list((r - r.mean()) / (r.std() + eps))


async def one_round(run: Any, it: int = 0) -> tuple[Any, Any, list[Any], Any, ScriptedPolicy, dict[str, float]]:
    """One OnlineRL iteration with the scripted policy; returns (rl, round, judged trajectories, ...)."""
    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.train.trainer import Trainer

    trainer = Trainer(run, total_steps=4)
    seen: list[Any] = []
    async with OnlineRL(run, trainer) as rl:
        policy = ScriptedPolicy(load_tokenizer(trainer.tokenizer_dir), ROLES, version=lambda: rl.version)
        rl.collector.engine = policy  # the scripted policy plays; everything else is the run's own
        scorer = rl.collector.scorer

        async def observed(traj: Any) -> None:  # the run's scorer, watched: which trajectories it scored
            await scorer(traj)
            seen.append(traj)

        rl.collector.scorer = observed
        work = await rl.next_round(it)
        metrics = dict(work.metrics)
        metrics.update({f"train/{k}": v for k, v in trainer.train_on_samples(work.samples).items()})
        await rl.after_update(it, trainer, metrics)
        judge = scorer.judge
    trainer.close()
    return scorer, work, seen, judge, policy, metrics


def test_judged_rewards_reach_the_loss(ckpts: dict[str, Path], tmp_path: Path) -> None:
    """reward.source='judge' with the in-process JaxEngine judge: every episode is judged as it ends (before its
    group's slowest sibling ended), under the limit of 2, and the advantages in the trained batch are the
    group-normalised judged rewards (+1 for each judged SUCCESS, 0 without an answer), not the rule's."""
    run = judged_run(tmp_path, ckpts["policy"], kind="openwebrl", engine="jax", model_path=str(ckpts["judge"]),
                     jax_max_len=4096, jax_num_slots=2, max_new_tokens=8, concurrency=2, queue_concurrency=2,
                     retries=0, system_prompt=JUDGE_PROMPT)
    scorer, work, seen, judge, policy, metrics = asyncio.run(one_round(run))

    # the judge ran: one model call per answered episode, none for the episode without an answer (paper rule)
    assert len(seen) >= 4 and judge.runner.calls >= 3
    answered = [t for t in seen if t.metadata.get("answer")]
    unanswered = [t for t in seen if not t.metadata.get("answer")]
    assert len(answered) == judge.runner.calls and len(unanswered) >= 1
    for t in answered:
        v = t.metadata["judge"]
        assert v["label"] == "success" and v["calls"][0]["text"] == "Verdict: SUCCESS" and v["error"] is None
        assert t.metadata["judged_success"] is True and t.termination == "done"
    for t in unanswered:
        assert t.metadata["judge"]["label"] == "skipped" and not t.metadata["judge"]["calls"]
        assert t.termination == "max_steps" and t.metadata["judged_success"] is False
    # the judge disagrees with the rule on the wrong answers
    rule_success = {t.metadata["answer"]: t.metadata["success"] for t in answered}
    assert rule_success == {"34.99": True, "12.00": False, "I do not know": False}

    # judged as each episode ended, while the group's scrolling episode still played (no barrier)
    for t in answered:
        sibling = next(u for u in unanswered if u.group_id == t.group_id)
        last_step_of_sibling = max(when for when, s, _ in policy.calls if s == sibling.metadata["episode_id"])
        assert t.metadata["judge"]["started_at"] < last_step_of_sibling
    assert scorer.max_in_flight == 2 and judge.runner.max_in_flight <= 2  # 3 episodes ended together; limit 2

    # the trained batch: per-turn samples whose advantages are the group-normalised judged rewards
    samples = work.samples
    assert samples and metrics["train/samples"] == len(samples) and math.isfinite(metrics["train/loss"])
    eps = run.train.adv_eps
    checked = 0
    for gid in {s.group_id for s in samples}:
        group = [t for t in seen if t.group_id == gid]
        assert len(group) == 4
        judged = [1.0 if t.metadata["judge"]["label"] == "success" else 0.0 for t in group]
        rule = [1.0 if t.metadata["success"] and t.termination == "done" else 0.0 for t in group]
        expected = sorted(a for t, a in zip(group, group_norm(judged, eps)) for _ in range(len(t.turns)))
        by_rule = sorted(a for t, a in zip(group, group_norm(rule, eps)) for _ in range(len(t.turns)))
        trained = sorted(float(s.advantages[s.loss_mask > 0][0]) for s in samples if s.group_id == gid)
        assert all(np.all(s.advantages[s.loss_mask > 0] == s.advantages[s.loss_mask > 0][0])
                   for s in samples if s.group_id == gid)
        np.testing.assert_allclose(trained, expected, rtol=1e-5, atol=1e-6)
        assert not np.allclose(trained, by_rule, atol=1e-3)
        checked += 1
    assert checked >= 1
    assert metrics["rollout/judged"] >= 4 and metrics["rollout/judge_calls"] == judge.runner.calls
    assert metrics["rollout/judge_errors"] == 0 and metrics["time/judge_s"] > 0


def test_rule_or_judge_judges_only_tasks_without_a_rule_evaluator(ckpts: dict[str, Path]) -> None:
    """The scorer of reward.source='rule_or_judge' sends only the episode whose task has no rule evaluator to the
    (real, in-process) judge; a masked episode (crashed browser) is not sent either."""
    from jaxwebrl.judges import JudgeConfig, make_scorer
    from jaxwebrl.recipes.papers import get_recipe
    from jaxwebrl.recipes.registry import assign_rewards

    cfg = JudgeConfig(kind="openwebrl", engine="jax", model_path=str(ckpts["judge"]), jax_max_len=1024,
                      jax_num_slots=2, max_new_tokens=8, retries=0, system_prompt=JUDGE_PROMPT)
    scorer = make_scorer("rule_or_judge", cfg)
    assert make_scorer("rule", cfg) is None and make_scorer("raw", cfg) is None
    open_web = trajectory([tool_call("done", answer="12.00")], rule_evaluator=False, success=False)
    with_rule = trajectory([tool_call("done", answer="12.00")], success=False)
    crashed = trajectory([tool_call("done", answer="12.00")], rule_evaluator=False, termination="env_error")
    for turn in crashed.turns:
        turn.response_mask = [0] * len(turn.response_ids)

    async def main() -> None:
        try:
            for t in (open_web, with_rule, crashed):
                await scorer(t)
        finally:
            await scorer.close()

    asyncio.run(main())
    assert scorer.judge.runner.calls == 1
    assert open_web.metadata["judge"]["calls"][0]["text"] == "Verdict: SUCCESS"
    assert "judge" not in with_rule.metadata and "judge" not in crashed.metadata
    assign_rewards(get_recipe("openwebrl"), [open_web, with_rule, crashed], "rule_or_judge")
    assert [open_web.reward, with_rule.reward, crashed.reward] == [1.0, 0.0, 0.0]
    m = scorer.take_metrics()
    assert (m["rollout/judged"], m["rollout/judge_calls"], m["rollout/rule_scored"]) == (1.0, 1.0, 1.0)
