"""`python -m jaxwebrl.browser.serve`: a browser server for the remote fleet that lets in only the run that
holds the secret, and launches Chromium itself with the pool's safety flags.

    python -m jaxwebrl.browser.serve --new-token /etc/jaxwebrl/browser.token    # once; copy it to the training hosts
    python -m jaxwebrl.browser.serve --host 10.0.1.11 --port 3000 --token-file /etc/jaxwebrl/browser.token

How a connection is served (the client is a pool, `fleet.connect`):
1. The WebSocket upgrade request must carry `Authorization: Bearer <token>`, compared in constant time
   with the secret read (per connection, so a rotated file takes effect at once) from `--token-file` or
   $JAXWEBRL_BROWSER_TOKEN, never from the command line `ps` shows. Missing or wrong: `401`, logged,
   counted, nothing launched.
2. A request that carries Playwright launch options (`x-playwright-launch-options`, `?launch-options=`) or
   asks for network exposure (`x-playwright-proxy`) is refused (`403`): the binary and every flag are this
   server's. `x-jaxwebrl-egress` says where the pool's egress gateway listens (host and ports, validated).
3. The server starts Chromium (`--chromium`, default the one on PATH) through Playwright's own
   `launchServer` (serve_launcher.js, run by the Node that ships with Playwright) with the flags it builds:
   DEFAULT_CHROMIUM_ARGS, `--host-resolver-rules` for exactly the gateway's ports, the WebRTC policy, no
   extensions. That Playwright server listens on 127.0.0.1 at a random path (given on stdin, so not on a
   command line) and ignores launch options from its clients by design (a pre-launched browser).
4. It relays the WebSocket to that server; when the client goes, the browser goes (one per connection).

The secret travels in the clear over ws://: bind to a private network or tunnel it (BUILD.md, trust model).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from jaxwebrl.browser.config import DEFAULT_CHROMIUM_ARGS, find_chromium, is_loopback
from jaxwebrl.browser.egress import pipe_stream, resolver_rules, safety_args
from jaxwebrl.browser.fleet import EGRESS_HEADER, REFUSAL_TAG, TOKEN_ENV, TokenError, read_token, write_token_file

log = logging.getLogger("jaxwebrl.browser.serve")
LAUNCHER_JS = Path(__file__).with_name("serve_launcher.js")
MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 10.0
MAX_EGRESS_PORTS = 4096
BUNDLED = "playwright"  # --chromium playwright: the build `playwright install chromium` put on this host
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# headers the local Playwright server needs; everything else (the token among them) stays here
_FORWARDED = ("upgrade", "connection", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
              "sec-websocket-protocol", "user-agent", "x-playwright-browser")


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 3000
    token_file: str | None = None  # None: $JAXWEBRL_BROWSER_TOKEN
    chromium: str | None = None  # a path, None (find_chromium) or "playwright"
    max_browsers: int = 16
    launch_timeout_s: float = 60.0


class Refused(Exception):
    """A connection this server will not serve: the HTTP status, a reason for the log, a line for the client."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


_STATUS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}


@dataclass
class Upgrade:
    """The client's HTTP request head."""

    method: str
    target: str
    headers: list[tuple[str, str]]

    @classmethod
    def parse(cls, head: bytes) -> "Upgrade":
        try:
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = []
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers.append((name.strip().lower(), value.strip()))
        except ValueError as exc:
            raise Refused(400, "malformed request", "not an HTTP request") from exc
        return cls(method, target, headers)

    def values(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n == name]


def parse_egress(text: str) -> tuple[str, list[int]]:
    """The gateway's host and ports from the `x-jaxwebrl-egress` header; strict, since they become flags."""
    try:
        spec = json.loads(text)
        host, ports = spec["host"], spec["ports"]
    except (ValueError, TypeError, KeyError) as exc:
        raise Refused(400, "bad egress request", f'{EGRESS_HEADER} must be JSON {{"host": ..., "ports": [...]}}') from exc
    if not isinstance(host, str) or not _valid_host(host):
        raise Refused(400, "bad egress request", f"{EGRESS_HEADER}: host {host!r} is not an IPv4 address or host name")
    if (not isinstance(ports, list) or not 1 <= len(ports) <= MAX_EGRESS_PORTS
            or not all(type(p) is int and 1 <= p <= 65535 for p in ports)):
        raise Refused(400, "bad egress request", f"{EGRESS_HEADER}: ports must be 1 to {MAX_EGRESS_PORTS} TCP ports")
    return host, ports


def _valid_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 4
    except ValueError:
        return len(host) <= 253 and _HOSTNAME.fullmatch(host) is not None


@dataclass(eq=False)
class _Browser:
    """One launched browser: its Node launcher process, its Playwright endpoint, its Chromium pid."""

    proc: asyncio.subprocess.Process
    ws: str = ""
    pid: int = 0


@dataclass
class BrowserServer:
    """The authenticating front (`start`, `close`); `served` and `refused` count connections."""

    config: ServeConfig
    served: int = 0
    refused: collections.Counter = field(default_factory=collections.Counter)
    url: str = ""

    def __post_init__(self) -> None:
        self._server: asyncio.AbstractServer | None = None
        self._browsers: set[_Browser] = set()
        self._starting = 0  # admitted connections whose browser is being launched (counted against the maximum)
        self._clients: dict[asyncio.Task, asyncio.StreamWriter] = {}  # connections being handled
        self._chromium = self._executable()
        from playwright._impl._driver import compute_driver_executable

        self._node = compute_driver_executable()[0]
        self._package = str(Path(compute_driver_executable()[1]).parent)
        read_token(self.config.token_file, "--token-file")  # fail at start, not at the first client

    def _executable(self) -> str | None:
        chromium = self.config.chromium
        if chromium == BUNDLED:
            return None
        path = chromium or find_chromium()
        if not path or not os.access(path, os.X_OK):
            raise SystemExit(f"--chromium: no Chromium at {path or 'PATH'}; install it (apt-get install chromium), "
                             f"pass --chromium PATH, or --chromium {BUNDLED} for `playwright install chromium`'s build")
        return path

    async def start(self) -> "BrowserServer":
        self._server = await asyncio.start_server(self._handle, self.config.host, self.config.port, limit=MAX_HEAD_BYTES)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://{self.config.host}:{port}/"
        if not is_loopback(self.config.host):
            log.warning("listening on %s: the token travels in the clear over ws://, so this address must be on a "
                        "private network (or tunnelled); see BUILD.md, the browser fleet's trust model", self.config.host)
        return self

    async def close(self) -> None:
        """Stop listening, hang up on every client, close every browser."""
        if self._server is not None:
            self._server.close()
        for writer in self._clients.values():
            with contextlib.suppress(Exception):
                writer.close()
        await asyncio.gather(*(self._stop(b) for b in list(self._browsers)), return_exceptions=True)
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=15)

    # ---- one client connection --------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        who = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        browser: _Browser | None = None
        task = asyncio.current_task()
        assert task is not None
        self._clients[task] = writer
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError) as exc:
                raise Refused(400, "no request", "no HTTP request head") from exc
            upgrade = Upgrade.parse(head)
            host, ports = self._admit(upgrade)
            self._starting += 1
            try:
                browser = await self._launch(host, ports)
            finally:
                self._starting -= 1
            self.served += 1
            log.info("serving %s: Chromium pid %d, egress %s (%d ports)", who, browser.pid, host, len(ports))
            await self._relay(reader, writer, upgrade, browser)
        except Refused as r:
            self.refused[r.reason] += 1
            log.warning("refused %s: %s (%s)", who, r.reason, r.message)
            body = f"{REFUSAL_TAG} {r.message}\n".encode()
            extra = 'WWW-Authenticate: Bearer realm="jaxwebrl"\r\n' if r.status == 401 else ""
            with contextlib.suppress(Exception):
                writer.write(f"HTTP/1.1 {r.status} {_STATUS[r.status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                             f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n".encode() + body)
                await writer.drain()
        except Exception:
            log.exception("connection from %s failed", who)
        finally:
            if browser is not None:
                await self._stop(browser)
            with contextlib.suppress(Exception):
                writer.close()
            self._clients.pop(task, None)

    def _admit(self, up: Upgrade) -> tuple[str, list[int]]:
        """Authenticate first (a client without the token learns nothing else), then check the request."""
        try:
            token = read_token(self.config.token_file, "--token-file")
        except TokenError as exc:
            log.error("%s", exc)
            raise Refused(500, "no token on the server", "the server cannot read its token") from exc
        given = up.values("authorization")
        if not given:
            raise Refused(401, "no token", "the token is missing or wrong")
        scheme, _, value = given[0].partition(" ")
        ok = len(given) == 1 and scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())
        if not ok:
            raise Refused(401, "wrong token", "the token is missing or wrong")
        if up.method != "GET" or [v.lower() for v in up.values("upgrade")] != ["websocket"]:
            raise Refused(400, "not a websocket", "expected a WebSocket upgrade request")
        target = urlsplit(up.target)
        query = parse_qs(target.query)
        if (up.values("x-playwright-launch-options") or "launch-options" in query
                or any(up.values("x-playwright-proxy")) or "proxy" in query):
            raise Refused(403, "client launch options",
                          "launch options are fixed by this server (it launches its own Chromium with the pool's "
                          "safety flags); a client may not choose executablePath, args or any other")
        egress = up.values(EGRESS_HEADER)
        if len(egress) != 1:
            raise Refused(400, "bad egress request", f"one {EGRESS_HEADER} header is required")
        host, ports = parse_egress(egress[0])
        if len(self._browsers) + self._starting >= self.config.max_browsers:
            raise Refused(503, "full", f"this server runs its maximum of {self.config.max_browsers} browsers")
        return host, ports

    async def _launch(self, egress_host: str, ports: list[int]) -> _Browser:
        """Chromium with this server's binary and flags, behind a Playwright server on loopback at a random path."""
        options = {"args": safety_args(DEFAULT_CHROMIUM_ARGS, resolver_rules(egress_host, ports)), "headless": True,
                   "host": "127.0.0.1", "port": 0, "wsPath": "/" + secrets.token_urlsafe(24),
                   "timeout": self.config.launch_timeout_s * 1000}
        if self._chromium is not None:
            options["executablePath"] = self._chromium
        proc = await asyncio.create_subprocess_exec(self._node, str(LAUNCHER_JS), stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE)
        browser = _Browser(proc)
        self._browsers.add(browser)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"package": self._package, "options": options}).encode() + b"\n")
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.config.launch_timeout_s + 10)
            answer = json.loads(line or b'{"error": "the launcher exited"}')
        except Exception as exc:
            await self._stop(browser)
            raise Refused(502, "launch failed", f"could not start Chromium: {type(exc).__name__}: {exc}") from exc
        if "error" in answer:
            await self._stop(browser)
            raise Refused(502, "launch failed", f"could not start Chromium: {answer['error'].splitlines()[0][:300]}")
        browser.ws, browser.pid = answer["ws"], int(answer["pid"])
        return browser

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: Upgrade,
                     browser: _Browser) -> None:
        """The client's upgrade, re-addressed to the local Playwright server, then bytes both ways until one
        side closes."""
        local = urlsplit(browser.ws)
        up_r, up_w = await asyncio.open_connection(local.hostname, local.port)
        lines = [f"GET {local.path} HTTP/1.1", f"Host: {local.hostname}:{local.port}"]
        lines += [f"{n}: {v}" for n, v in up.headers if n in _FORWARDED]
        up_w.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        pipes = [asyncio.ensure_future(pipe_stream(reader, up_w)), asyncio.ensure_future(pipe_stream(up_r, writer))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for p in pipes:
                p.cancel()
            for w in (up_w, writer):
                with contextlib.suppress(Exception):
                    w.close()

    async def _stop(self, browser: _Browser) -> None:
        """Close the browser (the launcher closes it when its stdin ends); kill it if that hangs."""
        if browser not in self._browsers:
            return
        self._browsers.discard(browser)
        proc = browser.proc
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            for pid in (proc.pid, browser.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    if pid:
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)


# ---- the command ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m jaxwebrl.browser.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; on a fleet the "
                   "browser host's private address the training hosts reach)")
    p.add_argument("--port", type=int, default=3000, help="0: any free port (printed)")
    p.add_argument("--token-file", help=f"file holding the fleet's secret, mode 600 (default: ${TOKEN_ENV})")
    p.add_argument("--chromium", help=f"Chromium to launch (default: $JAXWEBRL_CHROMIUM or chromium on PATH; "
                   f"'{BUNDLED}': the build of `playwright install chromium`)")
    p.add_argument("--max-browsers", type=int, default=16, help="browsers at once (one per connection)")
    p.add_argument("--launch-timeout-s", type=float, default=60.0)
    p.add_argument("--new-token", metavar="FILE", help="write a fresh random secret to FILE (mode 600) and exit")
    return p.parse_args(argv)


async def _serve(cfg: ServeConfig) -> None:
    server = await BrowserServer(cfg).start()
    print(f"jaxwebrl browser server on {server.url} (Chromium: {server._chromium or BUNDLED}; secret: "
          f"{cfg.token_file or '$' + TOKEN_ENV}; at most {cfg.max_browsers} browsers)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.close()
    log.warning("stopped after serving %d connections; refused: %s", server.served, dict(server.refused) or "none")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.new_token:
        print(f"wrote a new secret to {write_token_file(args.new_token)} (mode 600); copy it to the training hosts "
              "and restart or keep the servers (they read it per connection)")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    cfg = ServeConfig(host=args.host, port=args.port, token_file=args.token_file, chromium=args.chromium,
                      max_browsers=args.max_browsers, launch_timeout_s=args.launch_timeout_s)
    try:
        asyncio.run(_serve(cfg))
    except TokenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
