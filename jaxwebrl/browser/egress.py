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

When the browsers are remote (the gateway then listens where other hosts can reach it), the gateway is
given per-run `credentials`: every proxy request must carry `Proxy-Authorization: Basic` with them, which
the pool hands to Chromium through Playwright's `proxy={server, username, password}`. A request without
them gets `407` (Chromium's first request in each context does, then it answers the challenge and caches
it: `challenged` counts those) and one with wrong ones gets `407` and is counted in `auth_refused`; neither
reaches an upstream or the allowlist.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from jaxwebrl.browser.safety import Allowlist

MAX_HEAD_BYTES = 64 * 1024
_REFUSED = b"Refused by the jaxwebrl egress allowlist."
_HOP_HEADERS = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")
_CHALLENGE = (b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"jaxwebrl-egress\"\r\n"
              b"Content-Length: 0\r\nConnection: close\r\n\r\n")
WEBRTC_ARGS = ("--webrtc-ip-handling-policy=disable_non_proxied_udp", "--force-webrtc-ip-handling-policy")
# read back from a remote browser's command line: proof that the server applied the safety flags
AUTOMATION_FLAG = "--enable-automation"
NO_EXTENSIONS_FLAG = "--disable-extensions"


def resolver_rules(host: str, ports: list[int] | tuple[int, ...]) -> str:
    """The `--host-resolver-rules` value: `host:port` for each gateway port resolves, nothing else does."""
    maps = [f"MAP {host}:{p} {host}:{p}" for p in ports]
    return ", ".join([*maps, "MAP * ~NOTFOUND"])


def safety_args(base_args: tuple[str, ...] | list[str], rules: str) -> list[str]:
    """Every pool browser's flags, local or on a fleet server: `base_args`, the egress lock (`rules`), no WebRTC
    over UDP, no extensions, and `--enable-automation` (with it Chromium reports its command line, which is
    how the pool checks a remote browser got these flags; navigator.webdriver is true under Playwright anyway)."""
    return [*base_args, f"--host-resolver-rules={rules}", *WEBRTC_ARGS, NO_EXTENSIONS_FLAG, AUTOMATION_FLAG]


@dataclass
class _Port:
    server: asyncio.AbstractServer
    port: int
    allowlist: Allowlist | None = None  # None: the port is free; every request is refused
    refused: list[str] = field(default_factory=list)


class EgressGateway:
    """`size` proxy ports on `host` (loopback unless remote browsers must reach them); `acquire(allowlist)`
    gives a context its own. Start with `await start()`."""

    def __init__(self, size: int, host: str = "127.0.0.1", credentials: tuple[str, str] | None = None) -> None:
        self.size = size
        self.host = host
        self.credentials = credentials
        self._expected = (b"Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode())
                          if credentials else None)
        self.ports: list[_Port] = []
        self._free: list[_Port] = []
        self.forwarded = 0
        self.refused = 0  # requests outside the allowlist
        self.challenged = 0  # requests without credentials (each context's first; from anyone else: foreign)
        self.auth_refused = 0  # requests with wrong credentials (never from this run's browsers)

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
        return resolver_rules(self.host, [p.port for p in self.ports])

    def proxy_url(self, port: int) -> str:
        return f"http://{self.host}:{port}"

    def proxy_settings(self, port: int) -> dict[str, str]:
        """Playwright's `proxy=` for a context with gateway port `port` (with this run's credentials if any)."""
        settings = {"server": self.proxy_url(port)}
        if self.credentials:
            settings.update(username=self.credentials[0], password=self.credentials[1])
        return settings

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
    def _authorized(self, headers: bytes) -> bool:
        """Whether the request carries this run's credentials; counts the ones that do not."""
        assert self._expected is not None
        given = [h.split(b":", 1)[1].strip() for h in headers.split(b"\r\n")
                 if h.split(b":", 1)[0].strip().lower() == b"proxy-authorization"]
        if not given:
            self.challenged += 1
            return False
        if len(given) == 1 and hmac.compare_digest(given[0], self._expected):
            return True
        self.auth_refused += 1
        return False

    async def _serve(self, port: _Port, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            line, _, rest = head.partition(b"\r\n")
            method, target, _version = line.decode("latin-1").split(" ", 2)
            if self._expected is not None and not self._authorized(rest):
                writer.write(_CHALLENGE)
                await writer.drain()
                return
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
            await asyncio.gather(pipe_stream(reader, upstream), pipe_stream(up_r, writer))
        except Exception:  # a malformed request, a refused upstream, a closed browser: drop the connection
            with contextlib.suppress(Exception):
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        finally:
            for w in (writer, upstream):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()


async def pipe_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy `reader` to `writer` until either end closes; then close `writer`."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()

