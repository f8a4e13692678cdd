"""Rollout engines: the Engine protocol, the embedded JaxEngine, the SGLang client and launcher, a router, and
an OpenAI-compatible chat client (text in / text out, for judges served behind /v1/chat/completions)."""

from jaxwebrl.engines.base import (
    Engine,
    EngineClosedError,
    EngineError,
    EngineUnavailableError,
    FinishReason,
    Generation,
    SamplingParams,
    WeightSyncError,
)
from jaxwebrl.engines.factory import ENGINE_TYPES, make_engine
from jaxwebrl.engines.jax_engine import JaxEngine, SchedulerEvent
from jaxwebrl.engines.openai_engine import ChatCompletion, OpenAIChatEngine
from jaxwebrl.engines.router import Router
from jaxwebrl.engines.sglang_engine import SGLangEngine
from jaxwebrl.engines.sglang_server import SGLangServer, ServerStartError

__all__ = [
    "Engine", "EngineClosedError", "EngineError", "EngineUnavailableError", "FinishReason", "Generation",
    "SamplingParams", "WeightSyncError", "ENGINE_TYPES", "make_engine", "JaxEngine", "SchedulerEvent", "Router",
    "SGLangEngine", "SGLangServer", "ServerStartError", "ChatCompletion", "OpenAIChatEngine",
]
