"""Weight sync without a restart: sglang-jax on CPU started the way a run starts it (`make_engine` with
`engine.type='sglang'`, `launch=True`, `weight_sync='disk'`: jaxwebrl's sglang_jax_worker.py, sglang-jax's server
with its scheduler in-process plus `/update_weights_from_disk`), then `Engine.update_weights` from the trainer's
params and from a checkpoint directory. The reference is the JaxEngine with the same params (greedy tokens and
logprobs). One server for the module (about 40 s to start on a quiet machine; the tests after it take seconds).

Needs the Python 3.12 venv with sglang-jax (`scripts/setup_sglang_env.sh`); without it the module is skipped
with that reason."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import jax
import numpy as np
import pytest

from judge_fixtures import sglang_python_or_skip

from jaxwebrl.engines import EngineConfig, JaxEngine, SamplingParams, SGLangEngine, WeightSyncError, make_engine
from jaxwebrl.engines.config import SGLangServerConfig
from jaxwebrl.engines.sglang_server import READY_LINE
from jaxwebrl.models import export_hf, init_params
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

PYTHON = sglang_python_or_skip()
CFG = tiny_config("qwen3", head_dim=128, num_heads=2, num_kv_heads=1)  # sglang-jax pads head_dim to 128
GREEDY = SamplingParams(greedy=True, max_new_tokens=12, ignore_eos=True)


LONG = SamplingParams(greedy=True, max_new_tokens=16, ignore_eos=True)


def _references(cfg: Any, params_a: Any, params_b: Any, prompts: list[list[int]]) -> dict[str, list[Any]]:
    """The JaxEngine's greedy generations under weights A and B (one engine, weights swapped in place)."""
    async def main() -> dict[str, list[Any]]:
        engine = JaxEngine(cfg, params_a, num_slots=4, max_len=128, buckets=(64, 128))
        try:
            out = {"a": list(await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts))),
                   "a_long": [await engine.generate(prompts[1], LONG)]}
            await engine.update_weights(params_b, version=1)
            out["b"] = list(await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts)))
            return out
        finally:
            await engine.close()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("tiny_qwen3_a")
    cfg, params_a = make_tiny_checkpoint(path, CFG, seed=0, std=0.3)
    params_b = init_params(cfg, jax.random.key(11), std=0.3)
    rng = np.random.default_rng(3)
    prompts = [list(map(int, rng.integers(3, cfg.vocab_size, n))) for n in (5, 40)]
    ref = _references(cfg, params_a, params_b, prompts)
    assert [g.token_ids for g in ref["a"]] != [g.token_ids for g in ref["b"]]  # the two weight sets are told apart
    # Shapes compile on first use instead of at start (sglang-jax precompiles 7 prefill and 4 decode shapes).
    config = EngineConfig(type="sglang", launch=True, weight_sync="disk", checkpoint=str(path),
                          export_dir=str(tmp_path_factory.mktemp("exports")),
                          server=SGLangServerConfig(device="cpu", python=PYTHON, extra_args="--disable-precompile"))
    engine = make_engine(config, model_cfg=cfg)
    assert isinstance(engine, SGLangEngine) and engine.server is not None
    try:
        yield {"path": path, "cfg": cfg, "a": params_a, "b": params_b, "ref": ref,
               "server": engine.server, "config": config, "prompts": prompts}
    finally:
        asyncio.run(engine.close())  # owns the server: stops it
    assert not engine.server.running


def _client(served: Any) -> SGLangEngine:
    """A client of the module's server, as make_engine builds it (its own, bound to this test's event loop)."""
    config = served["config"]
    return SGLangEngine.for_server(served["server"], weight_sync="disk", model_cfg=served["cfg"],
                                   tokenizer_dir=str(served["path"]), export_dir=config.export_dir)


def _status(served: Any) -> dict[str, Any]:
    return httpx.get(f"{served['server'].url}/weight_reload_status", timeout=30).json()


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want) and all(len(g.token_ids) == GREEDY.max_new_tokens for g in got)
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-3)


def test_update_serves_new_weights_in_the_same_process(served: Any) -> None:
    server, prompts = served["server"], served["prompts"]
    pid, starts = server.proc.pid, server.log_path.read_text(errors="replace").count(READY_LINE)
    assert server.weight_reload and "sglang_jax_worker.py" in " ".join(server.command())
    assert starts == 1

    fresh = [list(map(int, np.random.default_rng(seed).integers(3, 500, len(prompts[0])))) for seed in (7, 8)]
    compiles: list[int] = []

    async def main() -> tuple[list[Any], list[Any], list[Any]]:
        engine = _client(served)

        async def run() -> list[Any]:
            return list(await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts)))

        async def count_compiles() -> None:
            compiles.append((await asyncio.to_thread(_status, served))["compiles"])

        try:
            before = await run()  # also fills the prefix cache
            await engine.generate(fresh[0], GREEDY)  # one uncached prompt alone: its shapes are compiled now
            await count_compiles()
            await engine.update_weights(served["b"], version=1)  # params -> export -> in-place reload + flush
            await count_compiles()
            await engine.generate(fresh[1], GREEDY)  # the same shapes under the new weights: nothing to compile
            await count_compiles()
            after = await run()  # the same prompts again: their prefixes are cached
            await engine.update_weights(str(served["path"]), version=2)  # a checkpoint directory, back to A
            back = await run()
            return before, after, back
        finally:
            await engine.close()

    before, after, back = asyncio.run(main())
    _same(before, served["ref"]["a"])
    _same(after, served["ref"]["b"])
    _same(back, served["ref"]["a"])
    assert {g.policy_version for g in before} == {0} and {g.policy_version for g in after} == {1}
    assert {g.final_policy_version for g in back} == {2}
    # No restart: the same server process, started once, and it did reload twice.
    assert server.running and server.proc.pid == pid
    assert server.log_path.read_text(errors="replace").count(READY_LINE) == 1
    assert compiles[0] > 0 and compiles[2] == compiles[1]  # the forward did not recompile after the reload
    status = _status(served)
    assert status["reloads"] >= 2 and status["weight_version"] == "2"
    assert Path(status["model_path"]).resolve() == Path(served["path"]).resolve()


def test_the_flush_is_what_makes_repeated_prompts_right(served: Any) -> None:
    """Control for the test above: the same reload with the cache flush turned off serves a cached prompt
    from stale prefix KV, so the output differs from the new weights' reference. Then a flushed reload fixes it."""
    prompt = served["prompts"][1]
    url = served["server"].url

    async def main() -> tuple[Any, Any]:
        engine = _client(served)
        try:
            await engine.update_weights(str(served["path"]), version=10)
            await engine.generate(prompt, GREEDY)  # caches the prompt's KV under weights A
            export = Path(engine.export_dir) / "policy_b_unflushed"
            await asyncio.to_thread(export_hf, served["cfg"], served["b"], export, served["path"])
            body = SGLangEngine.reload_body(export, 11) | {"flush_cache": False}
            async with httpx.AsyncClient(timeout=300) as http:
                assert (await http.post(f"{url}/update_weights_from_disk", json=body)).json()["success"]
            stale = await engine.generate(prompt, GREEDY)
            await engine.update_weights(export, version=12)  # same weights, flushed this time
            fresh = await engine.generate(prompt, GREEDY)
            return stale, fresh
        finally:
            await engine.close()

    stale, fresh = asyncio.run(main())
    ref_b = served["ref"]["b"][1]
    _same([fresh], [ref_b])
    assert stale.token_ids != ref_b.token_ids


def test_running_requests_finish_on_old_weights_and_new_ones_wait(served: Any) -> None:
    p_running, p_during = served["prompts"][1], served["prompts"][0]

    async def main() -> tuple[Any, Any]:
        engine = _client(served)
        try:
            await engine.update_weights(str(served["path"]), version=20)
            running = asyncio.create_task(engine.generate(p_running, LONG))
            for _ in range(600):  # until the server runs it
                if (await asyncio.to_thread(_status, served))["running_requests"] > 0:
                    break
                await asyncio.sleep(0.05)
            update = asyncio.create_task(engine.update_weights(served["b"], version=21))
            await asyncio.sleep(0)  # the update has begun: later generate calls wait for it
            assert engine._updating is not None
            during = asyncio.create_task(engine.generate(p_during, GREEDY))
            await update
            assert running.done()  # the server drained it before it swapped the weights
            return await running, await during
        finally:
            await engine.close()

    running, during = asyncio.run(main())
    assert len(running.token_ids) == LONG.max_new_tokens
    assert running.policy_version == running.final_policy_version == 20
    assert running.token_ids == served["ref"]["a_long"][0].token_ids
    np.testing.assert_allclose(running.logprobs, served["ref"]["a_long"][0].logprobs, atol=1e-3)
    assert during.policy_version == 21
    _same([during], served["ref"]["b"][:1])


def test_a_checkpoint_of_another_shape_is_refused_and_old_weights_keep_serving(served: Any, tmp_path: Path) -> None:
    bad_cfg = served["cfg"].replace(intermediate_size=96)  # the MLP is narrower than the served model's
    export_hf(bad_cfg, init_params(bad_cfg, jax.random.key(5), std=0.3), tmp_path / "bad", served["path"])
    prompt = served["prompts"][0]

    async def main() -> tuple[int, Any]:
        engine = _client(served)
        try:
            await engine.update_weights(str(served["path"]), version=30)
            with pytest.raises(WeightSyncError, match=r"shapes differ.*mlp"):
                await engine.update_weights(str(tmp_path / "bad"), version=31)
            return engine.version, await engine.generate(prompt, GREEDY)
        finally:
            await engine.close()

    version, still = asyncio.run(main())
    assert version == 30 and still.policy_version == 30
    _same([still], served["ref"]["a"][:1])
    assert _status(served)["weight_version"] == "30"
