"""One HTTP call with retries and exponential backoff, shared by the HTTP engine clients (SGLang, OpenAI-compatible)."""

from __future__ import annotations

import asyncio
import random
from typing import Awaitable, Callable, Collection

import httpx


async def request_with_retries(
    send: Callable[[], Awaitable[httpx.Response]], retries: int, backoff: float, retry_status: Collection[int],
    before_attempt: Callable[[], Awaitable[None]] | None = None,
) -> tuple[httpx.Response | None, str]:
    """`send()` up to `retries + 1` times, sleeping `backoff * 2**k` (with 10% jitter) between tries, on
    connection errors, timeouts and the `retry_status` codes. Returns (the response, "") or (None, the last
    failure) for the caller to raise its own message."""
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            await asyncio.sleep(backoff * 2 ** (attempt - 1) * (1 + 0.1 * random.random()))
        if before_attempt is not None:
            await before_attempt()
        try:
            resp = await send()
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if resp.status_code in retry_status:
            last = f"HTTP {resp.status_code}: {resp.text[:200]}"
            continue
        return resp, ""
    return None, last
