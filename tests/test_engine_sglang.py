"""SGLangEngine against a real sglang-jax server on CPU (loopback), started from a tiny exported Qwen3
checkpoint (head_dim 128: sglang-jax pads head_dim to a multiple of 128). The server lives for this module.

Needs the Python 3.12 venv with sglang-jax (`scripts/setup_sglang_env.sh`); without it the module is
skipped with that reason."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxwebrl.engines import JaxEngine, SamplingParams, SGLangEngine, SGLangServer, WeightSyncError
from jaxwebrl.engines.sglang_server import default_sglang_jax_python
from jaxwebrl.models import forward, init_params, token_logprobs
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config


def _sglang_python() -> str:
    python = default_sglang_jax_python()
    if python is None or not Path(python).exists():
        pytest.skip("no sglang-jax venv (.venv-sglang or $JAXWEBRL_SGLANG_PYTHON): run scripts/setup_sglang_env.sh "
                    "(needs Python >= 3.12)", allow_module_level=True)
    probe = subprocess.run([python, "-c", "import sgl_jax"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot import sgl_jax ({probe.stderr.strip()[-200:]}): run scripts/setup_sglang_env.sh",
                    allow_module_level=True)
    return python


PYTHON = _sglang_python()
CFG = tiny_config("qwen3", head_dim=128, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("tiny_qwen3_hd128")
    cfg, params = make_tiny_checkpoint(path, CFG, seed=0, std=0.3)
    server = SGLangServer(path, device="cpu", python=PYTHON, log_path=path / "server.log")
    server.start()  # the launcher's CPU defaults: --max-total-tokens 8192 --max-running-requests 8 --context-length 1024
    rng = np.random.default_rng(1)
    prompts = [list(map(int, rng.integers(3, cfg.vocab_size, n))) for n in (4, 9, 23, 40, 61, 100)]
    try:
        yield {"path": path, "cfg": cfg, "params": params, "server": server, "prompts": prompts,
               "export": tmp_path_factory.mktemp("exports")}
    finally:
        server.stop()


def _jax_generate(cfg: Any, params: Any, prompts: list[list[int]], sp: SamplingParams) -> list[Any]:
    async def main() -> list[Any]:
        engine = JaxEngine(cfg, params, num_slots=8, max_len=256, buckets=(128, 256))
        try:
            return list(await asyncio.gather(*(engine.generate(p, sp) for p in prompts)))
        finally:
            await engine.close()

    return asyncio.run(main())


def test_greedy_tokens_and_logprobs_equal_jax_engine(served: Any) -> None:
    # 60 new tokens: past sglang-jax's 50-token output chunk, whose logprob lists the client must stitch.
    sp = SamplingParams(greedy=True, max_new_tokens=60)

    async def main() -> list[Any]:
        engine = SGLangEngine(served["server"].url)
        try:
            assert (await engine.health())["context_length"] == 1024
            # Concurrent, so they decode in one batch (the launcher disables sglang-jax's overlap scheduler on
            # CPU, which got batched greedy tokens wrong).
            return list(await asyncio.gather(*(engine.generate(p, sp) for p in served["prompts"])))
        finally:
            await engine.close()

    remote = asyncio.run(main())
    local = _jax_generate(served["cfg"], served["params"], served["prompts"], sp)
    for a, b in zip(local, remote):
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-3)
    assert sum(len(g.token_ids) > 50 for g in remote) >= 2


def test_concurrent_first_requests_share_one_context_lookup(served: Any) -> None:
    """A fresh client's first burst asks the server its context length once, not once per request (the
    server's access log counts the lookups)."""
    log = Path(served["server"].log_path)

    def lookups() -> int:
        text = log.read_text(errors="replace")
        return text.count("GET /get_model_info") + text.count("GET /get_server_info")

    async def main() -> list[Any]:
        engine = SGLangEngine(served["server"].url)
        try:
            sp = SamplingParams(greedy=True, max_new_tokens=4, ignore_eos=True)
            return list(await asyncio.gather(*(engine.generate(p, sp) for p in served["prompts"])))
        finally:
            await engine.close()

    before = lookups()
    out = asyncio.run(main())
    assert [len(g.token_ids) for g in out] == [4] * len(served["prompts"])
    assert 1 <= lookups() - before <= 2  # /get_model_info, and /get_server_info if the first has no length


def test_sampling_controls_pass_through(served: Any) -> None:
    prompt = served["prompts"][2]

    async def main() -> tuple[Any, Any, Any]:
        engine = SGLangEngine(served["server"].url)
        try:
            full = await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=20, ignore_eos=True))
            cut = await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=20,
                                                               stop_token_ids=[full.token_ids[5]]))
            sampled = await engine.generate(prompt, SamplingParams(temperature=1.0, top_k=20, max_new_tokens=12,
                                                                   ignore_eos=True))
            return full, cut, sampled
        finally:
            await engine.close()

    full, cut, sampled = asyncio.run(main())
    first = min(i for i, t in enumerate(full.token_ids) if t in (full.token_ids[5], served["cfg"].eos_token_id))
    assert cut.token_ids == full.token_ids[: first + 1] and cut.finish_reason == "stop"
    assert len(sampled.token_ids) == 12 and sampled.finish_reason == "length"
    # Sampled logprobs follow the same convention: log softmax(logits / T) of the unfiltered model
    # distribution (top-k does not renormalise them), T = 1 here, as the trainer recomputes them.
    seq = jnp.asarray([prompt + sampled.token_ids])
    logits, _ = forward(served["cfg"], served["params"], seq, jnp.arange(seq.shape[1])[None])
    n = len(prompt)
    ref = token_logprobs(logits[0, n - 1 : -1], jnp.asarray(sampled.token_ids), 1.0)
    np.testing.assert_allclose(sampled.logprobs, np.asarray(ref), atol=1e-3)


def test_context_overflow_is_a_finish_reason(served: Any) -> None:
    async def main() -> tuple[Any, Any]:
        engine = SGLangEngine(served["server"].url)
        try:
            too_long = await engine.generate([5] * 1100, SamplingParams(greedy=True, max_new_tokens=8))
            near = await engine.generate([5] * 1000, SamplingParams(greedy=True, max_new_tokens=100, ignore_eos=True))
            return too_long, near
        finally:
            await engine.close()

    too_long, near = asyncio.run(main())
    assert too_long.finish_reason == "context_length" and too_long.token_ids == []
    # The client clamps max_new_tokens to the room left (the server would reject the request outright).
    # (sglang-jax stops one token short of that room; the point is a normal 'length' finish, not an error.)
    assert near.finish_reason == "length" and 1 <= len(near.token_ids) <= 1024 - 1 - 1000


def test_update_weights_from_disk_missing_names_alternatives(served: Any) -> None:
    async def main() -> None:
        engine = SGLangEngine(served["server"].url, model_cfg=served["cfg"], tokenizer_dir=served["path"],
                              export_dir=served["export"])
        try:
            with pytest.raises(WeightSyncError, match="restart.*jax|jax.*restart"):
                await engine.update_weights(served["params"], version=7)
            assert engine.version == 0
        finally:
            await engine.close()

    asyncio.run(main())


def test_restart_strategy_serves_new_weights(served: Any) -> None:
    """Runs last: restarts the module's server on an exported checkpoint of new params."""
    new_params = init_params(served["cfg"], jax.random.key(11), std=0.3)
    sp = SamplingParams(greedy=True, max_new_tokens=16, ignore_eos=True)
    prompts = served["prompts"][:3]

    async def main() -> list[Any]:
        engine = SGLangEngine.for_server(served["server"], weight_sync="restart", model_cfg=served["cfg"],
                                         tokenizer_dir=served["path"], export_dir=served["export"])
        try:
            before = await engine.generate(prompts[0], sp)
            # A request sent while the server restarts waits for it instead of failing.
            update = asyncio.create_task(engine.update_weights(new_params, version=1))
            # Send it once the restart has begun (the export before it takes a while on a loaded machine, and
            # a request sent before the restart is rightly served by the old weights).
            while engine._updating is None:
                await asyncio.sleep(0.05)
            during = asyncio.create_task(engine.generate(prompts[0], sp))
            await update
            after = list(await asyncio.gather(*(engine.generate(p, sp) for p in prompts)))
            assert (await during).token_ids == after[0].token_ids
            assert after[0].token_ids != before.token_ids
            assert all(g.policy_version == 1 for g in after)
            return after
        finally:
            await engine.close()

    after = asyncio.run(main())
    expected = _jax_generate(served["cfg"], new_params, prompts, sp)
    for a, b in zip(expected, after):
        assert b.token_ids == a.token_ids
        np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-3)
