"""Per-context safety: the origin allowlist (checked by agent navigation, request and WebSocket routing, and
after every step), no file://, no downloads, dialogs dismissed, no WebRTC.

The allowlist is a mutable object owned by the session so a context can be re-targeted at reset without
re-registering routes. Origins are `scheme://host:port` strings. `about:blank` is always allowed (new tabs);
`data:` and other `about:` pages only when `allow_data_urls` is set (off for agents: a data: page is a
document nobody allowlisted); `blob:` urls follow the origin inside them. The network-level gate that
holds even where routing cannot see (redirect hops, workers, preconnect) is egress.py.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from playwright.async_api import BrowserContext, Dialog, Route

if TYPE_CHECKING:  # a type only: BrowserGym's venv imports this module with a Playwright that predates it
    from playwright.async_api import WebSocketRoute

LOCAL_DOCUMENT_SCHEMES = frozenset({"about", "data"})

#: Init script: no WebRTC (UDP to anywhere) and no WebTransport (QUIC) in any page or frame.
KILL_RTC_JS = """(() => {
  for (const name of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCIceCandidate',
                      'RTCSessionDescription', 'WebTransport']) {
    try { Object.defineProperty(globalThis, name, { value: undefined, configurable: false, writable: false }); } catch (e) {}
  }
})();"""



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
    """A set of allowed origins; `allows(url)` is the one check used by routing, agent `goto`, the egress
    proxy and the after-step page check."""

    def __init__(self, origins: tuple[str, ...] | list[str] = (), allow_data_urls: bool = False) -> None:
        self.origins: set[str] = {origin_of(o) for o in origins if origin_of(o)}
        self.allow_data_urls = allow_data_urls

    def replace(self, origins: tuple[str, ...] | list[str] | set[str], allow_data_urls: bool | None = None) -> None:
        self.origins = {origin_of(o) for o in origins if origin_of(o)}
        if allow_data_urls is not None:
            self.allow_data_urls = allow_data_urls

    def allows(self, url: str) -> bool:
        url = url.strip()
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if url.lower() == "about:blank":
            return True
        if scheme in LOCAL_DOCUMENT_SCHEMES:
            return self.allow_data_urls
        if scheme == "blob":
            return origin_of(url[5:]) in self.origins
        if scheme not in ("http", "https", "ws", "wss"):
            return False
        return origin_of(url) in self.origins

    def why_refused(self, url: str) -> str:
        low = url.strip().lower()
        if low.startswith("file:"):
            return "file:// URLs are blocked"
        if low.startswith(("data:", "about:")):
            return "data: and about: pages are not allowed for this task"
        return f"origin {origin_of(url) or url!r} is not in the allowlist"


async def install(context: BrowserContext, allowlist: Allowlist, blocked: list[str]) -> None:
    """Route every request and page WebSocket of the context through the allowlist, remove WebRTC and
    WebTransport from every document; record what was refused in `blocked`."""

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

    def handle_ws(ws: WebSocketRoute) -> None:
        if allowlist.allows(ws.url):
            ws.connect_to_server()
        else:
            blocked.append(ws.url)
            asyncio.ensure_future(_close_ws(ws))

    await context.add_init_script(KILL_RTC_JS)
    await context.route("**/*", handle)
    await context.route_web_socket(lambda url: True, handle_ws)


async def _close_ws(ws: WebSocketRoute) -> None:
    try:
        await ws.close(code=4003, reason="origin not allowed")
    except Exception:
        pass


def dismiss_dialog(dialog: Dialog) -> None:
    """alert/confirm/prompt/beforeunload would block the page forever; dismiss them."""
    asyncio.ensure_future(_dismiss(dialog))


async def _dismiss(dialog: Dialog) -> None:
    try:
        await dialog.dismiss()
    except Exception:
        pass
