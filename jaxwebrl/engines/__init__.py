"""Rollout engines: the Engine protocol, the embedded JaxEngine, the SGLang client and launcher, a router, and
an OpenAI-compatible chat client (text in / text out, for judges served behind /v1/chat/completions).

The concrete engines load on first use (`jaxwebrl.engines.JaxEngine` imports its module then), so a run
that serves from SGLang never imports the JAX sampler (which registers a JAX compile listener).
"""

from typing import Any

from jaxwebrl.engines.base import (
    Engine,
    EngineClosedError,
    EngineError,
    EngineUnavailableError,
    FinishReason,
    Generation,
    ImageInput,
    SamplingParams,
    WeightSyncError,
)
from jaxwebrl.engines.config import ENGINE_TYPES, EngineConfig
from jaxwebrl.engines.factory import make_engine

_LAZY = {
    "JaxEngine": "jaxwebrl.engines.jax_engine", "SchedulerEvent": "jaxwebrl.engines.jax_scheduler",
    "Router": "jaxwebrl.engines.router", "SGLangEngine": "jaxwebrl.engines.sglang_engine",
    "SGLangServer": "jaxwebrl.engines.sglang_server", "ServerStartError": "jaxwebrl.engines.sglang_server",
    "ChatCompletion": "jaxwebrl.engines.openai_engine", "OpenAIChatEngine": "jaxwebrl.engines.openai_engine",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'jaxwebrl.engines' has no attribute {name!r}")


__all__ = [
    "Engine", "EngineClosedError", "EngineError", "EngineUnavailableError", "FinishReason", "Generation",
    "ImageInput", "SamplingParams", "WeightSyncError", "ENGINE_TYPES", "EngineConfig", "make_engine", *_LAZY,
]
