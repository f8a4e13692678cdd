"""Router over real JaxEngines: least outstanding requests, per-session stickiness, failover, fan-out of
weight updates; and make_engine picking engines from config."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jaxwebrl.engines import EngineConfig, EngineUnavailableError, JaxEngine, Router, SamplingParams, SGLangEngine, make_engine
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

LONG = SamplingParams(greedy=True, max_new_tokens=60, ignore_eos=True)
SHORT = SamplingParams(greedy=True, max_new_tokens=2, ignore_eos=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("tiny_router")
    cfg, params = make_tiny_checkpoint(path, tiny_config("qwen3"), seed=0, std=0.3)
    return {"path": path, "cfg": cfg, "params": params}


def _engines(tiny: dict[str, Any], n: int = 2) -> list[JaxEngine]:
    return [JaxEngine(tiny["cfg"], tiny["params"], num_slots=2, max_len=96, buckets=(32,), name=f"e{i}")
            for i in range(n)]


def test_least_outstanding_stickiness_and_failover(tiny: dict[str, Any]) -> None:
    router = Router(_engines(tiny))

    async def main() -> None:
        await router.generate([5, 6, 7], SHORT)  # compile both engines' programs first
        await router.generate([5, 6, 7], SHORT)
        assert router.routed == [1, 1]

        # A long request occupies one engine: everything else goes to the other one meanwhile.
        long_task = asyncio.create_task(router.generate([5, 6, 7], LONG))
        await asyncio.sleep(0)
        busy = router.outstanding.index(1)
        idle = 1 - busy
        shorts = [await router.generate([8, 9, 10 + i], SHORT) for i in range(3)]
        assert all(g.engine == f"e{idle}" for g in shorts)

        # Sticky: an episode stays on its engine even when that engine is the busier one.
        first = await router.generate([11, 12], SHORT, session_id="ep-1")
        home = int(first.engine[1:])
        hold = [asyncio.create_task(router.generate([13, 14], LONG, session_id="ep-1")) for _ in range(2)]
        await asyncio.sleep(0)
        assert router.outstanding[home] >= 2
        again = await router.generate([11, 12, 15], SHORT, session_id="ep-1")
        assert again.engine == first.engine
        fresh = await router.generate([16], SHORT, session_id="ep-2")  # a new episode goes where it is quiet
        assert fresh.engine != first.engine or router.outstanding[1 - home] >= router.outstanding[home]
        await asyncio.gather(long_task, *hold)
        assert router.session_engine("ep-1") == home
        router.end_session("ep-1")
        assert router.session_engine("ep-1") is None

        # Failover: a closed engine is marked down and its sessions move on.
        sticky = await router.generate([1, 2], SHORT, session_id="ep-3")
        gone = int(sticky.engine[1:])
        await router.engines[gone].close()
        moved = await router.generate([1, 2, 3], SHORT, session_id="ep-3")
        assert moved.engine == f"e{1 - gone}" and gone in router.down
        health = await router.health()
        assert health["engines"][f"e{gone}"]["ok"] is False and gone in router.down

        await router.update_weights(tiny["params"], version=4)
        assert router.engines[1 - gone].version == 4  # type: ignore[attr-defined]
        await router.close()
        with pytest.raises(EngineUnavailableError, match="all 2 engines are down"):
            await router.generate([1], SHORT)

    asyncio.run(main())


def test_make_engine_from_config(tiny: dict[str, Any]) -> None:
    engine = make_engine(EngineConfig(type="jax", checkpoint=str(tiny["path"]), num_slots=2, max_len=64))
    assert isinstance(engine, JaxEngine) and engine.tokenizer is not None and engine.num_slots == 2
    asyncio.run(engine.close())
    trainer_side = make_engine(EngineConfig(type="jax"), params=tiny["params"], model_cfg=tiny["cfg"], version=3)
    assert isinstance(trainer_side, JaxEngine) and trainer_side.version == 3
    asyncio.run(trainer_side.close())
    one = make_engine(EngineConfig(type="sglang", url="http://127.0.0.1:1"))
    assert isinstance(one, SGLangEngine)
    many = make_engine(EngineConfig(type="sglang", urls="http://127.0.0.1:1, http://127.0.0.1:2"))
    assert isinstance(many, Router) and len(many.engines) == 2
    # The run config's engine section, as a config file gives it: empty strings mean "not set".
    from jaxwebrl.config import default_config, parse_config

    c = default_config()
    c.engine.type, c.engine.url = "sglang", "http://127.0.0.1:1"
    from_cd = make_engine(parse_config(c).engine, params=tiny["params"], model_cfg=tiny["cfg"])
    assert isinstance(from_cd, SGLangEngine) and from_cd.export_dir is not None and from_cd.tokenizer_dir is None
    with pytest.raises(ValueError, match="type: 'vllm' is not allowed"):
        make_engine(EngineConfig(type="vllm"))
    with pytest.raises(ValueError, match="engine.url"):
        make_engine(EngineConfig(type="sglang"))
    with pytest.raises(ValueError, match="checkpoint"):
        make_engine(EngineConfig(type="jax"))
