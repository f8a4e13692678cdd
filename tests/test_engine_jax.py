"""JaxEngine against transformers and against the trainer's own logprob math; continuous batching, weight
updates without recompilation, sampling controls and bad input. A tiny random Qwen3 (std 0.3 init, so
greedy outputs are varied and long) keeps every test on two CPU cores."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from jaxwebrl.engines import EngineClosedError, JaxEngine, SamplingParams
from jaxwebrl.models import export_hf, forward, init_params, load_tokenizer, token_logprobs
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
from multidevice import device_env

MAX_LEN = 128
BUCKETS = (64, MAX_LEN)  # few prefill programs: compile time dominates these tests on a shared CPU


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("tiny_qwen3")
    cfg, params = make_tiny_checkpoint(path, tiny_config("qwen3"), seed=0, std=0.3)
    rng = np.random.default_rng(0)
    prompts = [list(map(int, rng.integers(3, cfg.vocab_size, n))) for n in (5, 11, 17, 29, 40, 3)]
    return {"path": path, "cfg": cfg, "params": params, "prompts": prompts}


@pytest.fixture(scope="module")
def engine(tiny: dict[str, Any]) -> Any:
    """One engine shared by the tests that do not change its weights (each test runs its own event loop)."""
    eng = _engine(tiny, tokenizer=load_tokenizer(tiny["path"]))
    yield eng
    asyncio.run(eng.close())


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _engine(tiny: dict[str, Any], **kw: Any) -> JaxEngine:
    kw.setdefault("num_slots", 4)
    kw.setdefault("max_len", MAX_LEN)
    kw.setdefault("buckets", BUCKETS)
    return JaxEngine(tiny["cfg"], tiny["params"], **kw)


_forward = jax.jit(forward, static_argnums=0)


def _logits(cfg: Any, params: Any, seq: list[int]) -> np.ndarray:
    """Trainer-side forward over a [1, MAX_LEN + 1] right-padded row (one compiled program for all calls)."""
    tokens = np.zeros((1, MAX_LEN + 1), np.int32)
    tokens[0, : len(seq)] = seq
    logits, _ = _forward(cfg, params, tokens, jnp.arange(MAX_LEN + 1)[None])
    return np.asarray(logits[0, : len(seq)])


def _recomputed_logprobs(cfg: Any, params: Any, prompt: list[int], out: list[int], temperature: float) -> np.ndarray:
    """What the trainer computes: token_logprobs(forward(prompt + response)) at the response tokens."""
    logits = _logits(cfg, params, prompt + out)
    n = len(prompt)
    return np.asarray(token_logprobs(jnp.asarray(logits[n - 1 : n - 1 + len(out)]), jnp.asarray(out), temperature))


def _reference_greedy(cfg: Any, params: Any, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding by full recomputation, no cache: the slow, obviously-right version."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(_logits(cfg, params, seq)[-1])))
    return seq[len(prompt):]


def test_greedy_matches_transformers(tiny: dict[str, Any], engine: JaxEngine) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny["path"], dtype=torch.float32).eval()
    sp = SamplingParams(greedy=True, max_new_tokens=40)

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, sp) for p in tiny["prompts"])))

    gens = _run(main())
    eos = tiny["cfg"].eos_token_id
    for prompt, gen in zip(tiny["prompts"], gens):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                 do_sample=False, max_new_tokens=40, eos_token_id=eos, pad_token_id=eos)
        assert gen.token_ids == ref[0, len(prompt):].tolist()
        assert gen.finish_reason == ("stop" if gen.token_ids[-1] == eos else "length")
        assert gen.prompt_len == len(prompt)
    # Not degenerate: most outputs run long, and the token sets differ.
    assert sum(len(g.token_ids) >= 10 for g in gens) >= 4
    assert len({tuple(g.token_ids[:5]) for g in gens}) == len(gens)


def test_program_times_count_every_call_by_kind_and_change_nothing(tiny: dict[str, Any], engine: JaxEngine,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`benchmarks/program_times.py` (bench_engine.py --program-times): one request of 6 greedy tokens is one
    prefill chunk and 5 decode steps, each timed; the outputs equal an untimed run's; leaving the block puts
    the untimed call back."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from program_times import ProgramTimes, since

    from jaxwebrl.engines.jax_programs import CountedProgram

    untimed_call = CountedProgram.__call__
    sp = SamplingParams(greedy=True, max_new_tokens=6, ignore_eos=True)
    prompt = tiny["prompts"][1]
    plain = _run(engine.generate(prompt, sp))
    with ProgramTimes() as times:
        assert CountedProgram.__call__ is not untimed_call
        start = times.snapshot()
        timed = _run(engine.generate(prompt, sp))
        per_kind = since(start, times.snapshot())
    assert CountedProgram.__call__ is untimed_call
    assert timed.token_ids == plain.token_ids and len(timed.token_ids) == 6
    assert per_kind["prefill"][0] == 1 and per_kind["decode"][0] == 5, per_kind
    assert all(seconds > 0 for _, seconds in per_kind.values())


@pytest.mark.parametrize("mode", ["greedy", "t1_topk", "t07"])
def test_logprobs_equal_trainer_recompute(tiny: dict[str, Any], engine: JaxEngine, mode: str) -> None:
    sp, temp = {
        "greedy": (SamplingParams(greedy=True, max_new_tokens=24), 1.0),
        "t1_topk": (SamplingParams(temperature=1.0, top_k=50, top_p=0.9, seed=1, max_new_tokens=24), 1.0),
        "t07": (SamplingParams(temperature=0.7, seed=2, max_new_tokens=24, ignore_eos=True), 0.7),
    }[mode]

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, sp) for p in tiny["prompts"][:4])))

    for prompt, gen in zip(tiny["prompts"], _run(main())):
        ref = _recomputed_logprobs(tiny["cfg"], tiny["params"], prompt, gen.token_ids, temp)
        np.testing.assert_allclose(gen.logprobs, ref, atol=1e-4, rtol=0)


def test_concurrent_requests_equal_solo_and_reuse_freed_slots(tiny: dict[str, Any], engine: JaxEngine) -> None:
    """4 slots, 1 long + 7 short requests of different lengths: results equal running each alone, and a
    slot freed by a short request is taken by a waiting one while the long one is still decoding."""
    long_req = (tiny["prompts"][4], SamplingParams(greedy=True, max_new_tokens=60, ignore_eos=True))
    shorts = [(p, SamplingParams(greedy=True, max_new_tokens=3 + i, ignore_eos=True))
              for i, p in enumerate(tiny["prompts"][:4] + tiny["prompts"][5:] + [tiny["prompts"][1][:7],
                                                                                tiny["prompts"][4][:50]])]
    requests = [long_req] + shorts

    async def main() -> tuple[list[Any], list[Any]]:
        solo = [await engine.generate(p, sp) for p, sp in requests]
        engine.events.clear()
        together = list(await asyncio.gather(*(engine.generate(p, sp) for p, sp in requests)))
        return solo, together

    solo, together = _run(main())
    for a, b in zip(solo, together):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert len(together[0].token_ids) == 60
    assert [len(g.token_ids) for g in together[1:]] == [3 + i for i in range(len(shorts))]

    events = list(engine.events)
    long_id = together[0].request_id
    long_finish = next(e.step for e in events if e.kind == "finish" and e.request_id == long_id)
    freed = {}
    reused = []
    for e in events:
        if e.kind == "finish":
            freed[e.slot] = e.step
        elif e.kind == "admit" and e.slot in freed:
            reused.append(e)
    assert reused, events
    assert all(e.step < long_finish for e in reused)  # nobody waited for the long request
    assert len(reused) == len(shorts) - 3  # 4 slots: long + 3 shorts at once, the other shorts reuse slots
    counts = engine.compile_counts()
    assert counts["decode"] <= len(engine.buckets)
    assert counts["prefill"] <= len(engine.buckets) * len(engine.prefill_widths)  # one per (width, context)


def test_cache_capacity_follows_the_requests_in_flight(tiny: dict[str, Any], engine: JaxEngine,
                                                      without_compilation_cache: None) -> None:
    """The slot cache grows to the bucket of the longest request in flight and is cut back once the requests
    need half of it or less; outputs equal the fixture engine's (fixed buckets) across the resizes."""
    eng = _engine(tiny, buckets=(16, 32, 64, MAX_LEN))
    long_req = (tiny["prompts"][4], SamplingParams(greedy=True, max_new_tokens=60, ignore_eos=True))  # 40 + 60
    short_req = (tiny["prompts"][0], SamplingParams(greedy=True, max_new_tokens=3, ignore_eos=True))  # 5 + 3

    async def main() -> tuple[list[Any], list[int]]:
        outs, capacity = [], [eng.stats()["cache_capacity"]]
        for p, sp in (long_req, short_req):
            outs.append(await eng.generate(p, sp))
            capacity.append(eng.stats()["cache_capacity"])
        await eng.close()
        return outs, capacity

    outs, capacity = _run(main())
    assert capacity == [16, MAX_LEN, 16]
    assert eng.compile_counts()["resize"] >= 2  # grown (16 -> 64 -> 128 or straight) and cut
    expected = _run(_one_by_one(engine, [long_req, short_req]))
    for got, want in zip(outs, expected):
        assert got.token_ids == want.token_ids
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)


async def _one_by_one(engine: JaxEngine, requests: list[tuple[list[int], SamplingParams]]) -> list[Any]:
    return [await engine.generate(p, sp) for p, sp in requests]


@pytest.mark.parametrize("deterministic", [False, True])
def test_warmup_compiles_every_program_a_request_can_need(tiny: dict[str, Any], engine: JaxEngine, deterministic: bool,
                                                         without_compilation_cache: None) -> None:
    """After `warmup()`, requests of any length (1 to 110 tokens, alone and together, a group of identical
    prompts and second turns that extend them through the prefix cache, capacities from the smallest bucket
    to max_len) compile nothing, and give the fixture engine's outputs (warmup's placeholder calls leave
    nothing a request reads)."""
    eng = _engine(tiny, buckets=None, prefill_chunk=16, prefill_budget=32, prefill_min_chunk=4,
                  deterministic=deterministic)
    assert eng.buckets == (16, 32, 64, MAX_LEN)
    assert eng.prefill_widths == ((16,) if deterministic else (4, 8, 16))  # deterministic: one grid width
    rng = np.random.default_rng(5)
    vocab = tiny["cfg"].vocab_size
    lengths = [1, 7, 16, 17, 40, 63, 64, 65, 90, 110]
    prompts = [list(map(int, rng.integers(3, vocab, n))) for n in lengths]
    group = prompts[4]

    async def main() -> tuple[dict[str, int], dict[str, int], list[Any], list[Any]]:
        warm = await eng.warmup()
        sp = SamplingParams(greedy=True, max_new_tokens=12, ignore_eos=True)
        outs = list(await asyncio.gather(*(eng.generate(p, sp) for p in prompts[:5])))  # together
        outs += list(await asyncio.gather(*(eng.generate(group, sp) for _ in range(3))))  # a group
        turns = [group + outs[-1].token_ids + [5, 6, 7], prompts[5] + [9] * 20]  # second turns, cached prefixes
        outs += list(await asyncio.gather(*(eng.generate(p, sp) for p in turns + prompts[5:])))
        for p in prompts[::-1]:  # alone: the cache cut back and grown again
            outs.append(await eng.generate(p, sp))
        after = eng.compile_counts()
        await eng.close()
        refs = [await engine.generate(p, sp) for p in prompts[:5] + [group] * 3 + turns + prompts[5:] + prompts[::-1]]
        return warm, after, outs, refs

    warm, after, outs, refs = _run(main())
    assert all(warm[kind] >= 1 for kind in ("prefill", "decode", "row", "store", "load")), warm
    assert (warm["resize"] == 0) if deterministic else (warm["resize"] == 4 * 3), warm  # every ordered pair of 4
    assert eng.cached_tokens > 0 and len(outs) == 25
    widths = {e.width for e in eng.events if e.kind == "prefill"}
    assert widths == set(eng.prefill_widths), widths  # every width ran (the lengths' tails are 1-16 tokens)
    assert after == warm, (warm, after)  # nothing compiled after the warm-up
    for got, want in zip(outs, refs):
        assert got.token_ids == want.token_ids
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)


def test_update_weights_changes_outputs_without_recompiling(tiny: dict[str, Any], tmp_path: Path) -> None:
    cfg = tiny["cfg"]
    new_params = init_params(cfg, jax.random.key(7), std=0.3)
    engine = _engine(tiny)
    prompt = tiny["prompts"][2]
    sp = SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True)
    compiles: list[str] = []

    def listener(name: str, duration: float, **_: Any) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            compiles.append(name)

    async def main() -> None:
        try:
            before = await engine.generate(prompt, sp)
            counts = engine.compile_counts()
            jax.monitoring.register_event_duration_secs_listener(listener)
            try:
                await engine.update_weights(new_params, version=1)
                after = await engine.generate(prompt, sp)
            finally:
                jax.monitoring.unregister_event_duration_listener(listener)
            assert compiles == []  # no XLA compilation at all between the swap and the next output
            assert engine.compile_counts() == counts
            assert after.policy_version == after.final_policy_version == 1 and before.policy_version == 0
            assert after.token_ids != before.token_ids

            assert after.token_ids == _reference_greedy(cfg, new_params, prompt, 20)
            ref_lp = _recomputed_logprobs(cfg, new_params, prompt, after.token_ids, 1.0)
            np.testing.assert_allclose(after.logprobs, ref_lp, atol=1e-4)

            # From a HF checkpoint directory, back to the first params.
            export_hf(cfg, tiny["params"], tmp_path / "v2", tokenizer_dir=tiny["path"])
            await engine.update_weights(str(tmp_path / "v2"), version=2)
            again = await engine.generate(prompt, sp)
            assert again.token_ids == before.token_ids and again.policy_version == 2
            assert engine.compile_counts() == counts

            # In flight: a long request sees the swap between decode steps and records both versions.
            start = engine.decode_steps
            task = asyncio.create_task(engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=90,
                                                                              ignore_eos=True)))
            while engine.decode_steps < start + 3:
                await asyncio.sleep(0.001)
            await engine.update_weights(new_params, version=3)
            mixed = await task
            assert mixed.policy_version == 2 and mixed.final_policy_version == 3
            assert mixed.token_ids[:3] == before.token_ids[:3]
        finally:
            await engine.close()

    _run(main())


def test_stop_tokens_strings_and_seeds(tiny: dict[str, Any], engine: JaxEngine) -> None:
    tok = engine.tokenizer
    prompt = tiny["prompts"][3]

    async def main() -> None:
        full = await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=30, ignore_eos=True))
        stop_id = full.token_ids[6]
        cut = await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=30, stop_token_ids=[stop_id]))
        first = min(i for i, t in enumerate(full.token_ids) if t in (stop_id, tiny["cfg"].eos_token_id))
        assert cut.token_ids == full.token_ids[: first + 1] and cut.finish_reason == "stop"
        # ignore_eos turns off token stops, stop_token_ids included (SGLang's meaning).
        assert len((await engine.generate(prompt, SamplingParams(
            greedy=True, max_new_tokens=30, stop_token_ids=[stop_id], ignore_eos=True))).token_ids) == 30

        # A stop string made of the text of tokens 4..5: generation ends at the token completing it.
        text = tok.decode(full.token_ids[4:6], skip_special_tokens=False)
        assert text.strip()
        by_text = await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=30, stop=[text],
                                                               ignore_eos=True))
        assert by_text.finish_reason == "stop" and len(by_text.token_ids) <= 6
        assert text in tok.decode(by_text.token_ids, skip_special_tokens=False)
        assert by_text.token_ids == full.token_ids[: len(by_text.token_ids)]

        # Seeds: reproducible alone or in a crowd, and different seeds differ.
        sp = SamplingParams(temperature=1.0, seed=123, max_new_tokens=16, ignore_eos=True)
        alone = await engine.generate(prompt, sp)
        crowd = await asyncio.gather(engine.generate(prompt, sp), *(
            engine.generate(p, SamplingParams(temperature=1.0, max_new_tokens=8)) for p in tiny["prompts"][:3]))
        assert crowd[0].token_ids == alone.token_ids
        other = await engine.generate(prompt, SamplingParams(temperature=1.0, seed=124, max_new_tokens=16,
                                                             ignore_eos=True))
        assert other.token_ids != alone.token_ids
        top1 = await engine.generate(prompt, SamplingParams(temperature=1.0, top_k=1, seed=5, max_new_tokens=16,
                                                            ignore_eos=True))
        assert top1.token_ids == full.token_ids[:16]

    _run(main())


def test_bad_input_is_reported_not_crashing(tiny: dict[str, Any], engine: JaxEngine) -> None:
    sp = SamplingParams(greedy=True, max_new_tokens=8)
    closed_tokenizerless = _engine(tiny)  # checks inputs before it ever runs (or compiles) anything

    async def main() -> None:
        too_long = await engine.generate(list(range(3, 3 + MAX_LEN + 5)), sp)
        assert too_long.finish_reason == "context_length" and too_long.token_ids == []
        # A prompt that fits but leaves less room than max_new_tokens stops when the cache row is full.
        near = await engine.generate([5] * (MAX_LEN - 3), SamplingParams(greedy=True, max_new_tokens=50, ignore_eos=True))
        # The last token's k/v is never written, so the row holds prompt + new tokens up to MAX_LEN + 1.
        assert near.finish_reason == "length" and len(near.token_ids) == 4
        with pytest.raises(ValueError, match="non-empty"):
            await engine.generate([], sp)
        with pytest.raises(ValueError, match=r"\[0, 512\)"):
            await engine.generate([1, 2, 100_000], sp)
        with pytest.raises(ValueError, match="tokenizer"):
            await closed_tokenizerless.generate([1, 2], SamplingParams(stop=["x"]))
        with pytest.raises(ValueError, match="top_p"):
            SamplingParams(top_p=0.0)
        ok = await engine.generate([5, 6, 7], sp)  # the engine still serves after all that
        assert len(ok.token_ids) >= 1
        assert (await engine.health())["ok"]
        closed = _engine(tiny)
        await closed.close()
        with pytest.raises(EngineClosedError):
            await closed.generate([5, 6, 7], sp)

    _run(main())


def test_cancelled_request_frees_its_slot(tiny: dict[str, Any], engine: JaxEngine) -> None:
    """An episode that times out must not keep decoding in a slot (or waiting in the queue)."""
    long_sp = SamplingParams(greedy=True, max_new_tokens=120, ignore_eos=True)

    async def main() -> None:
        waiting = [asyncio.create_task(engine.generate([5, 6, 7 + i], long_sp)) for i in range(engine.num_slots + 2)]
        while engine.decode_steps == 0 or engine.stats()["active"] < engine.num_slots:
            await asyncio.sleep(0.001)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert engine.stats()["active"] == 0 and engine.stats()["queued"] == 0
        ok = await engine.generate([5, 6, 7], SamplingParams(greedy=True, max_new_tokens=3))
        assert len(ok.token_ids) == 3

    _run(main())


def test_tensor_parallel_sampling_matches_single_device(tiny: dict[str, Any], engine: JaxEngine) -> None:
    """Params and cache sharded over a 2-way `tensor` mesh (fake CPU devices, own process): same tokens
    and logprobs as the single-device engine; the cache stays split after growing past its first bucket."""
    sp = SamplingParams(greedy=True, max_new_tokens=50, ignore_eos=True)  # 17 + 50 > 64: the cache grows
    prompts = tiny["prompts"][:3]

    async def main() -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, sp) for p in prompts)))

    single = _run(main())
    script = textwrap.dedent(f"""
        import asyncio, json, jax
        from jaxwebrl.engines import JaxEngine, SamplingParams
        from jaxwebrl.sharding import make_mesh
        assert len(jax.devices()) == 2
        mesh = make_mesh({{"data": 1, "fsdp": 1, "tensor": -1}})
        sp = SamplingParams(greedy=True, max_new_tokens=50, ignore_eos=True)
        async def main():
            e = JaxEngine.from_checkpoint({str(tiny["path"])!r}, mesh=mesh, num_slots=4, max_len={MAX_LEN},
                                          buckets={BUCKETS!r})
            print("SHARDING", e._params["layers"][0]["wq"].sharding.spec, e._cache["k"][0].sharding.spec)
            gens = await asyncio.gather(*(e.generate(p, sp) for p in {prompts!r}))
            print("AFTER", e.stats()["cache_capacity"], [a.sharding.spec for a in e._cache["k"]])  # grown, still split
            await e.close()
            return [(g.token_ids, g.logprobs) for g in gens]
        print(json.dumps(asyncio.run(main())))
    """)
    env = device_env(2)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'tensor'" in proc.stdout.split("SHARDING", 1)[1].splitlines()[0]
    after = proc.stdout.split("AFTER", 1)[1].splitlines()[0]
    assert after.split()[0] == str(MAX_LEN) and after.count("'tensor'") == tiny["cfg"].num_layers, after
    tp = json.loads(proc.stdout.strip().splitlines()[-1])
    for gen, (ids, lps) in zip(single, tp):
        assert gen.token_ids == ids
        np.testing.assert_allclose(gen.logprobs, lps, atol=1e-4)
