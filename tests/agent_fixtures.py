"""Shared pieces of the agent/rollout tests: a tiny checkpoint with a tokenizer, a JaxEngine on it, a
MiniWoB++ suite and a browser pool — all real, on loopback."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import AsyncIterator, Sequence

from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig
from jaxwebrl.engines.base import Generation, SamplingParams
from jaxwebrl.engines.jax_engine import JaxEngine
from jaxwebrl.models import load_hf, load_tokenizer
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

ENV = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=400))


def tiny_policy(path: Path, **overrides) -> tuple:
    """(cfg, params, tokenizer) of a random tiny Qwen3 with a trained tokenizer."""
    make_tiny_checkpoint(path, tiny_config("qwen3", vocab_size=512, max_position_embeddings=4096, **overrides))
    cfg, params = load_hf(path)
    return cfg, params, load_tokenizer(path)


class RecordingEngine:
    """Wraps a real engine and keeps every (prompt, generation) pair, so tests can compare what was
    stored for training with what the engine returned."""

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id=None) -> Generation:
        gen = await self.inner.generate(prompt_ids, params, session_id=session_id)
        self.calls.append((list(prompt_ids), gen))
        return gen

    async def update_weights(self, weights, version: int) -> None:
        await self.inner.update_weights(weights, version)

    async def health(self):
        return await self.inner.health()

    async def close(self) -> None:
        await self.inner.close()


@contextlib.asynccontextmanager
async def pool_and_engine(cfg, params, tokenizer, contexts: int = 4, slots: int = 4) -> AsyncIterator[tuple]:
    engine = JaxEngine(cfg, params, num_slots=slots, max_len=4096, tokenizer=tokenizer, buckets=(256, 512, 1024, 2048, 4096))
    async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=contexts), ENV) as pool:
        try:
            yield pool, engine
        finally:
            await engine.close()
