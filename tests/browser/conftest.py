"""Shared fixtures for the browser tests: one asyncio loop in a background thread (no pytest-asyncio),
one BrowserPool, the local sites and the MiniWoB++ server, all started once per test session."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Iterator, TypeVar

import pytest

from envs.local_sites import LocalSitesSuite
from envs.miniwob import MiniWoBSuite
from jaxwebrl.browser import BrowserPool, EnvConfig, EvalResult, PoolConfig
from jaxwebrl.browser.session import BrowserSession

T = TypeVar("T")


class Runner:
    """Runs coroutines on one long-lived loop so that the pool survives across tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@dataclass
class UrlTask:
    """A minimal Task: open `url`, never done by itself, reward 1 if the answer equals `expected`."""

    url: str
    origins: tuple[str, ...]
    expected: str = ""
    task_id: str = "url_task"

    def allowed_origins(self) -> tuple[str, ...]:
        return self.origins

    async def setup(self, session: BrowserSession, seed: int) -> str:
        await session.goto(self.url)
        return f"Play with {self.url}"

    async def is_done(self, session: BrowserSession) -> bool:
        return False

    async def evaluate(self, session: BrowserSession, answer: str | None) -> EvalResult:
        ok = answer == self.expected
        return EvalResult(float(ok), ok)


@pytest.fixture(scope="session")
def runner() -> Iterator[Runner]:
    r = Runner()
    yield r
    r.close()


@pytest.fixture(scope="session")
def sites() -> Iterator[LocalSitesSuite]:
    suite = LocalSitesSuite().start()
    yield suite
    suite.stop()


@pytest.fixture(scope="session")
def miniwob() -> Iterator[MiniWoBSuite]:
    suite = MiniWoBSuite().start()
    yield suite
    suite.stop()


@pytest.fixture(scope="session")
def pool(runner: Runner) -> Iterator[BrowserPool]:
    async def make() -> BrowserPool:
        return await BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=8), EnvConfig()).start()

    p = runner.run(make())
    yield p
    runner.run(p.close())


@pytest.fixture()
def playground(sites: LocalSitesSuite) -> UrlTask:
    url = sites.urls["playground"]
    return UrlTask(url + "/", (url,), expected="42")


def pg_task(sites: LocalSitesSuite, path: str = "/", extra: tuple[str, ...] = ()) -> UrlTask:
    url = sites.urls["playground"]
    return UrlTask(url + path, (url, *extra), expected="42")


def find_id(obs: Any, role: str | None = None, name: str | None = None, contains: str | None = None) -> str:
    """Id of the first element with this role and name (or name containing `contains`)."""
    for el in obs.elements:
        if role is not None and el.role != role:
            continue
        label = el.name or el.text
        if name is not None and label != name:
            continue
        if contains is not None and contains not in label:
            continue
        return el.id
    raise LookupError(f"no element role={role} name={name} contains={contains} in\n{obs.text[:3000]}")
