"""What an env needs from whoever hands it browser contexts: the `SessionLease` protocol.

`BrowserPool` implements it (`PoolLease`); the env sees only this interface, so neither module reaches into
the other: the pool hands out sessions and health probes, the env plays episodes in them.
"""

from __future__ import annotations

from typing import Hashable, Protocol

from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.safety import Allowlist
from jaxwebrl.browser.session import BrowserSession


class SessionLease(Protocol):
    crashed: bool
    """Set when the browser of the current session disconnected (crash or kill): the episode is an env_error."""

    async def open(self, allowlist: Allowlist, config: EnvConfig,
                   reuse_key: Hashable | None) -> tuple[BrowserSession, bool]:
        """A session for a new episode, restricted to `allowlist`: a finished one parked under `reuse_key`
        (then True) or a fresh context (False)."""
        ...

    async def finish(self, session: BrowserSession, park_key: Hashable | None) -> None:
        """The episode is over: keep the session for the next episode with `park_key`, or close it."""
        ...

    async def check_health(self) -> bool:
        """Probe the current session's browser; a hung one is restarted. True when healthy."""
        ...

    def connected(self) -> bool:
        """The current session's browser is still connected."""
        ...

    def release(self) -> None:
        """Give the lease back (idempotent); the env holds no session any more."""
        ...


__all__ = ["SessionLease"]
