"""Shared pieces of the judge tests: a tiny tokenizer, trajectories, and a scripted judge model.

`ScriptedEngine` is a scripted *judge model* that goes through the real `Engine` protocol (token ids in,
token ids out, the same `EngineBackend` and `CallRunner` as a real engine): it decodes the prompt ids it gets
and answers by a rule. Tests use it where they check a paper's rule logic, which needs predictable answers;
the real models (JaxEngine, sglang-jax) are exercised in test_judges.py / test_judges_sglang.py.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Sequence

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
