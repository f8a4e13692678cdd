"""Per-context safety: origin allowlist enforced by request routing, no file://, no downloads, dialogs dismissed.

The allowlist is a mutable set owned by the session so a context can be re-targeted at reset without
re-registering routes. Origins are `scheme://host:port` strings; `about:`, `data:` and `blob:` URLs are
always allowed because they cannot leave the machine.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from playwright.async_api import BrowserContext, Dialog, Route

ALWAYS_ALLOWED_SCHEMES = frozenset({"about", "data", "blob"})


def origin_of(url: str) -> str:
    """`scheme://host:port` with the default port made explicit, '' for unparsable urls."""
    try:
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return ""
    if not scheme:
        return ""
    if port is None:
        port = {"http": 80, "https": 443, "ws": 80, "wss": 443}.get(scheme)
    return f"{scheme}://{host}:{port}" if port is not None else f"{scheme}://{host}"


class Allowlist:
    """A set of allowed origins; `allows(url)` is the one check used by routing and by agent `goto`."""

    def __init__(self, origins: tuple[str, ...] | list[str] = ()) -> None:
        self.origins: set[str] = {origin_of(o) for o in origins if origin_of(o)}

    def replace(self, origins: tuple[str, ...] | list[str]) -> None:
        self.origins = {origin_of(o) for o in origins if origin_of(o)}

    def allows(self, url: str) -> bool:
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme in ALWAYS_ALLOWED_SCHEMES:
            return True
        if scheme == "file":
            return False
        return origin_of(url) in self.origins

    def why_refused(self, url: str) -> str:
        if url.lower().startswith("file:"):
            return "file:// URLs are blocked"
        return f"origin {origin_of(url) or url!r} is not in the allowlist"


async def install(context: BrowserContext, allowlist: Allowlist, blocked: list[str]) -> None:
    """Route every request of the context through the allowlist; record what was aborted in `blocked`."""

    async def handle(route: Route) -> None:
        url = route.request.url
        try:
            if allowlist.allows(url):
                await route.continue_()
            else:
                blocked.append(url)
                await route.abort("blockedbyclient")
        except Exception:  # the page may be gone; nothing to route any more
            pass

    await context.route("**/*", handle)


def dismiss_dialog(dialog: Dialog) -> None:
    """alert/confirm/prompt/beforeunload would block the page forever; dismiss them."""
    asyncio.ensure_future(_dismiss(dialog))


async def _dismiss(dialog: Dialog) -> None:
    try:
        await dialog.dismiss()
    except Exception:
        pass
