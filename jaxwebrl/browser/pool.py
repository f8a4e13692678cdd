"""BrowserPool: a few Chromium processes, many isolated contexts, crash and hang recovery.

    async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=8)) as pool:
        async with pool.lease(EnvConfig(action_space="bid")) as env:      # holds one slot of `capacity`
            obs = await env.reset(task, seed); res = await env.step("click('12')")
        async with pool.episode(task, seed, EnvConfig(...)) as (env, obs):  # lease + reset
            ...
        env = await pool.new_env(EnvConfig(...)); ...; await env.close()  # the same lease, closed by hand

The env talks to the pool only through its `PoolLease` (the `SessionLease` protocol of lease.py): open a
session for an allowlist, finish it (park or close), probe health, see whether its browser crashed.

At most `capacity` envs exist at once (`new_env` waits for a free slot). Each `reset` opens a fresh context
(own cookies and storage) in the live browser with the fewest contexts, except for tasks that declare
`reuse_context = True` (MiniWoB++: static pages with no cookies or storage): their finished contexts are
parked (at most `max_idle_contexts`) and the next reset for the same origins and EnvConfig navigates the
parked tab again, which costs a page load (~0.08 s) instead of a new context (~0.36 s).

The browsers themselves live in browsers.py: launched locally (`executable_path`, one process each) or, when
`remote_endpoints` are given, connected to `python -m jaxwebrl.browser.serve` servers (a browser fleet on
CPU hosts; fleet.py: the secret, the connection, the check of the remote browser's flags, errors with
fixes), relaunched or reconnected with backoff when lost. When a browser disconnects its running envs are
marked here so their episode ends with `env_error` (masked: not the policy's failure), its parked contexts
are dropped, and new contexts go to the live browsers; a step that times out triggers a health probe that
kills and relaunches a hung browser.

Egress: the pool starts an `EgressGateway` (egress.py) with one loopback proxy port per context it can hold;
every context is created with its own port as proxy, carrying that episode's allowlist, and every browser
(local or remote) is launched with host-resolver rules under which only those ports resolve, plus WebRTC
disabled. Remote browsers dial the gateway at `egress_host`, and then every proxy request must carry this
run's random credentials (Playwright answers the proxy's challenge). So the
allowlists are per context while the browser is launched once per pool, and nothing outside an episode's
allowlist is reachable from any page, frame, worker or redirect.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from dataclasses import dataclass
from typing import Any, AsyncContextManager, AsyncIterator, Callable

from playwright.async_api import BrowserContext

from jaxwebrl.browser import fleet
from jaxwebrl.browser.browsers import Browsers, BrowserSlot
from jaxwebrl.browser.config import EnvConfig, PoolConfig, is_loopback
from jaxwebrl.browser.egress import EgressGateway
from jaxwebrl.browser.env import BrowserEnv
from jaxwebrl.browser.fleet import REMOTE_FIELD, RemoteEndpointError, explain_endpoint_error
from jaxwebrl.browser.observation import Observation
from jaxwebrl.browser.safety import Allowlist
from jaxwebrl.browser.session import BrowserSession
from jaxwebrl.browser.task import Task

__all__ = ["BrowserPool", "PoolLease", "RemoteEndpointError", "explain_endpoint_error", "REMOTE_FIELD"]


@dataclass(eq=False)
class _Parked:
    """A finished episode's session kept for the next reset with the same key (origins, EnvConfig)."""

    slot: BrowserSlot
    session: BrowserSession
    key: Any
    port: int


class PoolLease:
    """One env's hold on the pool (a capacity slot until `release`): the `SessionLease` the env uses.

    Knows which browser the env's current session lives in and which proxy port its context uses."""

    def __init__(self, pool: "BrowserPool") -> None:
        self.pool = pool
        self.env: BrowserEnv | None = None
        self.crashed = False
        self._slot: BrowserSlot | None = None
        self._port: int | None = None
        self._released = False

    async def open(self, allowlist: Allowlist, config: EnvConfig, reuse_key: Any) -> tuple[BrowserSession, bool]:
        """A session for a new episode: a parked one for `reuse_key` (True) or a fresh context (False)."""
        self.crashed = False
        parked = self.pool._take_parked(reuse_key) if reuse_key is not None else None
        if parked is not None:
            self._slot, self._port = parked.slot, parked.port
            parked.session.recycle(allowlist)
            self.pool.gateway.retarget(self._port, parked.session.allowlist)
            self._slot.envs.add(self.env)
            return parked.session, True
        self._slot, context, self._port = await self.pool._new_context(self.env, config, allowlist)
        session = await BrowserSession.create(context, config, allowlist)
        return session, False

    async def finish(self, session: BrowserSession, park_key: Any) -> None:
        """End the episode's session: park it for `park_key` when given and possible, else close it."""
        slot, port = self._slot, self._port
        self._slot = self._port = None
        if slot is not None:
            slot.envs.discard(self.env)
        if park_key is not None and slot is not None and port is not None:
            if await self.pool._park(slot, session, park_key, port):
                return
        await session.close()
        self.pool._forget_context(slot, session.context, port)

    async def check_health(self) -> bool:
        """Probe the browser of the current session; a hung one is killed and relaunched. True if healthy."""
        return await self.pool._check_health(self._slot) if self._slot is not None else False

    def connected(self) -> bool:
        return self.pool._connected(self._slot)

    def release(self) -> None:
        """Give the capacity slot back (idempotent)."""
        if not self._released:
            self._released = True
            self.pool._release(self)


class BrowserPool:
    """Owns the egress gateway, the browsers (browsers.py) and the env capacity semaphore."""

    def __init__(self, config: PoolConfig | None = None, env_config: EnvConfig | None = None) -> None:
        self.config = config or PoolConfig()
        self.config.validate()
        self.env_config = env_config or EnvConfig()
        self.env_config.validate()
        self._sem = asyncio.Semaphore(self.config.capacity)
        self._leases: set[PoolLease] = set()
        self._parked: list[_Parked] = []  # oldest first
        idle = self.config.max_idle_contexts
        self._idle_limit = self.config.capacity if idle is None else idle
        self._reported: dict[str, int] = {}  # counters at the last take_metrics()
        remote = bool(self.config.remote_endpoints)
        if remote:  # fail now, naming the setting, rather than at the first connection
            fleet.read_token(self.config.remote_token_file, fleet.TOKEN_FIELD)
        # one proxy port per context the pool may hold: live envs plus parked contexts; a gateway other hosts can
        # reach serves only requests with this run's credentials
        credentials = (("jaxwebrl", secrets.token_urlsafe(24))
                       if remote or not is_loopback(self.config.egress_host) else None)
        self.gateway = EgressGateway(self.config.capacity + self._idle_limit, host=self.config.egress_host,
                                     credentials=credentials)
        self._browsers = Browsers(self.config, self.gateway, self._on_browser_lost)

    @property
    def slots(self) -> list[BrowserSlot]:
        return self._browsers.slots

    @property
    def crashes(self) -> int:
        """Browsers lost while the pool ran (crashes, kills, remote servers gone)."""
        return self._browsers.crashes

    # ---- lifecycle --------------------------------------------------------------------------------
    async def start(self) -> "BrowserPool":
        """Start the gateway, then launch or connect every browser; remote endpoints that fail stop the start
        with one error listing each failing endpoint and its fix."""
        await self.gateway.start()
        try:
            await self._browsers.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aenter__(self) -> "BrowserPool":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        self._browsers.closing = True  # from now on a disconnect is no loss and starts no relaunch
        for lease in list(self._leases):
            if lease.env is not None:
                await lease.env.close()
        while self._parked:
            await self._parked.pop().session.close()
        await self._browsers.close()
        await self.gateway.close()

    def launch_args(self) -> list[str]:
        """A local browser's flags (the configured ones plus egress.safety_args)."""
        return self._browsers.launch_args()

    def _on_browser_lost(self, slot: BrowserSlot) -> None:
        """A browser disconnected: its running envs end `env_error`, its parked contexts are gone."""
        for p in self._parked:
            if p.slot is slot:
                self.gateway.release(p.port)
        self._parked = [p for p in self._parked if p.slot is not slot]
        for lease in self._leases:
            if lease.env in slot.envs:
                lease.crashed = True
        slot.envs.clear()

    # ---- envs and contexts ------------------------------------------------------------------------
    async def new_env(self, env_config: EnvConfig | None = None,
                      observe_slot: Callable[[], AsyncContextManager[Any]] | None = None) -> BrowserEnv:
        """An env holding one pool slot until `env.close()`; waits while the pool is full. `observe_slot`:
        see `BrowserEnv`."""
        await self._sem.acquire()
        lease = PoolLease(self)
        env = BrowserEnv(lease, env_config or self.env_config, observe_slot)
        lease.env = env
        self._leases.add(lease)
        return env

    @contextlib.asynccontextmanager
    async def lease(self, env_config: EnvConfig | None = None) -> AsyncIterator[BrowserEnv]:
        """`async with pool.lease(cfg) as env:` an env for any number of episodes; slot released on exit."""
        env = await self.new_env(env_config)
        try:
            yield env
        finally:
            await env.close()

    @contextlib.asynccontextmanager
    async def episode(
        self, task: Task, seed: int = 0, env_config: EnvConfig | None = None
    ) -> AsyncIterator[tuple[BrowserEnv, Observation]]:
        """`async with pool.episode(task, seed) as (env, obs):` reset on entry, context released on exit."""
        async with self.lease(env_config) as env:
            obs = await env.reset(task, seed)
            yield env, obs

    def _release(self, lease: PoolLease) -> None:
        if lease in self._leases:
            self._leases.discard(lease)
            self._sem.release()

    async def _new_context(self, env: BrowserEnv | None, config: EnvConfig,
                           allowlist: Allowlist) -> tuple[BrowserSlot, BrowserContext, int]:
        for _ in range(3):
            live = [s for s in self.slots if s.live()]
            if not live:
                waiters = [asyncio.ensure_future(s.ready.wait()) for s in self.slots]
                try:
                    await asyncio.wait(waiters, timeout=self.config.launch_timeout_s * 2,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waiters:
                        w.cancel()
                continue
            slot = min(live, key=lambda s: len(s.contexts) + s.opening)
            browser = slot.browser
            assert browser is not None
            vw, vh = config.viewport
            port = self.gateway.acquire(allowlist)
            slot.opening += 1
            try:
                ctx = await asyncio.wait_for(
                    browser.new_context(viewport={"width": vw, "height": vh}, accept_downloads=False,
                                        device_scale_factor=config.device_scale_factor,
                                        service_workers="block", proxy=self.gateway.proxy_settings(port)),
                    self.config.launch_timeout_s,
                )
            except Exception:
                self.gateway.release(port)
                if await self._check_health(slot):
                    raise
                continue
            finally:
                slot.opening -= 1
            slot.contexts.add(ctx)
            slot.envs.add(env)
            slot.opened += 1
            return slot, ctx, port
        down = "; ".join(f"{s.endpoint or f'browser {s.index}'}: {s.last_error or 'reconnecting'}" for s in self.slots)
        raise RuntimeError(f"no live browser in the pool (reconnecting with backoff): {down}")

    def _forget_context(self, slot: BrowserSlot | None, ctx: BrowserContext, port: int | None) -> None:
        if port is not None:
            self.gateway.release(port)
        if slot is not None:
            slot.contexts.discard(ctx)

    async def _park(self, slot: BrowserSlot, session: BrowserSession, key: Any, port: int) -> bool:
        """Keep a finished session for reuse; closes the oldest parked ones beyond `max_idle_contexts`.
        False (nothing kept) when reuse is off or the browser is gone."""
        if self._idle_limit == 0 or self._browsers.closing or not self._connected(slot):
            return False
        self._parked.append(_Parked(slot, session, key, port))
        self.gateway.retarget(port, Allowlist(()))  # a parked context reaches nothing
        while len(self._parked) > self._idle_limit:
            old = self._parked.pop(0)
            await old.session.close()
            self._forget_context(old.slot, old.session.context, old.port)
        return True

    def _take_parked(self, key: Any) -> _Parked | None:
        """The most recently parked live session for `key`, removed from the parked list."""
        for i in range(len(self._parked) - 1, -1, -1):
            p = self._parked[i]
            if p.key == key and self._connected(p.slot):  # a crashed browser's entries are already dropped
                del self._parked[i]
                return p
        return None

    def _connected(self, slot: BrowserSlot | None) -> bool:
        return slot is not None and slot.connected()

    # ---- health and the browsers ------------------------------------------------------------------
    async def _check_health(self, slot: BrowserSlot, timeout_s: float = 5.0) -> bool:
        """Probe the browser; kill a hung one (it is relaunched). True if healthy."""
        return await self._browsers.check_health(slot, timeout_s)

    def browser_pids(self, index: int) -> list[int]:
        """Pids of the main Chromium process of local browser `index`."""
        return self._browsers.pids(index)

    async def kill_browser(self, index: int) -> None:
        """SIGKILL a local browser (hang recovery, tests) or drop a remote connection."""
        await self._browsers.kill(index)

    async def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait until every browser is up (after a crash)."""
        await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in self.slots)), timeout_s)

    def stats(self) -> dict[str, int]:
        """Open contexts/pages as Playwright sees them (leak checks and benchmarks)."""
        contexts = pages = 0
        for s in self.slots:
            if s.browser is not None and s.browser.is_connected():
                for c in s.browser.contexts:
                    contexts += 1
                    pages += len(c.pages)
        return {"contexts": contexts, "pages": pages, "envs": len(self._leases), "parked": len(self._parked),
                "crashes": self.crashes,
                "launches": sum(s.launches for s in self.slots)}

    def take_metrics(self) -> dict[str, float]:
        """What happened at the pool's edges since the last call, for the run's records: requests the egress
        gateway refused (outside the allowlist; with wrong proxy credentials; without credentials, which each
        context's first request is when credentials are on), and browsers lost."""
        g = self.gateway
        now = {"pool/egress_refused": g.refused, "pool/egress_auth_refused": g.auth_refused,
               "pool/egress_auth_challenged": g.challenged, "pool/browsers_lost": self.crashes}
        out = {k: float(v - self._reported.get(k, 0)) for k, v in now.items()}
        self._reported = now
        return out

    def browsers(self) -> list[dict[str, Any]]:
        """Per browser (local index or remote url): live or not, contexts open now and ever, launches or
        connections, losses, the last failure (fleet monitoring and tests)."""
        return self._browsers.report()
