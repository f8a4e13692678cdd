"""The JaxEngine's prefix cache and chunked prefill: a request that reuses cached blocks returns what the engine
returns with the cache off (and what transformers generates), under eviction too; a weight update drops
every cached block; a long prompt's chunks interleave with other requests' decode steps. The radix index's
bookkeeping (match, LRU eviction of leaves, clear) is checked on its own first. A tiny random Qwen3 (std 0.3,
so greedy outputs are varied) on two CPU cores."""

from __future__ import annotations

import asyncio
from typing import Any

import jax
import numpy as np
import pytest
import torch
import transformers

from jaxwebrl.engines import JaxEngine, SamplingParams
from jaxwebrl.engines.radix_index import RadixIndex
from jaxwebrl.models import init_params
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

MAX_LEN = 128
BUCKETS = (64, MAX_LEN)  # few programs: compile time dominates these tests on a shared CPU
PAGE = 16


# ---- the index alone ------------------------------------------------------------------------------


def test_radix_index_matches_whole_blocks_and_evicts_least_recent_leaves() -> None:
    idx = RadixIndex(num_pages=4, page_size=2)
    a = [1, 2, 3, 4, 5, 6, 7]  # three whole blocks and a partial one
    new = idx.insert(a)
    assert [b for b, _ in new] == [0, 1, 2] and idx.cached_blocks == 3
    pages = [p for _, p in new]
    assert idx.match(a) == pages
    assert idx.match(a, limit=5) == pages[:2]  # at most 5 tokens: two whole blocks
    assert idx.match([1, 2, 3, 9]) == pages[:1]  # diverges inside the second block
    assert idx.match([9, 2]) == []
    assert idx.insert(a[:4]) == []  # already cached: nothing to copy

    b = [1, 2, 8, 8]  # shares the first block of a: one new page, the last free one
    new_b = idx.insert(b)
    assert [blk for blk, _ in new_b] == [1] and idx.cached_blocks == 4 and idx.evictions == 0
    idx.match(a)  # a is now the most recent: b's leaf is the least recently used
    c = [5, 5, 5, 5]
    new_c = idx.insert(c)  # needs two pages: evicts b's leaf, then a's leaf (block 2), never an inner block
    assert idx.evictions == 2 and [blk for blk, _ in new_c] == [0, 1]
    assert idx.match(b) == pages[:1]
    assert idx.match(a) == pages[:2]
    assert sorted(p for _, p in new_c) == sorted([new_b[0][1], pages[2]])  # the freed pages were reused
    assert idx.match(c) == [p for _, p in new_c]

    full = RadixIndex(num_pages=2, page_size=2)
    assert len(full.insert([1, 2, 3, 4, 5, 6])) == 2  # its own path is never evicted to extend it
    assert full.match([1, 2, 3, 4, 5, 6]) == [p for p in full.match([1, 2, 3, 4])]
    full.clear()
    assert full.cached_blocks == 0 and full.match([1, 2]) == []
    assert len(full.insert([7, 7, 7, 7])) == 2


# ---- the engine -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("tiny_qwen3_prefix")
    cfg, params = make_tiny_checkpoint(path, tiny_config("qwen3"), seed=0, std=0.3)
    rng = np.random.default_rng(1)
    prompts = [list(map(int, rng.integers(3, cfg.vocab_size, n))) for n in (45, 30, 38, 52)]
    return {"path": path, "cfg": cfg, "params": params, "prompts": prompts, "rng": rng}


def _engine(tiny: dict[str, Any], params: Any = None, **kw: Any) -> JaxEngine:
    kw.setdefault("num_slots", 4)
    kw.setdefault("max_len", MAX_LEN)
    kw.setdefault("buckets", BUCKETS)
    kw.setdefault("page_size", PAGE)
    return JaxEngine(tiny["cfg"], tiny["params"] if params is None else params, **kw)


@pytest.fixture(scope="module")
def off(tiny: dict[str, Any]) -> Any:
    """The reference: the same engine with the prefix cache off (every prompt prefilled whole)."""
    eng = _engine(tiny, prefix_cache=False)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="module")
def small(tiny: dict[str, Any]) -> Any:
    """Two slots, 3 pages of prefix cache and 16-token prefill chunks, one a step: eviction and chunking at once."""
    eng = _engine(tiny, prefix_cache_tokens=3 * PAGE, num_slots=2, prefill_chunk=16, prefill_budget=16)
    yield eng
    asyncio.run(eng.close())


GREEDY = SamplingParams(greedy=True, max_new_tokens=12, ignore_eos=True)


def _sampled(seed: int) -> SamplingParams:
    return SamplingParams(temperature=1.0, seed=seed, max_new_tokens=12, ignore_eos=True)


def _two_turns(tiny: dict[str, Any], ext_seed: int) -> tuple[list[list[int]], list[SamplingParams], Any]:
    """Turn 1 of a GRPO-shaped batch: a group of 4 identical greedy prompts and a group of 3 identical
    sampled ones (seeds differ); and `second(outputs)`, turn 2: each prompt + its response + its own new
    observation tokens."""
    p, q = tiny["prompts"][0], tiny["prompts"][1]
    prompts = [p] * 4 + [q] * 3
    params = [GREEDY] * 4 + [_sampled(s) for s in (11, 12, 13)]
    rng = np.random.default_rng(ext_seed)
    exts = [list(map(int, rng.integers(3, tiny["cfg"].vocab_size, 6 + i))) for i in range(len(prompts))]

    def second(outputs: list[list[int]]) -> list[list[int]]:
        return [pr + out + ext for pr, out, ext in zip(prompts, outputs, exts)]

    return prompts, params, second


async def _run_two_turns(engine: JaxEngine, tiny: dict[str, Any]) -> list[Any]:
    prompts, params, second = _two_turns(tiny, ext_seed=5)
    first = await asyncio.gather(*(engine.generate(p, sp) for p, sp in zip(prompts, params)))
    turn2 = second([g.token_ids for g in first])
    again = await asyncio.gather(*(engine.generate(p, sp) for p, sp in zip(turn2, params)))
    return list(first) + list(again)


def _assert_same(gens: list[Any], refs: list[Any]) -> None:
    assert len(gens) == len(refs) > 0
    for g, r in zip(gens, refs):
        assert g.token_ids == r.token_ids
        np.testing.assert_allclose(g.logprobs, r.logprobs, atol=1e-5, rtol=0)


def test_shared_prefixes_equal_cache_off_and_transformers(tiny: dict[str, Any], off: JaxEngine) -> None:
    on = _engine(tiny)
    off_prefilled = off.prefill_tokens

    async def main() -> tuple[list[Any], list[Any]]:
        try:
            return await _run_two_turns(on, tiny), await _run_two_turns(off, tiny)
        finally:
            await on.close()

    gens, refs = asyncio.run(main())
    _assert_same(gens, refs)
    assert all(len(g.token_ids) == 12 for g in gens)
    assert len({tuple(g.token_ids) for g in gens[4:7]}) == 3  # sampled group members differ (seeds)
    # The cache was used: group members after the first, and every second turn, reused cached blocks.
    assert on.cached_tokens > 0 and off.cached_tokens == 0
    assert on.prefill_tokens + on.cached_tokens == off.prefill_tokens - off_prefilled  # every prompt token once
    p_len = len(tiny["prompts"][0])
    prefill_events = [e for e in on.events if e.kind == "prefill"]
    assert sum(e.cached == (p_len // PAGE) * PAGE for e in prefill_events[:4]) == 3
    assert all(e.cached >= (p_len // PAGE) * PAGE for e in prefill_events[7:11])  # greedy turn 2: prompt reused
    assert on.stats()["cache_pages_used"] > 0

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny["path"], dtype=torch.float32).eval()
    _, _, second = _two_turns(tiny, ext_seed=5)
    turn2 = second([g.token_ids for g in gens[:7]])
    for prompt, gen in list(zip([tiny["prompts"][0]] * 4, gens[:4])) + list(zip(turn2[:4], gens[7:11])):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=12, min_new_tokens=12, pad_token_id=0)
        assert gen.token_ids == ref[0, len(prompt):].tolist()


def test_eviction_under_a_tiny_budget_keeps_outputs_correct(tiny: dict[str, Any], off: JaxEngine,
                                                             small: JaxEngine) -> None:
    """3 pages for everything: each new prompt evicts the last one's blocks, its second turn still hits."""
    start = small.stats()

    async def turns(engine: JaxEngine) -> list[Any]:
        out = []
        for i, p in enumerate(tiny["prompts"]):
            sp = GREEDY if i % 2 == 0 else _sampled(i)
            g = await engine.generate(p, sp)
            ext = list(map(int, np.random.default_rng(i).integers(3, tiny["cfg"].vocab_size, 5)))
            out += [g, await engine.generate(p + g.token_ids + ext, sp)]
        return out

    async def main() -> tuple[list[Any], list[Any]]:
        return await turns(small), await turns(off)

    gens, refs = asyncio.run(main())
    _assert_same(gens, refs)
    stats = small.stats()
    assert stats["cache_pages"] == 3 and stats["cache_pages_used"] <= 3
    assert stats["cache_evictions"] > start["cache_evictions"]
    reused = stats["cached_tokens"] - start["cached_tokens"]
    assert reused >= len(tiny["prompts"]) * PAGE  # every second turn reused at least a block


def test_weight_update_drops_stale_entries(tiny: dict[str, Any]) -> None:
    """After update_weights a request equals a fresh engine with the new weights (stale blocks would not)."""
    new_params = init_params(tiny["cfg"], jax.random.key(7), std=0.3)
    engine = _engine(tiny, num_slots=2)
    fresh = _engine(tiny, new_params, num_slots=2, prefix_cache=False)
    prompt = tiny["prompts"][3]

    async def main() -> None:
        try:
            before = await engine.generate(prompt, GREEDY)
            again = await engine.generate(prompt, GREEDY)
            assert engine.cached_tokens == (len(prompt) - 1) // PAGE * PAGE  # the old weights' blocks were reused
            _assert_same([again], [before])
            await engine.update_weights(new_params, version=1)
            hits = engine.cached_tokens
            after = await engine.generate(prompt, GREEDY)
            assert engine.cached_tokens == hits  # nothing reused from before the update
            ref = await fresh.generate(prompt, GREEDY)
            _assert_same([after], [ref])
            assert after.token_ids != before.token_ids and after.policy_version == 1
            # The cache fills again under the new weights, and its hits are right.
            ext = after.token_ids + [5, 6, 7]
            hit = await engine.generate(prompt + ext, GREEDY)
            assert engine.cached_tokens > hits
            _assert_same([hit], [await fresh.generate(prompt + ext, GREEDY)])
        finally:
            await engine.close()
            await fresh.close()

    asyncio.run(main())


def test_chunked_prefill_interleaves_with_decode(tiny: dict[str, Any], off: JaxEngine, small: JaxEngine) -> None:
    """16-token chunks, 16 tokens a step: a 100-token prompt arriving while another request decodes is prefilled in 7 chunks,
    each in its own device step, with the other request's decode steps between them."""
    chunked = small
    rng = np.random.default_rng(3)
    short = list(map(int, rng.integers(3, tiny["cfg"].vocab_size, 5)))
    long = list(map(int, rng.integers(3, tiny["cfg"].vocab_size, 100)))
    sp_short = SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True)

    async def main() -> tuple[list[Any], list[Any]]:
        steps = chunked.decode_steps
        first = asyncio.create_task(chunked.generate(short, sp_short))
        while chunked.decode_steps < steps + 2:
            await asyncio.sleep(0.001)
        gens = [await chunked.generate(long, GREEDY), await first]
        refs = [await off.generate(long, GREEDY), await off.generate(short, sp_short)]
        return gens, refs

    gens, refs = asyncio.run(main())
    _assert_same(gens, refs)
    rid = gens[0].request_id
    chunks = [e for e in chunked.events if e.kind == "prefill" and e.request_id == rid]
    assert [e.tokens for e in chunks] == [16] * 6 + [4]
    steps = [e.step for e in chunks]
    assert all(b > a for a, b in zip(steps, steps[1:])), steps  # a decode step ran between every two chunks
    short_finish = next(e.step for e in chunked.events if e.kind == "finish" and e.request_id == gens[1].request_id)
    assert short_finish > steps[0]  # the short request was still decoding while the long one was prefilled
