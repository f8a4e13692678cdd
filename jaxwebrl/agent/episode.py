"""One episode: reset, then [render prompt -> engine.generate -> parse -> execute -> observe] until it ends.

The result is a `Trajectory` whose response ids and logprobs are exactly the engine's. Every way an episode
can end is a termination reason, never an exception: done, max_steps, context_overflow, format_errors (N
unparsable responses in a row), env_error (browser crashed or hung: all turns get loss mask 0), timeout,
agent_timeout (the policy's own waits ran past the step or episode time: evaluated, rewarded and trained on
like any other outcome of the policy).

Besides the turns, the trajectory's metadata carries what a judge reads (`jaxwebrl.judges.JudgeInput`): the
goal, the final answer (`done(answer)` / `stop [answer]`), the environment's feedback after each turn, the
final observation's text, and whether the task has a rule evaluator (`rule_evaluator`: a task may set
`has_rule_evaluator = False`, e.g. an open-web task; `reward.source = rule_or_judge` judges those).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

from transformers import PreTrainedTokenizerBase

from jaxwebrl.agent.context import APPEND_ONLY, ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.limits import LockstepBarrier, OperationLimits
from jaxwebrl.agent.prompts import PromptFormat, extract_tag, get_format
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.env import BrowserEnv, EnvError
from jaxwebrl.browser.observation import observation_digest
from jaxwebrl.browser.task import Task
from jaxwebrl.data.records import Trajectory, Turn, TurnImage
from jaxwebrl.engines.base import Engine, SamplingParams
from jaxwebrl.viewer.capture import TURN_INFO_KEY, turn_info


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Per-episode agent settings; recipes set their paper's values."""

    strategy: str = "compress_past"
    prompt_format: str = "webagent_r1"
    max_steps: int = 15
    max_context_tokens: int = 16384
    max_new_tokens: int = 1024
    max_format_errors: int = 3
    last_k: int = 1
    # '' = the format's own system prompt (action list + output format). A policy trained from scratch on
    # this prompt alone (the local run) learns as well from a short one, and every token of it costs
    # compute at every turn.
    system_prompt: str = ""
    temperature: float = 1.0
    top_p: float = 1.0
    greedy: bool = False
    generate_timeout_s: float = 300.0
    episode_timeout_s: float = 600.0
    # keep each turn's screenshot (when the env takes them) in metadata["turn_info"] for the trajectory
    # viewer: one PNG per turn in memory while a batch is held
    viewer_screenshots: bool = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        get_strategy(self.strategy)
        get_format(self.prompt_format)
        if self.max_steps < 1 or self.max_context_tokens < 16 or self.max_new_tokens < 1:
            raise ValueError("AgentConfig: max_steps, max_context_tokens and max_new_tokens must be positive")

    def prompt(self) -> PromptFormat:
        """The prompt format, with the configured system prompt."""
        fmt = get_format(self.prompt_format)
        return dataclasses.replace(fmt, system=self.system_prompt) if self.system_prompt else fmt

    def sampling(self, seed: int | None, budget: int) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, greedy=self.greedy,
                              max_new_tokens=max(1, min(self.max_new_tokens, budget)), seed=seed)


@dataclasses.dataclass
class EpisodeResult:
    trajectory: Trajectory
    success: bool
    timings: dict[str, float]


class _Timer:
    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def add(self, key: str, seconds: float) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + seconds


async def _timed(timer: _Timer, key: str, limits: OperationLimits, op: str, coro: Any) -> Any:
    """Run `coro` under the concurrency limit of `op`, adding time spent waiting and working to `timer`."""
    t0 = time.perf_counter()
    async with limits.slot(op):
        t1 = time.perf_counter()
        timer.add("wait", t1 - t0)
        try:
            return await coro
        finally:
            timer.add(key, time.perf_counter() - t1)


async def run_episode(
    env: BrowserEnv,
    engine: Engine,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    seed: int,
    cfg: AgentConfig,
    *,
    renderer: PromptRenderer | None = None,
    limits: OperationLimits | None = None,
    group_id: str = "",
    sample_seed: int | None = None,
    policy_version: int = 0,
    barrier: LockstepBarrier | None = None,
    episode_id: str | None = None,
) -> EpisodeResult:
    """Play one episode of `task` (instance `seed`) in `env` with `engine`; see the module doc.

    `sample_seed` seeds turn t's engine request with `sample_seed * 1000 + t`; `episode_id` names the episode
    (its engine session and metadata; default a random one). `barrier` is only for the lock-step benchmark
    baseline: each turn waits there for every live episode.
    """
    try:
        return await _run_episode(env, engine, tokenizer, task, seed, cfg, renderer, limits, group_id, sample_seed,
                                  policy_version, barrier, episode_id)
    finally:
        if barrier is not None:
            barrier.leave()


async def _run_episode(
    env: BrowserEnv, engine: Engine, tokenizer: PreTrainedTokenizerBase, task: Task, seed: int, cfg: AgentConfig,
    renderer: PromptRenderer | None, limits: OperationLimits | None, group_id: str, sample_seed: int | None,
    policy_version: int, barrier: LockstepBarrier | None, episode_id: str | None,
) -> EpisodeResult:
    renderer = renderer or PromptRenderer(tokenizer)
    limits = limits or OperationLimits()
    fmt, build = cfg.prompt(), get_strategy(cfg.strategy)
    timer, episode_id = _Timer(), episode_id or uuid.uuid4().hex[:12]
    timeouts: dict[str, int] = {}  # the agent's own safety limits that fired (generate, episode)
    start = time.perf_counter()
    turns: list[Turn] = []
    past: list[StepRecord] = []
    # the weights version of every turn's first token (the oldest in it) and of its last
    termination, format_errors_in_row, versions = "max_steps", 0, []
    last_pieces: list[list[int]] = []
    turn_infos: list[dict[str, Any]] = []  # per turn, for the trajectory viewer
    feedback: list[str] = []  # per turn, the environment's feedback on the action (judges read it)
    final_observation = ""  # the page after the last action (judges read it)

    def finish(reason: str, success: bool = False, reward: float = 0.0, info: dict[str, Any] | None = None) -> EpisodeResult:
        if reason == "env_error":  # failures are data: keep the record, train on none of it
            for t in turns:
                t.response_mask = [0] * len(t.response_ids)
        if cfg.strategy in APPEND_ONLY and turns:  # trajectory-level sequence = the last (compressed) context
            for t, piece in zip(turns, last_pieces):
                t.history_ids = list(piece)
        timer.add("episode", time.perf_counter() - start)
        fired = dict(env.timeout_counts()) if hasattr(env, "timeout_counts") else {}
        for kind, n in timeouts.items():
            fired[kind] = fired.get(kind, 0) + n
        traj = Trajectory(
            task_id=getattr(task, "task_id", str(task)), turns=turns, reward=reward, group_id=group_id or episode_id,
            # the oldest weights that produced a token; an episode without a turn keeps the version it began on
            termination=reason, policy_version=min((t.policy_version for t in turns), default=policy_version),
            metadata={"seed": seed, "goal": getattr(env, "goal", ""), "success": success, "steps": len(turns),
                      "episode_id": episode_id, "policy_versions": sorted(set(versions) or {policy_version}),
                      TURN_INFO_KEY: turn_infos,
                      "answer": getattr(env, "answer", None), "feedback": list(feedback),
                      "final_observation": final_observation,
                      "rule_evaluator": bool(getattr(task, "has_rule_evaluator", True)),
                      "timeouts": fired, **(info or {})},
        )
        return EpisodeResult(traj, success, dict(timer.totals))

    try:
        obs = await _timed(timer, "browser", limits, "navigate", env.reset(task, seed))
    except (EnvError, asyncio.TimeoutError) as exc:
        return finish("env_error", info={"error": f"reset failed: {exc}"})
    current = StepRecord(observation=obs, feedback=None)
    final_observation = obs.text
    goal = obs.goal
    for step in range(cfg.max_steps):
        if barrier is not None:
            t0 = time.perf_counter()
            await barrier.wait()
            timer.add("wait", time.perf_counter() - t0)
        if time.perf_counter() - start > cfg.episode_timeout_s:
            timeouts["episode"] = timeouts.get("episode", 0) + 1
            termination = "timeout"
            break
        messages = build(ContextInputs(fmt, goal, past, current, cfg.last_k, images=renderer.processor is not None))
        rendered = renderer.render(messages)
        last_pieces = rendered.pieces
        budget = cfg.max_context_tokens - len(rendered.ids)
        if budget < 1:
            termination = "context_overflow"
            break
        seed_t = None if sample_seed is None else sample_seed * 1000 + step
        extra = {"images": rendered.images} if rendered.images else {}  # text engines need not know the argument
        try:
            gen = await _timed(
                timer, "engine", limits, "generate",
                asyncio.wait_for(engine.generate(rendered.ids, cfg.sampling(seed_t, budget), session_id=episode_id,
                                                 **extra), cfg.generate_timeout_s),
            )
        except asyncio.TimeoutError:
            timeouts["generate"] = timeouts.get("generate", 0) + 1
            termination = "timeout"
            break
        except ValueError as exc:  # the engine refused the prompt (longer than its context)
            termination = "context_overflow"
            turns_info = {"error": str(exc)}
            return finish(termination, info=turns_info)
        if gen.finish_reason == "context_length":
            termination = "context_overflow"
            break
        versions += [gen.policy_version, gen.final_policy_version]
        text = renderer.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        result = await _timed(timer, "browser", limits, "execute", env.step(text))
        format_ok = fmt.format_ok(text) and not result.format_error
        feedback.append(result.feedback or "")
        final_observation = getattr(result.observation, "text", "") or ""
        turn_infos.append(turn_info(messages[-1].content, current.observation, result, cfg.viewer_screenshots))
        turns.append(Turn(
            prompt_ids=list(rendered.ids), response_ids=list(gen.token_ids), response_logprobs=list(gen.logprobs),
            policy_version=gen.policy_version, observation=current.observation.text, action=text, format_ok=format_ok,
            observation_digest=observation_digest(current.observation),
            images=[TurnImage.of(im.data, im.grid_thw, im.pixel_values) for im in rendered.images] or None,
        ))
        current.response_text, current.response_ids = text, tuple(gen.token_ids)
        current.action = "; ".join(a.raw for a in result.actions) if result.actions else text.strip()[:200]
        current.conclusion, current.memory = extract_tag(text, "conclusion"), extract_tag(text, "memory")
        past.append(current)
        if result.termination_reason in ("env_error", "timeout", "agent_timeout"):
            termination = result.termination_reason
            break
        format_errors_in_row = 0 if format_ok else format_errors_in_row + 1
        if result.done:
            termination = "done"
            break
        if format_errors_in_row >= cfg.max_format_errors:
            termination = "format_errors"
            break
        current = StepRecord(observation=result.observation, feedback=result.feedback)
    if termination in ("env_error",):
        return finish(termination, info={"error": getattr(env, "error", None)})
    try:
        ev = await _timed(timer, "browser", limits, "evaluate", env.evaluate())
    except Exception as exc:  # an evaluator that cannot read the page: the episode is unusable, not fatal
        return finish("env_error", info={"error": f"evaluate failed: {exc}"})
    if getattr(env, "termination_reason", None) == "env_error":  # the browser was lost before evaluation
        return finish("env_error", info={"error": getattr(env, "error", None)})
    return finish(termination, success=bool(ev.success), reward=float(ev.success), info={"raw_reward": ev.reward})
