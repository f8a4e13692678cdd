"""The pool's browsers: one slot per local Chromium process or remote server connection, kept alive.

BrowserPool (pool.py) puts envs and contexts into these browsers; this module starts them (local:
`executable_path` with the pool's flags, `relaunch_attempts` tries; remote: `fleet.connect` to a
`python -m jaxwebrl.browser.serve` server with the fleet's secret), notices a lost one (crash, kill, a server
or its host gone) and tells the pool (`on_lost`: its episodes there end `env_error`), relaunches or reconnects
it in the background with exponential backoff (`reconnect_backoff_s` doubling up to
`reconnect_backoff_max_s`) until it is back, and probes a browser suspected of hanging, killing it if it does
not answer. At start every remote endpoint must answer: the failures become one `RemoteEndpointError`
naming `config.env.remote_endpoints`, each url and its fix (a fleet that starts short would look like a slow
run).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from playwright.async_api import Browser, BrowserContext, Playwright, async_playwright

from jaxwebrl.browser import fleet
from jaxwebrl.browser.config import PoolConfig
from jaxwebrl.browser.egress import NO_EXTENSIONS_FLAG, WEBRTC_ARGS, EgressGateway, safety_args
from jaxwebrl.browser.fleet import REMOTE_FIELD, RemoteEndpointError

if TYPE_CHECKING:
    from jaxwebrl.browser.env import BrowserEnv

log = logging.getLogger("jaxwebrl.browser.pool")


@dataclass(eq=False)
class BrowserSlot:
    """One browser process (or remote connection) and the contexts/envs the pool put in it."""

    index: int
    marker: str
    endpoint: str | None = None
    browser: Browser | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    contexts: set[BrowserContext] = field(default_factory=set)
    envs: set["BrowserEnv"] = field(default_factory=set)  # envs whose session lives in this browser
    launches: int = 0  # successful launches / connections
    losses: int = 0  # disconnects while the pool ran (crash, kill, remote server gone)
    opened: int = 0  # contexts created in this slot, ever
    last_error: str = ""  # why the last launch / connection attempt failed
    relaunching: bool = False
    opening: int = 0  # contexts being created right now: counted so concurrent resets spread over browsers

    def connected(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    def live(self) -> bool:
        return self.ready.is_set() and self.connected()


class Browsers:
    """The slots of one pool (`config.remote_endpoints`, else `num_browsers` local ones), their Playwright,
    and the background relaunches. `on_lost(slot)` runs when a slot's browser disconnects."""

    def __init__(self, config: PoolConfig, gateway: EgressGateway, on_lost: Callable[[BrowserSlot], None]) -> None:
        self.config, self.gateway, self.on_lost = config, gateway, on_lost
        endpoints = config.remote_endpoints
        self.slots = [BrowserSlot(i, f"--jaxwebrl-slot={uuid.uuid4().hex}", endpoints[i] if endpoints else None)
                      for i in range(len(endpoints) or config.num_browsers)]
        self.crashes = 0
        self.closing = False
        self._pw: Playwright | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        """Launch or connect every browser; remote endpoints that fail stop the start with one error listing
        each and its fix (the caller closes)."""
        self._pw = await async_playwright().start()
        results = await asyncio.gather(*(self._launch(s) for s in self.slots), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            remote = [r for r in failed if isinstance(r, RemoteEndpointError)]
            if remote:
                lines = "\n  ".join(str(r) for r in remote)
                raise RemoteEndpointError(f"{REMOTE_FIELD}: {len(remote)} of {len(self.slots)} browser servers cannot "
                                          f"be used:\n  {lines}") from remote[0]
            raise failed[0]

    async def close(self) -> None:
        self.closing = True
        for t in list(self._tasks):
            t.cancel()
        for s in self.slots:
            if s.browser is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(s.browser.close(), 10)
        if self._pw is not None:
            with contextlib.suppress(Exception):
                await self._pw.stop()
            self._pw = None

    def launch_args(self) -> list[str]:
        """A local browser's flags: the configured ones plus the safety flags (egress.safety_args). A fleet
        server builds the same safety flags from this pool's gateway address itself."""
        return safety_args(self.config.args, self.gateway.resolver_rules())

    # ---- launching, losing, relaunching -----------------------------------------------------------
    async def _launch(self, slot: BrowserSlot) -> None:
        """Start (local, `relaunch_attempts` tries) or connect (remote, one try) the slot's browser."""
        assert self._pw is not None
        cfg = self.config
        if slot.endpoint:
            browser = await self._connect(slot)
        else:
            last: Exception | None = None
            for _ in range(cfg.relaunch_attempts):
                try:
                    browser = await self._pw.chromium.launch(
                        executable_path=cfg.executable_path, args=[*self.launch_args(), slot.marker],
                        headless=cfg.headless, timeout=cfg.launch_timeout_s * 1000,
                    )
                    break
                except Exception as exc:  # retry; a bad config fails after `relaunch_attempts`
                    last = exc
                    await asyncio.sleep(0.5)
            else:
                slot.last_error = f"{type(last).__name__}: {last}"
                raise RuntimeError(f"could not start browser {slot.index}: {last}")
        if self.closing:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 5)
            return
        slot.browser = browser
        slot.launches += 1
        slot.last_error = ""
        browser.on("disconnected", lambda b, s=slot: self._on_disconnect(s, b))
        slot.ready.set()

    async def _connect(self, slot: BrowserSlot) -> Browser:
        """Connect to the slot's browser server with the fleet's secret (read now: a rotated file takes effect
        on the next connection) and check its browser's flags. Raises `RemoteEndpointError` with the fix."""
        assert self._pw is not None and slot.endpoint
        try:
            token = fleet.read_token(self.config.remote_token_file, fleet.TOKEN_FIELD)
            required = [f"--host-resolver-rules={self.gateway.resolver_rules()}", *WEBRTC_ARGS, NO_EXTENSIONS_FLAG]
            return await fleet.connect(self._pw, slot.endpoint, token, self.gateway.host,
                                       [p.port for p in self.gateway.ports], required, self.config.launch_timeout_s)
        except (RemoteEndpointError, fleet.TokenError) as exc:
            slot.last_error = str(exc)
            raise RemoteEndpointError(slot.last_error) from exc

    def _on_disconnect(self, slot: BrowserSlot, browser: Browser) -> None:
        if browser is not slot.browser:
            return
        slot.ready.clear()
        slot.browser = None
        slot.contexts.clear()
        self.on_lost(slot)
        if self.closing:
            return
        self.crashes += 1
        slot.losses += 1
        if slot.endpoint:
            log.warning("browser server %s disconnected; its running episodes end env_error, new ones go to the "
                        "%d live servers; reconnecting with backoff", slot.endpoint,
                        sum(1 for s in self.slots if s.ready.is_set()))
        t = asyncio.ensure_future(self._relaunch(slot))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _relaunch(self, slot: BrowserSlot) -> None:
        """Relaunch / reconnect until it works or the pool closes: the first retry at once, then waits of
        `reconnect_backoff_s`, doubling up to `reconnect_backoff_max_s`."""
        if slot.relaunching:
            return
        slot.relaunching = True
        delay, t0, tries = self.config.reconnect_backoff_s, time.monotonic(), 0
        try:
            while not self.closing:
                tries += 1
                try:
                    await self._launch(slot)
                    if slot.endpoint:
                        log.warning("browser server %s is back after %.1f s (%d tries); it takes new contexts",
                                    slot.endpoint, time.monotonic() - t0, tries)
                    return
                except Exception as exc:
                    slot.last_error = slot.last_error or f"{type(exc).__name__}: {exc}"
                    log.debug("reconnecting browser %d (%s) failed: %s", slot.index, slot.endpoint or "local",
                              slot.last_error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.reconnect_backoff_max_s)
        finally:
            slot.relaunching = False

    # ---- health -----------------------------------------------------------------------------------
    async def check_health(self, slot: BrowserSlot, timeout_s: float = 5.0) -> bool:
        """Probe the browser; kill a hung one (the disconnect handler relaunches it). True if healthy."""
        browser = slot.browser
        if browser is None or not browser.is_connected():
            return False
        try:  # the probe never navigates, so it needs no proxy port (the resolver rules still hold)
            ctx = await asyncio.wait_for(browser.new_context(), timeout_s)
            page = await asyncio.wait_for(ctx.new_page(), timeout_s)
            await asyncio.wait_for(page.evaluate("1 + 1"), timeout_s)
            await asyncio.wait_for(ctx.close(), timeout_s)
            return True
        except Exception:
            await self.kill(slot.index)
            return False

    def pids(self, index: int) -> list[int]:
        """Pids of the main Chromium process of local browser `index` (found by its marker argument)."""
        marker = self.slots[index].marker.encode()
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmd and b"--type=" not in cmd:
                pids.append(int(d.name))
        return pids

    async def kill(self, index: int) -> None:
        """SIGKILL a local browser (hang recovery, tests) or drop a remote connection."""
        slot = self.slots[index]
        if slot.endpoint:
            if slot.browser is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(slot.browser.close(), 5)
            return
        browser = slot.browser
        for pid in self.pids(index):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # wait for the disconnect (which starts the relaunch) so callers never see the dead browser as ready
        for _ in range(200):
            if browser is None or slot.browser is not browser:
                break
            await asyncio.sleep(0.05)

    def report(self) -> list[dict[str, Any]]:
        """Per browser (local index or remote url): live or not, contexts open now and ever, launches or
        connections, losses, the last failure (fleet monitoring and tests)."""
        return [{"browser": s.endpoint or f"local:{s.index}", "live": s.live(), "contexts": len(s.contexts),
                 "envs": len(s.envs), "opened": s.opened, "launches": s.launches, "losses": s.losses,
                 "last_error": s.last_error} for s in self.slots]
