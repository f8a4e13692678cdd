"""Where a step that hit its time limit was waiting.

`asyncio.wait_for` only says that a limit fired. A step is parse -> actions -> settle -> observe, each awaiting
Playwright, and a rare hang (one run in a full test suite) cannot be diagnosed from "step timed out". So the
step runs under `run_within`, which, before it cancels the late coroutine, walks its await chain (each
coroutine's `cr_await`, through `wait_for`'s inner task) and puts the frames into the TimeoutError it raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
MAX_FRAMES = 24


class StepStalled(asyncio.TimeoutError):
    """A time limit fired; `where` is the await chain it was waiting in, outermost first."""

    def __init__(self, where: list[str]):
        super().__init__(" -> ".join(where))
        self.where = where


def _frame_name(frame: Any) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/jaxwebrl/", "/site-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = re.sub(r"^.*/python3\.\d+/", "", path) if "/python3." in path else os.path.basename(path)
    return f"{code.co_name} ({path}:{frame.f_lineno})"


def await_chain(awaitable: Any) -> list[str]:
    """The frames a suspended coroutine is waiting in, outermost first, ending with what the innermost awaits
    (a Future, a sleep). Follows `asyncio.wait_for` into the task it runs."""
    chain: list[str] = []
    obj = awaitable
    while obj is not None and len(chain) < MAX_FRAMES:
        if isinstance(obj, asyncio.Task):
            obj = obj.get_coro()
            continue
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        if frame is None:
            if not asyncio.iscoroutine(obj):  # a finished coroutine adds nothing
                kind = type(obj).__name__
                chain.append("<Future>" if kind == "FutureIter" else f"<{kind}>")
            break
        chain.append(_frame_name(frame))
        inner = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
        task = frame.f_locals.get("fut") if frame.f_code.co_name == "wait_for" else None
        obj = task if isinstance(task, asyncio.Task) else inner
    return chain


async def run_within(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """`asyncio.wait_for(coro, timeout)`, but a late coroutine's await chain goes into the StepStalled
    (a TimeoutError) raised. Cancelling the caller cancels the coroutine, as wait_for does."""
    task = asyncio.ensure_future(coro)
    try:
        await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    if task.done():
        return task.result()
    where = await_chain(task)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise StepStalled(where)
