"""Shared pieces of the judge tests: a tiny tokenizer, trajectories, and a scripted judge model.

`ScriptedEngine` is a scripted *judge model* that goes through the real `Engine` protocol (token ids in,
token ids out, the same `EngineBackend` and `CallRunner` as a real engine): it decodes the prompt ids it gets
and answers by a rule. Tests use it where they check a paper's rule logic, which needs predictable answers;
the real models (JaxEngine, sglang-jax) are exercised in test_judges.py / test_judges_sglang.py.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.engines.base import Generation, SamplingParams
from jaxwebrl.models.tiny import SAMPLE_TEXT
from jaxwebrl.models.tokenizer import train_tokenizer

CORPUS = [SAMPLE_TEXT, "Verdict: SUCCESS NOT SUCCESS Reward: 4 Instruction: State change: yes no Task: fact rubric "
          "screenshot history feedback instruction final answer evaluator agent browser step page"] * 4


def tiny_tokenizer() -> Any:
    return train_tokenizer(CORPUS, vocab_size=512)


def chatml_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Independent reference: ChatML written out by hand, then encoded (no chat-template engine involved)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"
    return tokenizer.encode(text, add_special_tokens=False)


def tool_call(name: str, **arguments: Any) -> str:
    import json

    return f"<think>reasoning</think><tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def trajectory(actions: Sequence[str], *, termination: str = "done", goal: str = "What is the price of the lamp?",
               format_ok: Sequence[bool] | None = None, task_id: str = "shop_001", **metadata: Any) -> Trajectory:
    ok = list(format_ok) if format_ok is not None else [True] * len(actions)
    turns = [Turn(prompt_ids=[1, 2], response_ids=[3, 4, 5], observation=f"page {i}: [12] button \"Submit\"",
                  action=a, format_ok=ok[i]) for i, a in enumerate(actions)]
    return Trajectory(task_id=task_id, turns=turns, termination=termination, metadata={"goal": goal, **metadata})


Script = Callable[[str], "str | BaseException"]


class ScriptedEngine:
    """See the module doc. `answer(prompt_text)` returns the reply text, or an exception to raise."""

    def __init__(self, tokenizer: Any, answer: Script, *, delay: float = 0.0, name: str = "scripted") -> None:
        self.tokenizer = tokenizer
        self.answer = answer
        self.delay = delay
        self.name = name
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.cancelled = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        self.prompts.append(list(prompt_ids))
        self.params.append(params)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            reply = self.answer(self.tokenizer.decode(list(prompt_ids)))
            if isinstance(reply, BaseException):
                raise reply
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            return Generation(ids, [0.0] * len(ids), "stop", len(prompt_ids), 0, 0, engine=self.name)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def update_weights(self, weights: Any, version: int) -> None:
        raise TypeError("a scripted judge model has no weights to update")

    async def health(self) -> dict[str, Any]:
        return {"ok": True}

    async def close(self) -> None:
        return None


# ---- a real tiny judge model with a known answer, and a scripted policy for the online wiring tests ------


def make_verdict_checkpoint(path: Any, answer: str = "Verdict: SUCCESS", **config: Any) -> Any:
    """A HF checkpoint of a tiny Qwen3 whose greedy answer to any chat prompt is `answer` then EOS.

    Built by hand, not trained: every layer's output projections are zero, so the last hidden state is the
    current token's embedding, and the LM head maps the generation prompt's last token to the answer's first
    token, each answer token to the next, the last to EOS (a bigram model). A real model on every engine (the
    JaxEngine, sglang-jax); its verdict does not depend on the episode, which the tests use: it says SUCCESS
    where the rule evaluator says the answer is wrong. Returns the tokenizer."""
    import numpy as np

    from jaxwebrl.judges.backends import render_prompt_ids
    from jaxwebrl.models.hf_io import export_hf
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
    from jaxwebrl.judges.backends import ChatMessage
    from jaxwebrl.models import load_tokenizer

    cfg, params = make_tiny_checkpoint(path, tiny_config("qwen3", **config), seed=0, std=0.3, corpus=CORPUS)
    tok = load_tokenizer(path)
    last = render_prompt_ids(tok, [ChatMessage("system", "s"), ChatMessage("user", "u")])[-1]
    chain = [last] + tok.encode(answer, add_special_tokens=False) + [cfg.eos_token_id]
    if len(set(chain[:-1])) != len(chain) - 1:
        raise ValueError(f"answer {answer!r} repeats a token (or the prompt's last one): a bigram model cannot say it")
    p = {k: np.asarray(v) for k, v in params.items() if k != "layers"}
    layers = {k: np.asarray(v) for k, v in params["layers"].items()}
    layers["wo"] = np.zeros_like(layers["wo"])
    layers["w_down"] = np.zeros_like(layers["w_down"])
    p["final_norm"] = np.ones_like(p["final_norm"])
    embed = p["embed"]
    head = np.zeros_like(p["lm_head"])
    for cur, nxt in zip(chain[:-1], chain[1:]):
        head[:, nxt] += 2.0 * embed[cur] / np.linalg.norm(embed[cur])
    p["lm_head"], p["layers"] = head, layers
    export_hf(cfg, p, path, tokenizer_dir=path)
    return tok


class ScriptedPolicy:
    """A scripted *policy* through the Engine protocol (the tests need predictable episodes): the n-th new
    episode (session) plays `roles[n % len(roles)]`, a list of responses, one per step (the last repeats).
    Records when each call was made (`calls`: (time.time(), session, step))."""

    def __init__(self, tokenizer: Any, roles: Sequence[Sequence[str]], version: Callable[[], int] = lambda: 0) -> None:
        self.tokenizer, self.roles, self.version = tokenizer, [list(r) for r in roles], version
        self.name = "scripted-policy"
        self.sessions: dict[str, list[int]] = {}
        self.calls: list[tuple[float, str, int]] = []
        for role in self.roles:
            for text in role:
                ids = tokenizer.encode(text, add_special_tokens=False)
                if tokenizer.decode(ids, skip_special_tokens=True) != text:
                    raise ValueError(f"the policy tokenizer does not round-trip {text!r}")

    def role_of(self, session: str) -> int:
        return self.sessions[session][0]

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session_id: str | None = None) -> Generation:
        import time

        key = session_id or ""
        state = self.sessions.setdefault(key, [len(self.sessions) % len(self.roles), 0])
        role, step = self.roles[state[0]], state[1]
        state[1] += 1
        self.calls.append((time.time(), key, step))
        ids = self.tokenizer.encode(role[min(step, len(role) - 1)], add_special_tokens=False)
        ids.append(self.tokenizer.eos_token_id)
        v = self.version()
        return Generation(ids, [-0.5] * len(ids), "stop", len(prompt_ids), v, v, engine=self.name)

    async def update_weights(self, weights: Any, version: int) -> None:
        return None

    async def health(self) -> dict[str, Any]:
        return {"ok": True}

    async def close(self) -> None:
        return None


# The scripted policy's roles on local_sites shop_001 ("What is the price of the Aurora Desk Lamp?", the rule
# evaluator wants "34.99"): right answer, two wrong answers (the rule says failure; a SUCCESS-saying judge says
# success), and one episode that scrolls until max_steps (no answer: the OpenWebRL judge skips it, no call).
ROLES = (
    [tool_call("done", answer="34.99")],
    [tool_call("done", answer="12.00")],
    [tool_call("done", answer="I do not know")],
    [tool_call("scroll", direction="down")],
)


def judged_run(workdir: Any, policy_dir: Any, source: str = "judge", **judge: Any) -> Any:
    """The OpenWebRL config (its recipe, prompt format, action space, loss) on local_sites shop_001, shrunk to a
    tiny policy and budget, with `reward.source=source` and `reward.judge.<k>=v` for `judge`."""
    import importlib.util
    from pathlib import Path

    from jaxwebrl.config import parse_config, validate_config

    spec = importlib.util.spec_from_file_location("grpo_openwebrl", Path(__file__).resolve().parents[1] / "configs" / "grpo_openwebrl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.workdir, c.multihost = str(workdir), False
    c.model.source, c.model.path = "hf", str(policy_dir)
    c.model.dtype, c.model.param_dtype, c.model.remat = "float32", "float32", False
    c.tasks.suite, c.tasks.train = "local_sites", "shop_001"
    c.env.text_budget_chars, c.env.num_browsers, c.env.contexts_per_browser = 600, 1, 4
    c.agent.max_steps, c.agent.max_new_tokens, c.agent.max_context_tokens = 3, 64, 2048
    c.agent.system_prompt = "You are a web agent. Think, then call tools."
    c.rollout.horizon_schedule = ""
    c.rollout.group_size, c.rollout.groups_per_iteration, c.rollout.max_concurrent_groups = 4, 1, 1
    c.rollout.max_groups_per_iteration = 2
    c.engine.type, c.engine.launch, c.engine.num_slots, c.engine.max_len = "jax", False, 2, 2048
    c.train.seq_len, c.train.micro_batch, c.train.accum_steps, c.train.logits_chunk, c.train.epochs = 2048, 2, 1, 0, 1
    c.rl.iterations, c.rl.eval_every = 2, 0
    c.log.progress = False
    c.reward.source = source
    for k, v in judge.items():
        c.reward.judge[k] = v
    run = parse_config(c)
    validate_config(run, 1)
    return run


def sglang_python_or_skip() -> str:
    """The sglang-jax venv's python (scripts/setup_sglang_env.sh makes it; `./quickstart test` runs that).
    Without it the calling module is skipped, saying which command prepares it."""
    from jaxwebrl.engines.sglang_server import default_sglang_jax_python

    python = default_sglang_jax_python()
    if python is None or not Path(python).exists():
        pytest.skip("no sglang-jax venv (.venv-sglang or $JAXWEBRL_SGLANG_PYTHON): run scripts/setup_sglang_env.sh",
                    allow_module_level=True)
    probe = subprocess.run([python, "-c", "import sgl_jax"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import sgl_jax: run scripts/setup_sglang_env.sh", allow_module_level=True)
    return python
