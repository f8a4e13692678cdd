"""`python -m jaxwebrl.browser.serve` lets in only the holder of the fleet's secret and launches Chromium only
its own way: a real server on loopback, real Playwright clients and raw sockets.

Clients without the token, with a wrong one, or with the right one but their own executablePath/args (the
binary a shell script that would leave a file behind) are refused, nothing they asked for runs, and the server
stays up for the rightful client, whose browser carries the server's flags. The Playwright server underneath
listens on loopback only, at a path nobody was told. The token file must be private, and the egress gateway
with credentials refuses proxy requests without them (the upstream never sees a byte).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from playwright.async_api import async_playwright

from jaxwebrl.browser import BrowserPool, PoolConfig
from jaxwebrl.browser.egress import NO_EXTENSIONS_FLAG, WEBRTC_ARGS, EgressGateway, resolver_rules
from jaxwebrl.browser.fleet import EGRESS_HEADER, TOKEN_ENV, TokenError, connect, read_token
from jaxwebrl.browser.safety import Allowlist
from tests.browser.conftest import pg_task
from tests.browser.fleet_fixtures import FleetServer, token_file

pytestmark = pytest.mark.timeout(180)
EGRESS = {"host": "127.0.0.1", "ports": [40001, 40002]}


@pytest.fixture(scope="module")
def token(tmp_path_factory) -> str:
    return token_file(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(token, tmp_path_factory):
    s = FleetServer(token, tmp_path_factory.mktemp("serve_logs")).start()
    yield s
    s.stop()


def _raw(port: int, request: bytes) -> bytes:
    """Send `request`, read the whole answer (the server closes after a refusal)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks)


def _upgrade(port: int, headers: dict[str, str], path: str = "/") -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)).decode(), "Sec-WebSocket-Version: 13"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_only_the_secret_holder_gets_a_browser_and_only_the_servers_flags(server, token, tmp_path):
    secret = read_token(token, "test")
    planted = tmp_path / "client_binary_ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {planted}\nexec /usr/bin/chromium \"$@\"\n")
    evil.chmod(0o700)
    client_opts = json.dumps({"executablePath": str(evil), "args": ["--jaxwebrl-client-chose-this"]})
    good = {"Authorization": f"Bearer {secret}", EGRESS_HEADER: json.dumps(EGRESS)}

    async def go():
        refusals = []
        async with async_playwright() as p:
            attempts = [
                ("no token", {}),
                ("wrong token", {"Authorization": "Bearer " + "A" * len(secret), EGRESS_HEADER: json.dumps(EGRESS)}),
                ("right token, own executablePath and args", {**good, "x-playwright-launch-options": client_opts}),
            ]
            for name, headers in attempts:
                with pytest.raises(Exception) as info:
                    await p.chromium.connect(server.url, headers=headers, timeout=30_000)
                refusals.append((name, str(info.value)))
            with pytest.raises(Exception) as info:  # the same options as a query parameter
                await p.chromium.connect(server.url + "?launch-options=" + client_opts, headers=good, timeout=30_000)
            refusals.append(("launch-options query", str(info.value)))
            with pytest.raises(Exception) as info:  # Playwright's network exposure (a tunnel back into the client)
                await p.chromium.connect(server.url, headers=good, expose_network="*", timeout=30_000)
            refusals.append(("expose_network", str(info.value)))
        # the server is still up: the rightful client gets a browser with the server's flags
        async with async_playwright() as p:
            rules = resolver_rules(EGRESS["host"], EGRESS["ports"])
            required = [f"--host-resolver-rules={rules}", *WEBRTC_ARGS, NO_EXTENSIONS_FLAG]
            browser = await connect(p, server.url, secret, EGRESS["host"], EGRESS["ports"], required, 60)
            cdp = await browser.new_browser_cdp_session()
            line = (await cdp.send("Browser.getBrowserCommandLine"))["arguments"]
            page = await (await browser.new_context()).new_page()
            answer = await page.evaluate("6 * 7")
            listening = _listening_sockets(server.proc.pid)
            # the Playwright server behind the front wants its random path: the root path, even from this host,
            # is refused
            inner = [a for a in listening if a[1] != server.port]
            wrong_path = await asyncio.to_thread(_raw, inner[0][1], _upgrade(inner[0][1], {})) if inner else b""
            await browser.close()
        return refusals, line, answer, listening, wrong_path

    refusals, line, answer, listening, wrong_path = asyncio.run(go())
    for name, msg in refusals[:2]:
        assert "401 Unauthorized" in msg and "the token is missing or wrong" in msg, (name, msg)
    for name, msg in refusals[2:]:
        assert "403 Forbidden" in msg and "launch options are fixed by this server" in msg, (name, msg)
    assert answer == 42
    assert line[0] == "/usr/bin/chromium" or line[0].startswith("/usr/lib/chromium"), line[0]
    assert f"--host-resolver-rules={resolver_rules(EGRESS['host'], EGRESS['ports'])}" in line
    assert not planted.exists() and "--jaxwebrl-client-chose-this" not in " ".join(line)
    assert not any("--jaxwebrl-client-chose-this" in " ".join(p.info["cmdline"] or [])
                   for p in psutil.process_iter(["cmdline"]))
    log = server.log()
    assert log.count("refused 127.0.0.1:") == 5 and "no token" in log and "wrong token" in log, log
    assert log.count("client launch options") == 3 and log.count("serving 127.0.0.1:") == 1, log
    assert secret not in log
    # behind the authenticating front, only loopback: the front's port, and the Playwright server on 127.0.0.1
    front = [a for a in listening if a[1] == server.port]
    assert front == [("127.0.0.1", server.port)] and len(listening) == 2, listening
    (inner,) = [a for a in listening if a[1] != server.port]
    assert inner[0] == "127.0.0.1", listening
    assert wrong_path.startswith(b"HTTP/1.1 400 Bad Request"), wrong_path


def _listening_sockets(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket listening in the server's process tree."""
    root = psutil.Process(pid)
    out = []
    for proc in [root, *root.children(recursive=True)]:
        for c in proc.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN:
                out.append((c.laddr.ip, c.laddr.port))
    return sorted(set(out))


def test_raw_requests_are_refused_before_anything_starts(server, token):
    secret = read_token(token, "test")
    served = server.log().count("serving 127.0.0.1:")
    no_upgrade = f"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
    answers = {
        "plain GET": _raw(server.port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        "basic auth": _raw(server.port, _upgrade(server.port, {"Authorization": "Basic " + base64.b64encode(
            f"u:{secret}".encode()).decode()})),
        "token twice": _raw(server.port, _upgrade(server.port, {"Authorization": f"Bearer {secret}"}).replace(
            b"\r\n\r\n", f"\r\nAuthorization: Bearer {secret}\r\n\r\n".encode())),
        "no upgrade": _raw(server.port, no_upgrade),
        "egress rule injection": _raw(server.port, _upgrade(server.port, {
            "Authorization": f"Bearer {secret}",
            EGRESS_HEADER: json.dumps({"host": "127.0.0.1:1 127.0.0.1, MAP * 10.0.0.1", "ports": [1]})})),
        "no egress": _raw(server.port, _upgrade(server.port, {"Authorization": f"Bearer {secret}"})),
        "garbage": _raw(server.port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"),
    }
    status = {k: v.split(b"\r\n", 1)[0].decode("latin-1") for k, v in answers.items()}
    assert status == {"plain GET": "HTTP/1.1 401 Unauthorized", "basic auth": "HTTP/1.1 401 Unauthorized",
                      "token twice": "HTTP/1.1 401 Unauthorized", "no upgrade": "HTTP/1.1 400 Bad Request",
                      "egress rule injection": "HTTP/1.1 400 Bad Request", "no egress": "HTTP/1.1 400 Bad Request",
                      "garbage": "HTTP/1.1 400 Bad Request"}, status
    assert b"is not an IPv4 address or host name" in answers["egress rule injection"]
    assert server.log().count("serving 127.0.0.1:") == served  # none of them got a browser


def test_the_secret_must_be_private_and_strong(tmp_path, monkeypatch):
    loose = tmp_path / "loose.token"
    loose.write_text("x" * 40)
    loose.chmod(0o644)
    with pytest.raises(TokenError, match=r"--token-file: the token file .*loose\.token can be read by other users "
                                         r"\(mode 0o644\); fix: chmod 600"):
        read_token(loose, "--token-file")
    short = tmp_path / "short.token"
    short.write_text("hunter2")
    short.chmod(0o600)
    with pytest.raises(TokenError, match="is not 32 to 1024 characters"):
        read_token(short, "--token-file")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(TokenError, match=r"config\.env\.remote_token_file: no secret for the browser fleet"):
        BrowserPool(PoolConfig(remote_endpoints=("ws://127.0.0.1:1/",)))
    monkeypatch.setenv(TOKEN_ENV, "y" * 40)
    assert read_token(None, "x") == "y" * 40
    # the server refuses to start on a file others can read, and says why
    proc = subprocess.run([sys.executable, "-m", "jaxwebrl.browser.serve", "--port", "0", "--token-file", str(loose)],
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    assert proc.returncode == 2 and "can be read by other users" in proc.stderr, (proc.returncode, proc.stderr[-2000:])


def test_rotating_the_secret_needs_no_restart_and_the_server_caps_its_browsers(tmp_path):
    """Server and pool read the token file per connection: after a rotation the pool's next connection (here
    after its browser is dropped) uses the new secret, the old one is refused. `--max-browsers 1`: a second
    browser is refused with 503 while the first lives."""
    shared = token_file(tmp_path)  # one file for both sides: the same path on every host after the copy
    server = FleetServer(shared, tmp_path, extra_args=("--max-browsers", "1")).start()
    try:
        async def go():
            old = read_token(shared, "test")
            cfg = PoolConfig(remote_endpoints=(server.url,), remote_token_file=shared, contexts_per_browser=1,
                             reconnect_backoff_s=0.2, reconnect_backoff_max_s=0.5)
            async with BrowserPool(cfg) as pool:
                async with async_playwright() as p:
                    with pytest.raises(Exception) as full:  # the pool holds the one browser allowed
                        await p.chromium.connect(server.url, timeout=30_000, headers={
                            "Authorization": f"Bearer {old}", EGRESS_HEADER: json.dumps(EGRESS)})
                token_file(tmp_path)  # rotate: a new secret replaces the file
                new = read_token(shared, "test")
                await pool.kill_browser(0)  # drop the connection; the pool reconnects with the file's new secret
                await pool.wait_ready(60)
                async with async_playwright() as p:  # the token is checked first: 401, not 503
                    with pytest.raises(Exception) as stale:
                        await p.chromium.connect(server.url, timeout=30_000, headers={
                            "Authorization": f"Bearer {old}", EGRESS_HEADER: json.dumps(EGRESS)})
                await pool.wait_ready(60)
                return old != new, str(full.value), str(stale.value), pool.browsers()[0]

        rotated, full, stale, browser = asyncio.run(go())
    finally:
        server.stop()
    assert rotated and "503 Service Unavailable" in full and "maximum of 1 browsers" in full, full
    assert "401 Unauthorized" in stale, stale
    assert browser["live"] and browser["launches"] == 2 and browser["losses"] == 1, browser
    log = server.log()
    assert log.count("serving 127.0.0.1:") == 2 and "refused 127.0.0.1:" in log and "wrong token" in log, log


class Upstream:
    """A TCP server that records every connection it gets (the gateway's would-be upstream)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            conn.close()


def test_gateway_with_credentials_refuses_requests_without_them():
    up = Upstream()
    target = f"127.0.0.1:{up.port}"

    async def go():
        gw = await EgressGateway(1, credentials=("jaxwebrl", "s3cret-run-password")).start()
        port = gw.acquire(Allowlist((f"http://{target}",)))
        good = base64.b64encode(b"jaxwebrl:s3cret-run-password").decode()
        bad = base64.b64encode(b"jaxwebrl:guess").decode()

        async def ask(auth: str | None, connect: bool) -> bytes:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            head = f"CONNECT {target} HTTP/1.1\r\n" if connect else f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n"
            w.write((head + (f"Proxy-Authorization: Basic {auth}\r\n" if auth else "") + "\r\n").encode())
            if connect:
                line = await r.readline()
                w.close()
                return line
            data = await r.read()
            w.close()
            return data

        answers = [await ask(None, True), await ask(None, False), await ask(bad, True), await ask(bad, False)]
        hits_refused = up.hits
        ok_connect, ok_get = await ask(good, True), await ask(good, False)
        counts = (gw.challenged, gw.auth_refused, gw.forwarded, gw.refused)
        await gw.close()
        return answers, hits_refused, ok_connect, ok_get, counts

    answers, hits_refused, ok_connect, ok_get, counts = asyncio.run(go())
    up.sock.close()
    for a in answers:
        assert a.startswith(b"HTTP/1.1 407 Proxy Authentication Required"), a
    assert b'Proxy-Authenticate: Basic realm="jaxwebrl-egress"' in answers[1]
    assert hits_refused == 0  # not a byte reached the upstream
    assert ok_connect.startswith(b"HTTP/1.1 200 Connection Established") and ok_get.endswith(b"ok"), (ok_connect, ok_get)
    assert counts == (2, 2, 2, 0), counts  # (challenged, auth_refused, forwarded, outside the allowlist)


def test_pool_gateway_answers_only_its_browsers(server, token, sites):
    """Through the fleet the gateway requires the run's credentials: Chromium answers the challenge (pages
    load), a foreign client with a guessed password is refused and shows up in the pool's metrics."""

    async def go():
        cfg = PoolConfig(remote_endpoints=(server.url,), remote_token_file=token, contexts_per_browser=2)
        async with BrowserPool(cfg) as pool:
            assert pool.gateway.credentials is not None
            before = pool.take_metrics()
            async with pool.episode(pg_task(sites), 0) as (env, obs):
                text = obs.text
                port = next(p.port for p in pool.gateway.ports if p.allowlist is not None)
            r, w = await asyncio.open_connection("127.0.0.1", port)
            guess = base64.b64encode(b"jaxwebrl:guess").decode()
            w.write(f"GET {sites.urls['playground']}/ HTTP/1.1\r\nProxy-Authorization: Basic {guess}\r\n\r\n".encode())
            answer = await r.read()
            w.close()
            return before, text, answer, pool.take_metrics(), pool.take_metrics()

    before, text, answer, metrics, again = asyncio.run(go())
    assert "Playground" in text  # the page came through the gateway, credentials and all
    assert answer.startswith(b"HTTP/1.1 407"), answer
    assert metrics["pool/egress_auth_refused"] == 1.0 and metrics["pool/egress_auth_challenged"] >= 1, metrics
    assert set(before.values()) == {0.0} and set(again.values()) == {0.0}, (before, again)
