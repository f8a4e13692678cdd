"""The JaxEngine's deterministic mode: a request's tokens and logprobs are bit-identical whether it runs alone
or among other requests of other lengths that arrive at other times, in another slot, after a sibling that
left its prompt prefix in the cache; greedy and seeded sampling alike.

The comparison runs in a subprocess at XLA's default optimisation (the main job's), not at the suite's
level 0 (tests/conftest.py): the batched decode step's dependence on the slot index that deterministic mode
removes (`jax_programs.decode_by_row`) came from LLVM's vectorisation, which level 0 does not do.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from jaxwebrl.engines import JaxEngine, SamplingParams
from jaxwebrl.engines.config import EngineConfig
from jaxwebrl.fields import FieldError
from jaxwebrl.models import init_params
from jaxwebrl.models.tiny import tiny_config

ROOT = Path(__file__).resolve().parents[1]

SCENARIOS = textwrap.dedent("""
    import asyncio, json
    import jax, numpy as np
    from jaxwebrl.engines import JaxEngine, SamplingParams
    from jaxwebrl.models import init_params
    from jaxwebrl.models.tiny import tiny_config

    cfg = tiny_config("qwen3", vocab_size=512)
    params = init_params(cfg, jax.random.key(0), std=0.3)
    rng = np.random.default_rng(0)
    target = [int(t) for t in rng.integers(3, 512, 70)]
    others = [[int(t) for t in rng.integers(3, 512, n)] for n in (5, 33, 120, 9, 200, 61)]
    KINDS = {"greedy": SamplingParams(greedy=True, max_new_tokens=40, ignore_eos=True),
             "sampled": SamplingParams(temperature=1.0, seed=7, max_new_tokens=40, ignore_eos=True)}

    def engine():
        return JaxEngine(cfg, params, num_slots=4, max_len=256, prefill_chunk=32, page_size=16, deterministic=True)

    def record(e, gen):
        events = [ev for ev in e.events if ev.request_id == gen.request_id]
        return {"tokens": gen.token_ids, "logprobs": [float(x).hex() for x in gen.logprobs],
                "slot": events[0].slot, "cached": sum(ev.cached for ev in events if ev.kind == "prefill")}

    async def at_step(e, k):  # wait for the engine's k-th decode step (an arrival time in engine steps)
        while e.decode_steps < k:
            await asyncio.sleep(0.001)

    async def alone(kind):
        e = engine()
        gen = await e.generate(target, KINDS[kind])
        out = record(e, gen)
        await e.close()
        return out

    async def crowded(kind):
        # A sibling with the target's first 50 tokens leaves them in the prefix cache; then six requests of
        # other lengths and settings arrive over the first decode steps, the target among them at step 4.
        e = engine()
        await e.generate(target[:50] + [4, 5, 6], SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True))
        start = e.decode_steps
        async def other(i, prompt):
            await at_step(e, start + 2 * i)
            sp = SamplingParams(temperature=0.7 + 0.1 * i, seed=100 + i, max_new_tokens=30 + 7 * i, ignore_eos=True)
            return await e.generate(prompt, sp)
        others_running = [asyncio.ensure_future(other(i, p)) for i, p in enumerate(others)]
        await at_step(e, start + 4)
        gen = await e.generate(target, KINDS[kind])
        await asyncio.gather(*others_running)
        out = record(e, gen)
        await e.close()
        return out

    async def first_of_many(kind):
        # The target arrives first; the others take the slots after it and finish before and after it.
        e = engine()
        running = asyncio.ensure_future(e.generate(target, KINDS[kind]))
        rest = [asyncio.ensure_future(e.generate(p, SamplingParams(greedy=True, max_new_tokens=5 + 20 * (i % 3),
                                                                    ignore_eos=True))) for i, p in enumerate(others)]
        gen = await running
        await asyncio.gather(*rest)
        out = record(e, gen)
        await e.close()
        return out

    result = {kind: {name: asyncio.run(fn(kind)) for name, fn in
                     (("alone", alone), ("crowded", crowded), ("first_of_many", first_of_many))}
              for kind in KINDS}
    print("RESULT " + json.dumps(result))
""")


def _default_xla_env() -> dict[str, str]:
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "").strip()
    return dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))


def test_a_request_is_bit_identical_alone_and_among_others() -> None:
    proc = subprocess.run([sys.executable, "-c", SCENARIOS], env=_default_xla_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    for kind, runs in result.items():
        alone = runs["alone"]
        assert len(alone["tokens"]) == 40 and alone["slot"] == 0 and alone["cached"] == 0
        # the scenarios did differ where it matters: another slot, and a prefix taken from the cache
        assert runs["crowded"]["slot"] != 0 and runs["crowded"]["cached"] == 32, (kind, runs["crowded"])
        for name in ("crowded", "first_of_many"):
            assert runs[name]["tokens"] == alone["tokens"], (kind, name)
            assert runs[name]["logprobs"] == alone["logprobs"], (kind, name)  # every bit (float.hex)
    assert result["greedy"]["alone"]["tokens"] != result["sampled"]["alone"]["tokens"]  # sampling did sample


def _tiny_engine(**kw: object) -> JaxEngine:
    cfg = tiny_config("qwen3", vocab_size=512)
    return JaxEngine(cfg, init_params(cfg, jax.random.key(0)), num_slots=2, max_len=128, **kw)


def test_deterministic_engine_refuses_what_would_break_it() -> None:
    with pytest.raises(ValueError, match="max_len=128 to be a multiple of prefill_chunk=48"):
        _tiny_engine(deterministic=True, prefill_chunk=48)
    with pytest.raises(FieldError, match="prefill_chunk"):
        EngineConfig(deterministic=True, max_len=2048, prefill_chunk=100)
    engine = _tiny_engine(deterministic=True, prefill_chunk=32)
    assert engine.stats()["cache_capacity"] == 128 and engine.stats()["deterministic"]

    async def unseeded() -> None:
        try:
            await engine.generate([5, 6, 7], SamplingParams(temperature=1.0, max_new_tokens=2))
        finally:
            await engine.close()

    with pytest.raises(ValueError, match="needs SamplingParams.seed"):
        asyncio.run(unseeded())
