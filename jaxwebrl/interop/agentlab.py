"""An AgentLab / BrowserGym agent that plays with a jaxwebrl checkpoint.

AgentLab runs experiments as `ExpArgs(agent_args, env_args).run()` (browsergym.experiments.loop) over any
BrowserGym benchmark; an agent is an `AbstractAgentArgs` dataclass whose `make_agent()` returns a
`browsergym.experiments.Agent`. `JaxWebRLAgentArgs` is that dataclass. Its agent turns each BrowserGym
observation into a jaxwebrl `Observation` (the AXTree text with BrowserGym's bids), builds the prompt with
jaxwebrl's prompt format and context strategy (so the policy sees what it was trained on), samples through
the Engine protocol (JaxEngine in-process from `checkpoint`, or an SGLang server at `sglang_url`), parses
the response with jaxwebrl's action space, and hands BrowserGym the parsed call in its own syntax
(`click('12')` ...). A response that does not parse becomes `noop()` and its error is the next turn's feedback.

BrowserGym pins playwright 1.44 while jaxwebrl needs >= 1.65, so this runs in the BrowserGym venv
(`scripts/setup_browsergym_env.sh --with-jaxwebrl`) with jaxwebrl on PYTHONPATH; only the agent, prompt,
action-parsing and engine code of jaxwebrl is used there, never its browser layer.

    from browsergym.experiments import EnvArgs, ExpArgs
    from jaxwebrl.interop.agentlab import JaxWebRLAgentArgs
    exp = ExpArgs(JaxWebRLAgentArgs(checkpoint="runs/x/hf"), EnvArgs("miniwob.click-button", task_seed=0,
                                                                       max_steps=10))
    exp.prepare("results/"); exp.run()
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any, Coroutine, TypeVar

from browsergym.core.action.highlevel import HighLevelActionSet
from browsergym.experiments import Agent, AgentInfo
from browsergym.experiments.loop import AbstractAgentArgs
from browsergym.utils.obs import flatten_axtree_to_str

from jaxwebrl.agent.context import ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.actions import get_action_space
from jaxwebrl.browser.actions.base import Action, ParseError
from jaxwebrl.browser.actions.bid import SIGNATURES
from jaxwebrl.browser.observation import Observation
from jaxwebrl.engines.base import Engine

T = TypeVar("T")
_SHARED: dict[tuple[str, str, str, int], tuple["LoopThread", Engine, Any]] = {}  # one engine per process
ENGINES = ("jax", "sglang")
# BrowserGym's action subsets that cover jaxwebrl's `bid` action space (keyboard_* live in `coord`).
ACTION_SUBSETS = ["chat", "tab", "nav", "bid", "infeas", "coord"]
# `bid`-space calls BrowserGym 0.14 has no action for: answered with noop() and feedback naming click().
NOT_IN_BROWSERGYM = {"check": "click", "uncheck": "click"}


def to_browsergym(action: Action) -> str:
    """A parsed `bid`-space call in BrowserGym's high-level action syntax (same names and argument order)."""
    params, _, _ = SIGNATURES[action.name]
    args = [action.args[p] for p in params if p in action.args]
    return f"{action.name}({', '.join(repr(a) for a in args)})"


class LoopThread:
    """One asyncio loop in a daemon thread: jaxwebrl engines are coroutines, BrowserGym agents are sync."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="jaxwebrl-agent-loop")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class JaxWebRLAgent(Agent):
    """BrowserGym agent over a jaxwebrl Engine; one instance plays one episode (AgentLab makes one per run)."""

    def __init__(self, engine: Engine, tokenizer: Any, cfg: AgentConfig, runner: LoopThread) -> None:
        cfg.validate()
        self.engine, self.tokenizer, self.cfg, self.runner = engine, tokenizer, cfg, runner
        self.fmt, self.build = cfg.prompt(), get_strategy(cfg.strategy)
        self.space = get_action_space(self.fmt.action_space)
        if self.space.name != "bid":
            raise ValueError(f"JaxWebRLAgentArgs.prompt_format={cfg.prompt_format!r} uses the "
                             f"{self.space.name!r} action space; BrowserGym takes bid actions: use 'bid'")
        self.action_set = HighLevelActionSet(subsets=ACTION_SUBSETS, strict=False, multiaction=False)
        self.renderer = PromptRenderer(tokenizer)
        self.past: list[StepRecord] = []
        self.feedback: str | None = None
        self.session_id = f"agentlab-{id(self):x}"

    def obs_preprocessor(self, obs: dict) -> dict:
        """Keep what the policy reads (goal, AXTree text with bids, last error), drop the large raw trees."""
        return {"goal": obs["goal"], "axtree_txt": flatten_axtree_to_str(obs["axtree_object"]),
                "url": obs.get("url", ""), "last_action_error": obs.get("last_action_error", ""),
                "screenshot": obs.get("screenshot")}

    def get_action(self, obs: dict) -> tuple[str, AgentInfo]:
        feedback = self.feedback or (f"Error: {obs['last_action_error']}" if obs.get("last_action_error") else None)
        current = StepRecord(observation=Observation(goal=obs["goal"], text=obs["axtree_txt"]), feedback=feedback)
        rendered = self.renderer.render(self.build(ContextInputs(self.fmt, obs["goal"], self.past, current,
                                                                 self.cfg.last_k)))
        budget = self.cfg.max_context_tokens - len(rendered.ids)
        if budget < 1:
            return None, AgentInfo(extra_info={"termination": "context_overflow", "prompt_tokens": len(rendered.ids)})
        gen = self.runner.run(self.engine.generate(rendered.ids, self.cfg.sampling(None, budget),
                                                   session_id=self.session_id), self.cfg.generate_timeout_s)
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        parsed = self.space.parse(text)
        missing = [] if isinstance(parsed, ParseError) else [a.name for a in parsed if a.name in NOT_IN_BROWSERGYM]
        if missing:
            parsed = ParseError(f"{missing[0]}() is not an action here; use "
                                f"{NOT_IN_BROWSERGYM[missing[0]]}('<id>') instead", text[:200])
        if isinstance(parsed, ParseError):
            action, self.feedback = "noop()", f"Invalid action: {parsed.message}"
            parsed_calls: list[str] = []
        else:
            calls = [to_browsergym(a) for a in parsed]
            action, self.feedback, parsed_calls = calls[0], None, calls  # BrowserGym takes one call per step
        current.response_text, current.response_ids, current.action = text, tuple(gen.token_ids), action
        self.past.append(current)
        info = {"prompt_tokens": len(rendered.ids), "response": text, "response_ids": list(gen.token_ids),
                "logprobs": list(gen.logprobs), "parsed": parsed_calls,
                "parse_error": parsed.message if isinstance(parsed, ParseError) else None,
                "engine": self.engine.name}
        return action, AgentInfo(think=text, chat_messages=[], stats={"prompt_tokens": len(rendered.ids),
                                                                      "response_tokens": len(gen.token_ids)},
                                 extra_info=info)


@dataclasses.dataclass
class JaxWebRLAgentArgs(AbstractAgentArgs):
    """AgentLab agent arguments for a jaxwebrl checkpoint (HF directory: weights + tokenizer).

    engine: `jax` loads `checkpoint` into an in-process JaxEngine; `sglang` sends requests to the server at
    `sglang_url` (serving that checkpoint), with the tokenizer read from `checkpoint`.
    The prompt settings should be the ones the policy was trained with (AgentConfig's fields)."""

    agent_name: str = "jaxwebrl"
    checkpoint: str = ""
    engine: str = "jax"
    sglang_url: str = ""
    prompt_format: str = "bid"
    strategy: str = "compress_past"
    temperature: float = 1.0
    greedy: bool = False
    max_new_tokens: int = 64
    max_context_tokens: int = 4096
    jax_max_len: int = 4096

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.checkpoint:
            raise ValueError("JaxWebRLAgentArgs.checkpoint: give the HF checkpoint directory of the policy")
        if self.engine not in ENGINES:
            raise ValueError(f"JaxWebRLAgentArgs.engine={self.engine!r}: use one of {ENGINES}")
        if self.engine == "sglang" and not self.sglang_url:
            raise ValueError("JaxWebRLAgentArgs.engine='sglang' needs sglang_url (e.g. http://127.0.0.1:30000)")

    # AgentLab's Study calls these on its AgentArgs; nothing here depends on the benchmark.
    def set_benchmark(self, benchmark: Any, demo_mode: bool) -> None:
        pass

    def set_reproducibility_mode(self) -> None:
        self.greedy = True

    def agent_config(self) -> AgentConfig:
        return AgentConfig(strategy=self.strategy, prompt_format=self.prompt_format,
                           max_context_tokens=self.max_context_tokens, max_new_tokens=self.max_new_tokens,
                           temperature=self.temperature, greedy=self.greedy)

    def _key(self) -> tuple[str, str, str, int]:
        return (self.engine, self.checkpoint, self.sglang_url, self.jax_max_len)

    def make_agent(self) -> JaxWebRLAgent:
        """A fresh agent per episode; the engine (model weights) is built once per process and reused."""
        if self._key() not in _SHARED:
            from jaxwebrl.engines.config import EngineConfig
            from jaxwebrl.engines.factory import make_engine
            from jaxwebrl.models import load_tokenizer

            tokenizer = load_tokenizer(self.checkpoint)
            runner = LoopThread()
            config = (EngineConfig(type="jax", checkpoint=self.checkpoint, max_len=self.jax_max_len, num_slots=1)
                      if self.engine == "jax" else
                      EngineConfig(type="sglang", url=self.sglang_url, checkpoint=self.checkpoint))

            async def build() -> Engine:  # engines bind to the loop they are created on
                return make_engine(config, tokenizer=tokenizer)

            _SHARED[self._key()] = (runner, runner.run(build()), tokenizer)
        runner, engine, tokenizer = _SHARED[self._key()]
        return JaxWebRLAgent(engine, tokenizer, self.agent_config(), runner)

    def close(self) -> None:
        """Release this checkpoint's engine (AgentLab calls it after a study)."""
        shared = _SHARED.pop(self._key(), None)
        if shared is not None:
            runner, engine, _ = shared
            runner.run(engine.close(), 60)
            runner.stop()
