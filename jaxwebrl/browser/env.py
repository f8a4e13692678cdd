"""BrowserEnv: one episode at a time in an isolated context leased from a BrowserPool (fresh, or a parked one
for tasks that declare `reuse_context`). The env talks to the pool only through its `SessionLease`.

    obs = await env.reset(task, seed)            # raises EnvError if the start state cannot be built
    res = await env.step(text)                   # StepResult(observation, feedback, format_error, done, answer, ...)
    ev = await env.evaluate()                    # EvalResult(reward, success, info)
    env.termination_reason                       # None while running; "answer", "task_done", "max_steps",
                                                 # "timeout" (episode wall time), "agent_timeout" (the
                                                 # policy's own waits ran past the step or episode time:
                                                 # rewarded and trained on), "env_error" (crash/hang: masked)
    await env.close()                            # releases the context and the pool slot

`step` never raises: parse errors and invalid actions come back as feedback with `format_error=True`;
a crashed or hung browser ends the episode with `env_error`.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field
from typing import Any, AsyncContextManager, Callable

from jaxwebrl.browser.actions import Action, ParseError, get_action_space
from jaxwebrl.browser.actions.base import is_closed_error
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.lease import SessionLease
from jaxwebrl.browser.observation import Observation, observe
from jaxwebrl.browser.safety import Allowlist
from jaxwebrl.browser.session import AgentTimeout, BrowserSession
from jaxwebrl.browser.stall import run_within
from jaxwebrl.browser.task import EvalResult, Task

INLINE_PARSE_CHARS = 8_192  # responses up to this long parse on the loop (well under a millisecond)
TERMINATION_REASONS = ("answer", "task_done", "max_steps", "timeout", "agent_timeout", "env_error")


class EnvError(RuntimeError):
    """The browser failed while building the start state (the episode cannot start)."""


@dataclass
class StepResult:
    observation: Observation
    feedback: str
    format_error: bool
    done: bool
    answer: str | None = None
    termination_reason: str | None = None
    actions: list[Action] = field(default_factory=list)


class BrowserEnv:
    """One environment slot of a pool. Not safe to step concurrently with itself (one episode at a time)."""

    def __init__(self, lease: SessionLease, config: EnvConfig,
                 observe_slot: Callable[[], AsyncContextManager[Any]] | None = None) -> None:
        """`observe_slot()` (optional) is entered around every observation (snapshot, text, screenshot):
        WebGym's per-operation limit on observing, separate from executing actions."""
        config.validate()
        self.lease = lease
        self.config = config
        self.observe_slot = observe_slot
        self.space = get_action_space(config.action_space)
        self.session: BrowserSession | None = None
        self.task: Task | None = None
        self.goal = ""
        self.answer: str | None = None
        self.steps = 0
        self.done = False
        self.termination_reason: str | None = None
        self.error: str | None = None
        self.last_obs: Observation | None = None
        self._reuse_key: tuple[Any, ...] | None = None
        self._reused = False
        self._t0 = 0.0
        self._closed = False
        # safety-limit timeouts that fired in the current episode, by kind (`timeout_counts` adds the session's)
        self.timeouts: collections.Counter[str] = collections.Counter()

    # ---- lifecycle --------------------------------------------------------------------------------
    async def reset(self, task: Task, seed: int = 0) -> Observation:
        """Task start state for `seed` in a fresh context (or a parked one, for tasks that allow reuse),
        first observation."""
        if self._closed:
            raise RuntimeError("reset on a closed BrowserEnv")
        await self._drop_session()
        self.timeouts.clear()
        self.task, self.answer, self.steps, self.done = task, None, 0, False
        self.termination_reason, self.error = None, None
        origins = tuple(task.allowed_origins()) + tuple(self.config.extra_allowed_origins)
        self._reuse_key = (origins, self.config) if getattr(task, "reuse_context", False) else None
        try:
            try:
                obs = await self._start(task, seed, origins, reuse=True)
            except Exception:
                if not self._reused:
                    raise
                await self._drop_session(park=False)  # a parked context that fails gets one fresh retry
                obs = await self._start(task, seed, origins, reuse=False)
        except Exception as exc:
            self._end("env_error", f"reset failed: {type(exc).__name__}: {exc}")
            self.timeouts["reset"] += isinstance(exc, asyncio.TimeoutError)
            if isinstance(exc, asyncio.TimeoutError) and self.session is not None:
                await self.lease.check_health()
            raise EnvError(self.error) from exc
        self._t0 = time.monotonic()
        self.last_obs = obs
        return obs

    async def _start(self, task: Task, seed: int, origins: tuple[str, ...], reuse: bool) -> Observation:
        allowlist = Allowlist(origins, allow_data_urls=self.config.allow_data_urls)
        self.session, self._reused = await self.lease.open(allowlist, self.config, self._reuse_key if reuse else None)
        self.goal = await run_within(task.setup(self.session, seed), self.config.step_timeout_s)
        return await run_within(self._observe(self.session), self.config.step_timeout_s)

    async def _observe(self, session: BrowserSession) -> Observation:
        if self.observe_slot is None:
            return await observe(session, self.config.obs, self.goal)
        async with self.observe_slot():
            return await observe(session, self.config.obs, self.goal)

    async def close(self) -> None:
        """Release the context and the pool slot. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._drop_session()
        self.lease.release()

    async def __aenter__(self) -> "BrowserEnv":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _drop_session(self, park: bool = True) -> None:
        """Hand the episode's session back: parked for reuse when the task allows it and the episode left it
        healthy (no crash or browser error, one tab), else closed."""
        if self.session is not None:
            session = self.session
            self.session = None
            healthy = not self.lease.crashed and self.termination_reason != "env_error" and session.reusable
            await self.lease.finish(session, self._reuse_key if park and healthy else None)

    def timeout_counts(self) -> dict[str, int]:
        """Every safety-limit timeout that fired in this episode, by kind: the env's (reset, step, episode,
        evaluate, action, task_timer) and its session's (settle, navigation, load, navigation_start, ...)."""
        counts = collections.Counter(self.timeouts)
        if self.session is not None:
            counts.update(self.session.timeouts)
        return {k: int(v) for k, v in sorted(counts.items()) if v}

    def _end(self, reason: str, error: str | None = None) -> None:
        if not self.done:
            self.done = True
            self.termination_reason = reason
            self.error = error

    # ---- stepping ---------------------------------------------------------------------------------
    def _empty_obs(self) -> Observation:
        return self.last_obs or Observation(goal=self.goal, text="")

    async def step(self, text: str) -> StepResult:
        """Parse `text` with the configured action space, execute, observe. Never raises."""
        if self.session is None or self.done:
            return StepResult(self._empty_obs(), "The episode is over; call reset().", False, True, self.answer,
                              self.termination_reason)
        if self.lease.crashed:
            self._end("env_error", "browser crashed")
            return StepResult(self._empty_obs(), "Environment error: the browser crashed.", False, True, None, "env_error")
        if time.monotonic() - self._t0 > self.config.episode_timeout_s:
            self.timeouts["episode"] += 1
            self._end("timeout", "episode wall time exceeded")
            return StepResult(self._empty_obs(), "The episode timed out.", False, True, None, "timeout")
        loop = asyncio.get_running_loop()
        episode_left = self._t0 + self.config.episode_timeout_s - time.monotonic()
        deadline = loop.time() + min(self.config.step_timeout_s, episode_left)
        self.session.start_step(deadline)
        try:
            result = await run_within(self._step(text), max(deadline - loop.time(), 0.001))
        except AgentTimeout as exc:
            return self._agent_timeout(str(exc))
        except asyncio.TimeoutError as exc:
            self.timeouts["step"] += 1
            healthy = await self.lease.check_health()
            if healthy and self.session is not None and self.session.agent_wait_s >= self.config.step_timeout_s / 2:
                return self._agent_timeout(f"the policy's waits took {self.session.agent_wait_s:.1f} s of the step")
            where = f" waiting in {exc}" if str(exc) else ""
            self._end("env_error", "step timed out" + where + ("" if healthy else "; browser hung and was restarted"))
            return StepResult(self._empty_obs(), "Environment error: the step timed out.", False, True, None, "env_error")
        except Exception as exc:
            self._end("env_error", f"{type(exc).__name__}: {str(exc)[:300]}")
            return StepResult(self._empty_obs(), "Environment error: the browser failed.", False, True, None, "env_error")
        self.steps += 1
        if not self.done and self.config.max_steps is not None and self.steps >= self.config.max_steps:
            self._end("max_steps")
            result.done, result.termination_reason = True, "max_steps"
        return result

    def _agent_timeout(self, why: str) -> StepResult:
        """The policy's own actions (waits) ran past the step or episode time: a normal, rewarded outcome."""
        self._end("agent_timeout", why)
        return StepResult(self._empty_obs(), f"Failed: out of time: {why}. The episode is over.", False, True, None,
                          "agent_timeout")

    async def _step(self, text: str) -> StepResult:
        session = self.session
        assert session is not None and self.task is not None
        # parsing is linear in a bounded prefix (actions/scan.py); long responses parse in a worker thread
        # so the loop keeps serving the pool's other envs, and the step timeout covers parse + execute
        if len(text) <= INLINE_PARSE_CHARS:
            parsed = self.space.parse(text)
        else:
            parsed = await asyncio.to_thread(self.space.parse, text)
        feedback: list[str] = []
        format_error = False
        actions: list[Action] = []
        if isinstance(parsed, ParseError):
            format_error = True
            feedback.append(f"Invalid action: {parsed.message}")
        else:
            actions = parsed
            for action in parsed:
                try:
                    res = await self.space.execute(session, action)
                except Exception as exc:
                    if not is_closed_error(exc) or self.lease.crashed or not self.lease.connected():
                        raise
                    # only a tab closed itself: not a browser failure
                    await session.ensure_page()
                    feedback.append(f"Failed: '{action.name}' execution failed: the page was closed.")
                    continue
                feedback.append(res.feedback)
                self.timeouts["action"] += res.timeout
                if res.invalid:
                    format_error = True
                    break
                if res.done:
                    self.answer = res.answer
                    self._end("answer")
                    break
        for url in await session.blank_forbidden_pages():
            feedback.append(f"Failed: the page went to {url[:200]!r}, outside the allowed origins (or it could not "
                            "load); it was blocked and the tab now shows about:blank.")
        if not self.done and await self.task.is_done(session):
            self._end("task_done")
        await session.ensure_page()
        obs = await self._observe(session)
        self.last_obs = obs
        if self.lease.crashed:
            raise RuntimeError("browser crashed during the step")
        return StepResult(obs, "\n".join(feedback), format_error, self.done, self.answer, self.termination_reason, actions)

    async def evaluate(self) -> EvalResult:
        """Score the episode; 0 for env_error or when the evaluator itself fails. A browser lost after the
        last step (crash, a remote server gone) makes the episode an env_error here: the page is gone, so
        the 0 would be the infrastructure's, not the policy's."""
        if self.task is None:
            raise RuntimeError("evaluate before reset")
        if self.termination_reason == "env_error" or self.session is None:
            return EvalResult(0.0, False, {"termination_reason": self.termination_reason, "error": self.error})
        if self.lease.crashed:
            return self._lost_before_evaluation()
        try:
            res = await run_within(self.task.evaluate(self.session, self.answer), self.config.step_timeout_s)
        except Exception as exc:
            self.timeouts["evaluate"] += isinstance(exc, asyncio.TimeoutError)
            if self.lease.crashed or not self.lease.connected():
                return self._lost_before_evaluation()
            return EvalResult(0.0, False, {"error": f"evaluator failed: {type(exc).__name__}: {exc}"})
        res.info.setdefault("termination_reason", self.termination_reason)
        self.timeouts["task_timer"] += bool(res.info.get("timed_out"))  # the task's own clock ended it
        return res

    def _lost_before_evaluation(self) -> EvalResult:
        self.termination_reason, self.error = "env_error", "the browser was lost before the episode was evaluated"
        return EvalResult(0.0, False, {"termination_reason": "env_error", "error": self.error})
