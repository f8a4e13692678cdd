"""The network gate of a pool: every byte Chromium sends leaves through an allowlisting proxy on loopback.

Playwright's request routing alone leaks (measured, shared/notes/browser_egress_and_sglang_swap.md): route
handlers see only the first url of a redirect chain, worker WebSockets and preconnects bypass them, and a
`data:` page never reaches them. Chromium's network stack does not leak that way, so the gate sits there:

- The pool binds one proxy port per context it may hold (`EgressGateway`, started with the pool) and every
  context is created with `proxy=http://<host>:<its port>` (host: loopback, or for remote browsers this
  host's address they can reach, `env.egress_host`). Each port carries the allowlist of the episode
  that owns it, so different tasks in one browser get different allowlists. Each request, redirect hop,
  WebSocket and worker connection is a separate proxy request that is checked (CONNECT is checked by
  host:port); anything else gets `403` and never reaches the network.
- The browser is launched with `--host-resolver-rules` that map only the gateway's ports and send every
  other host:port nowhere (`MAP * ~NOTFOUND`): whatever might bypass the proxy cannot even resolve.
- WebRTC (UDP, which no HTTP proxy carries) is turned off by `--webrtc-ip-handling-policy=
  disable_non_proxied_udp` plus an init script that removes RTCPeerConnection and WebTransport.

Plain HTTP requests are forwarded with `Connection: close` so that a browser never reuses one upstream
connection for a second, unchecked host.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from jaxwebrl.browser.safety import Allowlist

MAX_HEAD_BYTES = 64 * 1024
_REFUSED = b"Refused by the jaxwebrl egress allowlist."
_HOP_HEADERS = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")


@dataclass
class _Port:
    server: asyncio.AbstractServer
    port: int
    allowlist: Allowlist | None = None  # None: the port is free; every request is refused
    refused: list[str] = field(default_factory=list)


class EgressGateway:
    """`size` proxy ports on `host` (loopback unless remote browsers must reach them); `acquire(allowlist)`
    gives a context its own. Start with `await start()`."""

    def __init__(self, size: int, host: str = "127.0.0.1") -> None:
        self.size = size
        self.host = host
        self.ports: list[_Port] = []
        self._free: list[_Port] = []
        self.forwarded = 0
        self.refused = 0

    async def start(self) -> "EgressGateway":
        for _ in range(self.size):
            holder: list[_Port] = []
            server = await asyncio.start_server(
                lambda r, w, h=holder: self._serve(h[0], r, w), self.host, 0, limit=MAX_HEAD_BYTES)
            p = _Port(server, server.sockets[0].getsockname()[1])
            holder.append(p)
            self.ports.append(p)
        self._free = list(self.ports)
        return self

    async def close(self) -> None:
        for p in self.ports:
            p.server.close()
        for p in self.ports:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(p.server.wait_closed(), 2)

    def resolver_rules(self) -> str:
        """The `--host-resolver-rules` value: the gateway's ports resolve, nothing else does."""
        maps = [f"MAP {self.host}:{p.port} {self.host}:{p.port}" for p in self.ports]
        return ", ".join([*maps, "MAP * ~NOTFOUND"])

    def proxy_url(self, port: int) -> str:
        """The proxy a context with gateway port `port` is created with."""
        return f"http://{self.host}:{port}"

    def acquire(self, allowlist: Allowlist) -> int:
        """A free port that from now on forwards exactly what `allowlist` allows."""
        if not self._free:
            raise RuntimeError(f"EgressGateway: all {self.size} proxy ports are in use (one per open context)")
        p = self._free.pop()
        p.allowlist, p.refused = allowlist, []
        return p.port

    def retarget(self, port: int, allowlist: Allowlist) -> None:
        """Point an acquired port at another allowlist (a parked context reused for a new episode)."""
        for p in self.ports:
            if p.port == port and p.allowlist is not None:
                p.allowlist = allowlist

    def release(self, port: int) -> None:
        for p in self.ports:
            if p.port == port and p.allowlist is not None:
                p.allowlist = None
                self._free.append(p)

    def refused_urls(self, port: int) -> list[str]:
        return next((p.refused for p in self.ports if p.port == port), [])

    # ---- one proxied connection -------------------------------------------------------------------
    async def _serve(self, port: _Port, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            line, _, rest = head.partition(b"\r\n")
            method, target, _version = line.decode("latin-1").split(" ", 2)
            if method == "CONNECT":
                host, _, p = target.rpartition(":")
                host = host.strip("[]")
                url = f"https://{host}:{p}/"
                ok = port.allowlist is not None and any(
                    port.allowlist.allows(f"{s}://{host}:{p}/") for s in ("http", "https", "ws", "wss"))
            else:
                url = target
                ok = port.allowlist is not None and urlsplit(target).scheme in ("http", "ws") and port.allowlist.allows(target)
            if not ok:
                self.refused += 1
                port.refused.append(url)
                # a body, so a refused navigation commits this page at once (not a later error page) and the
                # env's after-step check sees the forbidden url and blanks the tab
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (len(_REFUSED), _REFUSED))
                await writer.drain()
                return
            if method == "CONNECT":
                up_r, upstream = await asyncio.open_connection(host, int(p))
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                parts = urlsplit(target)
                up_r, upstream = await asyncio.open_connection(parts.hostname, parts.port or 80)
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                headers = [h for h in rest.split(b"\r\n") if h and h.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
                upstream.write(f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + b"\r\n".join(headers)
                               + b"\r\nConnection: close\r\n\r\n")
            self.forwarded += 1
            await asyncio.gather(_pipe(reader, upstream), _pipe(up_r, writer))
        except Exception:  # a malformed request, a refused upstream, a closed browser: drop the connection
            with contextlib.suppress(Exception):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        finally:
            for w in (writer, upstream):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


WEBRTC_ARGS = ("--webrtc-ip-handling-policy=disable_non_proxied_udp", "--force-webrtc-ip-handling-policy")
