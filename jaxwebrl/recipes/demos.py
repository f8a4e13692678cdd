"""Behaviour-cloning demonstrations from scripted solvers (as WebAgent-R1 used rule-based solvers for BC).

Two steps, because the tokenizer is trained on what the demonstrations show:
1. `collect_demonstrations` plays each (task, seed) in a real browser with a solver's plan, keeping the
   observations the agent would see and the action texts; only successful episodes are kept (the
   environment's own reward filters them, as NNetNav's ORM filters explorations).
2. `render_demonstrations` turns them into `Trajectory` records with the agent's own context strategy and
   prompt format, so BC trains on exactly the prompts RL will later sample from.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Callable, Sequence

from transformers import PreTrainedTokenizerBase

from jaxwebrl.agent.context import APPEND_ONLY, ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory, Turn

Solver = Callable[[str, str, Sequence[Any]], list[str]]  # (task name, goal, elements) -> action texts


@dataclasses.dataclass
class Demonstration:
    task_id: str
    seed: int
    goal: str
    steps: list[StepRecord]
    success: bool


def answer_text(action: str, prompt_format: str) -> str:
    """The response a policy in `prompt_format` writes for `action` (no reasoning: solvers have none)."""
    if prompt_format == "bid":
        return action
    if prompt_format == "webagent_r1":
        return f"<think></think><answer>{action}</answer>"
    return f"<think></think>\n```{action}```"


async def collect_demonstrations(
    pool: BrowserPool, env_config: EnvConfig, tasks: Sequence[Any], seeds: Sequence[int], solver: Solver,
    prompt_format: str = "bid", concurrency: int = 4, on_done: Callable[[], None] | None = None,
) -> list[Demonstration]:
    """Play every (task, seed) with the solver's plan; returns successful demonstrations only."""
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Any, seed: int) -> Demonstration | None:
        async with sem:
            env = await pool.new_env(env_config)
            try:
                obs = await env.reset(task, seed)
                name = task.task_id.split(".", 1)[-1]
                try:
                    plan = solver(name, obs.goal, obs.elements)
                except (LookupError, AssertionError, KeyError):
                    return None
                steps, feedback = [], None
                for action in plan:
                    rec = StepRecord(observation=obs, feedback=feedback, action=action,
                                     response_text=answer_text(action, prompt_format))
                    steps.append(rec)
                    res = await env.step(rec.response_text)
                    if res.format_error or res.termination_reason in ("env_error", "timeout"):
                        return None
                    obs, feedback = res.observation, res.feedback
                    if res.done:
                        break
                ev = await env.evaluate()
                return Demonstration(task.task_id, seed, steps[0].observation.goal, steps, bool(ev.success))
            finally:
                await env.close()
                if on_done is not None:
                    on_done()

    found = await asyncio.gather(*(one(t, s) for t in tasks for s in seeds))
    return [d for d in found if d is not None and d.success]


def demo_texts(demos: Sequence[Demonstration], agent: AgentConfig) -> list[str]:
    """Everything the policy will read or write, for training its tokenizer."""
    fmt = agent.prompt()
    texts = [fmt.system_prompt()]
    for d in demos:
        texts.append(f"Task: {d.goal}")
        for s in d.steps:
            texts += [s.observation.text, s.response_text, s.feedback or ""]
    return texts


def render_demonstrations(
    demos: Sequence[Demonstration], tokenizer: PreTrainedTokenizerBase, agent: AgentConfig
) -> list[Trajectory]:
    """BC trajectories: each step's prompt as the agent's context strategy renders it, the response as the
    solver's action text followed by the end-of-turn token."""
    renderer = PromptRenderer(tokenizer)
    fmt, build = agent.prompt(), get_strategy(agent.strategy)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = eos if eos is not None and eos >= 0 else tokenizer.eos_token_id
    out = []
    for d in demos:
        past: list[StepRecord] = []
        turns: list[Turn] = []
        pieces: list[list[int]] = []
        for step in d.steps:
            current = dataclasses.replace(step, response_ids=())
            rendered = renderer.render(build(ContextInputs(fmt, d.goal, past, current, agent.last_k)))
            pieces = rendered.pieces
            ids = tuple(tokenizer.encode(step.response_text, add_special_tokens=False)) + (eos,)
            turns.append(Turn(prompt_ids=list(rendered.ids), response_ids=list(ids), response_logprobs=None,
                              observation=step.observation.text, action=step.action))
            past.append(dataclasses.replace(step, response_ids=ids))
        if agent.strategy in APPEND_ONLY:
            for t, piece in zip(turns, pieces):
                t.history_ids = list(piece)
        out.append(Trajectory(task_id=d.task_id, turns=turns, reward=1.0, group_id=f"{d.task_id}/{d.seed}",
                              termination="done", metadata={"seed": d.seed, "goal": d.goal, "demo": True}))
    return out
