"""The per-episode agent loop: prompts, context strategies, token-exact rendering, termination reasons."""

from jaxwebrl.agent.context import STRATEGIES, StepRecord, get_strategy
from jaxwebrl.agent.episode import AgentConfig, EpisodeResult, run_episode
from jaxwebrl.agent.limits import OperationLimits
from jaxwebrl.agent.prompts import FORMATS, PromptFormat, get_format
from jaxwebrl.agent.render import Message, PromptRenderer

__all__ = [
    "STRATEGIES", "StepRecord", "get_strategy", "AgentConfig", "EpisodeResult", "run_episode", "OperationLimits",
    "FORMATS", "PromptFormat", "get_format", "Message", "PromptRenderer",
]
