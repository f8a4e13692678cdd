"""The agent loop on real Chromium (MiniWoB++) with a real JaxEngine: token in, token out, masks,
context strategies and termination reasons."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent_fixtures import ENV, RecordingEngine, pool_and_engine, tiny_policy
from envs import get_suite
from jaxwebrl.agent import AgentConfig, Message, PromptRenderer, run_episode
from jaxwebrl.agent.context import COMPRESSED
from jaxwebrl.data.samples import build_samples


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return tiny_policy(tmp_path_factory.mktemp("policy"))


@pytest.fixture(scope="module")
def suite():
    s = get_suite("miniwob", tasks=["click-button", "click-link"]).start()
    yield s
    s.stop()


def _play(policy, suite, agent: AgentConfig, episodes: int = 1):
    cfg, params, tok = policy

    async def go():
        async with pool_and_engine(cfg, params, tok) as (pool, engine):
            rec = RecordingEngine(engine)
            task = suite.get_task(suite.task_ids("train")[0])
            results = []
            for i in range(episodes):
                env = await pool.new_env(ENV)
                try:
                    results.append(await run_episode(env, rec, tok, task, seed=i, cfg=agent, sample_seed=i + 1))
                finally:
                    await env.close()
            return results, rec.calls

    return asyncio.run(go())


def test_renderer_splices_response_ids_verbatim(policy):
    _, _, tok = policy
    r = PromptRenderer(tok)
    odd = tuple(tok.encode("click('1')", add_special_tokens=False))[::-1]  # ids no tokenizer would produce
    end = tok.convert_tokens_to_ids("<|im_end|>")
    msgs = [Message("system", "s"), Message("user", "u1"), Message("assistant", "?", odd + (end,)), Message("user", "u2")]
    out = r.render(msgs)
    start = len(out.pieces[0])
    assert out.ids[start:start + len(odd) + 1] == list(odd) + [end]
    # the template's own end-of-turn after the response is not duplicated
    assert out.ids[start + len(odd) + 1] != end
    assert out.ids == out.pieces[0] + list(odd) + [end] + out.pieces[1]


def test_compress_past_token_in_token_out_over_turns(policy, suite):
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=3, max_format_errors=10,
                        max_new_tokens=6, max_context_tokens=4096, temperature=1.0)
    (result,), calls = _play(policy, suite, agent)
    traj = result.trajectory
    assert len(traj.turns) == 3 and traj.termination in ("max_steps", "done")
    for turn, (prompt, gen) in zip(traj.turns, calls):
        assert turn.prompt_ids == prompt
        assert turn.response_ids == gen.token_ids  # exactly the sampled ids
        assert turn.response_logprobs == gen.logprobs
    # Compression: the last prompt shows earlier observations as the placeholder, the first did not.
    _, _, tok = policy
    last_prompt = tok.decode(traj.turns[-1].prompt_ids)
    assert last_prompt.count(COMPRESSED) == 2
    assert COMPRESSED not in tok.decode(traj.turns[0].prompt_ids)
    # Trajectory-level sample = last (compressed) context + last response; mask covers exactly responses.
    (sample,) = build_samples([traj], per="trajectory", norm="webagent_r1")
    np.testing.assert_array_equal(sample.tokens, traj.turns[-1].prompt_ids + traj.turns[-1].response_ids)
    trained = sample.tokens[sample.loss_mask == 1].tolist()
    assert trained == sum((t.response_ids for t in traj.turns), [])
    # every response sits in the sequence where the mask is 1, in order, on the compressed context
    pos = 0
    for t in traj.turns:
        hist = len(t.history_ids)
        assert sample.loss_mask[pos:pos + hist].sum() == 0
        pos += hist
        assert sample.tokens[pos:pos + len(t.response_ids)].tolist() == t.response_ids
        assert sample.loss_mask[pos:pos + len(t.response_ids)].all()
        pos += len(t.response_ids)
    assert pos == len(sample.tokens)
    # Per-turn samples use the exact rollout contexts instead.
    per_turn = build_samples([traj], per="turn", norm="per_turn")
    for s, t in zip(per_turn, traj.turns):
        assert s.tokens.tolist() == t.prompt_ids + t.response_ids


@pytest.mark.parametrize("strategy", ["current_plus_history", "memory", "last_k_screenshots"])
def test_other_strategies_record_exact_contexts(policy, suite, strategy):
    agent = AgentConfig(strategy=strategy, prompt_format={"memory": "webgym", "current_plus_history": "browseragent",
                                                          "last_k_screenshots": "openwebrl"}[strategy],
                        max_steps=2, max_format_errors=10, max_new_tokens=4, max_context_tokens=4096)
    (result,), calls = _play(policy, suite, agent)
    traj = result.trajectory
    assert len(traj.turns) == 2
    for turn, (prompt, gen) in zip(traj.turns, calls):
        assert turn.prompt_ids == prompt and turn.response_ids == gen.token_ids
    _, _, tok = policy
    second = tok.decode(traj.turns[1].prompt_ids)
    if strategy == "current_plus_history":
        assert "Previous actions:\n1." in second
    elif strategy == "memory":
        assert "Memory:" in second and traj.turns[0].response_ids != [] and second.count("Task:") == 1
    else:
        assert second.count("Task:") == 1  # one growing conversation


def test_termination_reasons(policy, suite):
    # format_errors: an untrained model never writes a valid <answer>click('..')</answer> three times in a row
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=10, max_format_errors=2,
                        max_new_tokens=4, max_context_tokens=4096)
    (r,), _ = _play(policy, suite, agent)
    assert r.trajectory.termination == "format_errors" and len(r.trajectory.turns) == 2
    # context_overflow: the first prompt alone exceeds the budget
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=3, max_context_tokens=64,
                        max_new_tokens=4)
    (r,), _ = _play(policy, suite, agent)
    assert r.trajectory.termination == "context_overflow" and r.trajectory.turns == []


def test_configured_system_prompt_replaces_the_formats(policy, suite):
    """AgentConfig.system_prompt reaches every prompt the engine sees and the BC demonstrations alike."""
    from jaxwebrl.agent.context import StepRecord
    from jaxwebrl.browser.observation import Observation
    from jaxwebrl.demos.collect import Demonstration, render_demonstrations

    short = "Answer with one action."
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=2, max_format_errors=10,
                        max_new_tokens=4, max_context_tokens=4096, system_prompt=short)
    (result,), calls = _play(policy, suite, agent)
    _, _, tok = policy
    for prompt, _ in calls:
        text = tok.decode(prompt)
        assert short in text and "Available actions" not in text
    assert "Available actions" in AgentConfig(prompt_format="bid").prompt().system_prompt()
    demo = Demonstration("miniwob.click-button", 0, "Click on the OK button.",
                         [StepRecord(Observation(goal="Click", text="[3] button 'OK'"), None, "click('3')", action="click('3')")],
                         True)
    (traj,) = render_demonstrations([demo], tok, agent)
    demo_text = tok.decode(traj.turns[0].prompt_ids)
    assert short in demo_text and "Available actions" not in demo_text


class ScriptedWaitEngine:
    """A scripted policy through the Engine protocol (the test needs a predictable one): it always answers
    `noop(wait_ms=...)`, tokenised by the real tokenizer, with logprobs 0."""

    name = "scripted"

    def __init__(self, tok, text: str) -> None:
        self.ids = tok.encode(text, add_special_tokens=False)
        self.calls = 0

    async def generate(self, prompt_ids, params, *, session_id=None):
        from jaxwebrl.engines.base import Generation

        self.calls += 1
        return Generation(list(self.ids), [0.0] * len(self.ids), "stop", len(prompt_ids), 0, 0)

    async def update_weights(self, weights, version: int) -> None:
        pass

    async def health(self):
        return True

    async def close(self) -> None:
        pass


def test_agent_timeout_is_the_policys_outcome_not_an_env_error(policy, suite):
    """Waits the policy asks for that do not fit in the step time end the episode `agent_timeout`: the
    episode is evaluated and its turns keep loss mask 1 (an env_error would mask them all)."""
    import dataclasses

    from agent_fixtures import ENV
    from jaxwebrl.browser import BrowserPool, PoolConfig

    cfg, params, tok = policy
    # waits may use the step's 14 s less the 4.7 s kept for the browser (min(14 / 3, 2 x action_timeout_s)):
    # the longest wait the grammar allows (10 s) is refused at once, not raced against the machine's load
    # (a 4 s step limit, as before, leaves a loaded machine little room for the 500 ms waits' steps)
    env_cfg = dataclasses.replace(ENV, step_timeout_s=14.0, action_timeout_s=3.0)
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=5, max_format_errors=10,
                        max_new_tokens=16, max_context_tokens=4096)

    async def go():
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=2), env_cfg) as pool:
            task = suite.get_task(suite.task_ids("train")[0])
            out = []
            for wait_ms in (500, 10000):  # fits; does not fit in 14 s minus the 4.7 s kept for the browser
                engine = ScriptedWaitEngine(tok, f"noop(wait_ms={wait_ms})")
                env = await pool.new_env(env_cfg)
                try:
                    out.append((await run_episode(env, engine, tok, task, seed=0, cfg=agent), engine.calls))
                finally:
                    await env.close()
            return out

    (short, n_short), (long, n_long) = asyncio.run(go())
    assert short.trajectory.termination == "max_steps" and n_short == 5
    traj = long.trajectory
    assert traj.termination == "agent_timeout" and n_long == 1 and len(traj.turns) == 1
    assert "raw_reward" in traj.metadata  # evaluated like any outcome of the policy
    samples = build_samples([traj])
    assert sum(int(s.loss_mask.sum()) for s in samples) == len(traj.turns[0].response_ids) > 0
