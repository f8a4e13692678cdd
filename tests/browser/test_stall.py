"""run_within: a late coroutine's TimeoutError names where it waited; results, errors and cancellation pass
through as with asyncio.wait_for. Pure asyncio: the waits are on futures that never resolve, so the outcome
does not depend on the machine's speed."""

from __future__ import annotations

import asyncio

import pytest

from jaxwebrl.browser.stall import StepStalled, await_chain, run_within


async def _innermost(never: asyncio.Future) -> None:
    await never


async def _middle(never: asyncio.Future) -> None:
    await asyncio.wait_for(_innermost(never), 3600)  # followed into the task wait_for runs


async def _outer(never: asyncio.Future) -> str:
    await _middle(never)
    return "unreached"


def test_timeout_names_the_await_chain_and_cancels_it():
    async def go():
        never = asyncio.get_running_loop().create_future()
        with pytest.raises(asyncio.TimeoutError) as info:
            await run_within(_outer(never), 0.05)
        return info.value, never

    err, never = asyncio.run(go())
    assert isinstance(err, StepStalled)
    names = [w.split(" ")[0] for w in err.where]
    assert names[:2] == ["_outer", "_middle"] and "wait_for" in names, err.where
    assert names.index("_innermost") > names.index("wait_for") and err.where[-1] == "<Future>", err.where
    assert "test_stall.py:" in err.where[0] and str(err) == " -> ".join(err.where)
    assert never.cancelled()  # the late coroutine was cancelled down to what it awaited


def test_result_error_and_outer_cancellation_pass_through():
    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def go():
        assert await run_within(value(), 60) == 7
        with pytest.raises(ValueError, match="boom"):
            await run_within(fails(), 60)
        never = asyncio.get_running_loop().create_future()
        waiting = asyncio.Event()

        async def wait_on_never() -> None:
            waiting.set()
            await never  # no yield between the two: once `waiting` is seen, this awaits `never`

        outer = asyncio.ensure_future(run_within(wait_on_never(), 3600))
        await waiting.wait()
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        return never

    assert asyncio.run(go()).cancelled()


def test_await_chain_of_a_finished_coroutine_is_empty():
    async def done() -> None:
        return None

    coro = done()
    with pytest.raises(StopIteration):
        coro.send(None)
    assert await_chain(coro) == []
