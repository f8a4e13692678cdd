"""The origin allowlist holds at every layer: a "forbidden" origin on another loopback address records every
TCP connection, HTTP request and UDP datagram it receives, and every vector we know (redirects via goto and
via a clicked link, page and worker WebSockets, a data: page with script, WebRTC STUN, srcdoc iframes,
service workers, prefetch/preconnect/speculation rules, EventSource, sendBeacon, form targets, CSS @import,
fonts, window.open, meta refresh, ...) is driven through the action spaces: zero hits, with local browsers and
with a remote fleet browser (a real `python -m jaxwebrl.browser.serve` on loopback, the gateway then requiring
the run's proxy credentials). A control run of the same pages in an unprotected context shows that the
vectors do reach the recorder, so the zero can fail."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import socketserver
import threading
import time
from typing import Iterator

import pytest
from playwright.async_api import async_playwright

from jaxwebrl.browser import BrowserPool, EnvConfig, PoolConfig, find_chromium
from tests.browser.conftest import UrlTask, find_id
from tests.browser.fleet_fixtures import FleetServer, token_file

pytestmark = pytest.mark.timeout(240)

FORBIDDEN_HOST = "127.0.0.2"


class Recorder:
    """TCP (every accepted connection and its first bytes) and UDP (every datagram) on 127.0.0.2."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self.lock = threading.Lock()
        rec = self

        class TCP(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(1.0)
                try:
                    data = self.request.recv(2048)
                except OSError:
                    data = b""
                with rec.lock:
                    rec.hits.append("tcp " + data.split(b"\r\n")[0].decode("latin-1"))
                try:
                    self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\nLEAKED")
                except OSError:
                    pass

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.tcp = Server((FORBIDDEN_HOST, 0), TCP)
        self.tcp_port = self.tcp.server_address[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind((FORBIDDEN_HOST, 0))
        self.udp_port = self.udp.getsockname()[1]
        self.udp.settimeout(0.2)
        self._stop = False
        threading.Thread(target=self.tcp.serve_forever, daemon=True).start()
        threading.Thread(target=self._udp_loop, daemon=True).start()

    def _udp_loop(self) -> None:
        while not self._stop:
            try:
                data, _ = self.udp.recvfrom(4096)
            except OSError:
                continue
            with self.lock:
                self.hits.append(f"udp {len(data)} bytes")

    def take(self) -> list[str]:
        with self.lock:
            out, self.hits = self.hits, []
        return out

    def close(self) -> None:
        self._stop = True
        self.tcp.shutdown()
        self.tcp.server_close()
        self.udp.close()


def vector_pages(f: str, fws: str, stun: str) -> dict[str, str]:
    """name -> HTML body of an allowed page that tries to reach the forbidden origin `f` on load."""
    worker_js = f"new WebSocket('{fws}/worker-ws'); fetch('{f}/worker-fetch').catch(() => 0);"
    return {
        "fetch_img": f"<img src='{f}/img'><script>fetch('{f}/fetch').catch(() => 0)</script>",
        "page_ws": f"<script>new WebSocket('{fws}/page-ws')</script>",
        "worker_ws": "<script>new Worker(URL.createObjectURL(new Blob([" + json.dumps(worker_js)
                     + "], {type: 'text/javascript'})))</script>",
        "shared_worker": "<script>new SharedWorker(URL.createObjectURL(new Blob([" + json.dumps(worker_js)
                         + "], {type: 'text/javascript'})))</script>",
        "webrtc": "<script>try { const pc = new RTCPeerConnection({iceServers: [{urls: '" + stun + "'}]});"
                  " pc.createDataChannel('x'); pc.createOffer().then(o => pc.setLocalDescription(o)); }"
                  " catch (e) { document.title = 'no rtc'; }</script>",
        "webtransport": f"<script>try {{ new WebTransport('https://{FORBIDDEN_HOST}:" + stun.rsplit(":", 1)[1]
                        + "/wt'); } catch (e) {}</script>",
        "srcdoc": "<iframe srcdoc=\"<script>fetch('" + f + "/srcdoc').catch(() => 0); new WebSocket('" + fws
                  + "/srcdoc-ws')</script>\"></iframe>",
        "iframe": f"<iframe src='{f}/iframe'></iframe>",
        "service_worker": "<script>navigator.serviceWorker && navigator.serviceWorker.register('/sw.js')"
                          ".catch(() => 0)</script>",
        "prefetch": f"<link rel='prefetch' href='{f}/prefetch'><link rel='preconnect' href='{f}'>"
                    f"<link rel='dns-prefetch' href='{f}'><link rel='preload' as='script' href='{f}/preload'>",
        "speculation": "<script type='speculationrules'>{\"prerender\": [{\"source\": \"list\", \"urls\": [\""
                       + f + "/prerender\"]}], \"prefetch\": [{\"source\": \"list\", \"urls\": [\"" + f
                       + "/spec-prefetch\"]}]}</script>",
        "eventsource": f"<script>new EventSource('{f}/sse')</script>",
        "beacon": f"<script>navigator.sendBeacon('{f}/beacon', 'x')</script>",
        "css_import": f"<style>@import url('{f}/import.css');</style>",
        "font": f"<style>@font-face {{ font-family: X; src: url('{f}/font.woff'); }} body {{ font-family: X; }}</style>x",
        "window_open": f"<script>window.open('{f}/popup')</script>",
        "meta_refresh": f"<meta http-equiv='refresh' content='0; url={f}/refresh'>",
        "location": f"<script>setTimeout(() => {{ location.href = '{f}/location'; }}, 10)</script>",
        "ping": f"<a id='p' href='/v/blank' ping='{f}/ping'>ping</a><script>document.getElementById('p').click()</script>",
        "redirect_script": f"<script>fetch('/redirect?to={f}/fetch-redirect').catch(() => 0)</script>",
        # vectors the agent triggers by clicking (ids found in the observation)
        "click_redirect": "<a href='/redirect?to=/redirect2'>Follow redirect</a>",
        "click_form": f"<form action='{f}/form' method='post' target='_blank'><input name='q' value='1'>"
                      "<button type='submit'>Send form</button></form>",
        "click_blank": f"<a href='{f}/blank-target' target='_blank'>Open new tab</a>",
    }


CLICKS = {"click_redirect": "Follow redirect", "click_form": "Send form", "click_blank": "Open new tab"}


class Site:
    """The allowed origin: /v/<name> vector pages, /redirect?to= (302), /redirect2 (302 to forbidden)."""

    def __init__(self, recorder: Recorder) -> None:
        self.forbidden = f"http://{FORBIDDEN_HOST}:{recorder.tcp_port}"
        pages = vector_pages(self.forbidden, f"ws://{FORBIDDEN_HOST}:{recorder.tcp_port}",
                             f"stun:{FORBIDDEN_HOST}:{recorder.udp_port}")
        forbidden = self.forbidden
        self.pages = pages

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/redirect2"):
                    self._redirect(f"{forbidden}/chain-hop")
                elif self.path.startswith("/redirect?to="):
                    self._redirect(self.path.split("=", 1)[1])
                elif self.path == "/sw.js":
                    self._send(f"fetch('{forbidden}/sw-fetch'); new WebSocket('ws{forbidden[4:]}/sw-ws');",
                               "text/javascript")
                else:
                    name = self.path.rsplit("/", 1)[-1]
                    self._send(f"<html><head><title>{name}</title></head><body><h1>{name}</h1>"
                               f"{pages.get(name, '')}</body></html>", "text/html")

            def _redirect(self, to: str) -> None:
                self.send_response(302)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _send(self, body: str, ctype: str) -> None:
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def remote_pool(runner, tmp_path_factory) -> Iterator[BrowserPool]:
    """A pool whose browser lives behind a real browser server on loopback."""
    d = tmp_path_factory.mktemp("security_fleet")
    server = FleetServer(token_file(d), d).start()

    async def make() -> BrowserPool:
        cfg = PoolConfig(remote_endpoints=(server.url,), remote_token_file=server.token_file, contexts_per_browser=8)
        return await BrowserPool(cfg, EnvConfig()).start()

    try:
        p = runner.run(make())
        yield p
        runner.run(p.close())
    finally:
        server.stop()


@pytest.fixture(params=["local", "remote"])
def any_pool(request) -> BrowserPool:
    """The suite runs through local browsers and through the remote fleet."""
    return request.getfixturevalue("pool" if request.param == "local" else "remote_pool")


@pytest.fixture(scope="module")
def hostile() -> Iterator[tuple[Recorder, Site]]:
    rec = Recorder()
    site = Site(rec)
    yield rec, site
    site.close()
    rec.close()


def _goto(space: str, url: str) -> str:
    if space == "webarena":
        return f"```goto [{url}]```"
    if space == "bid":
        return f"goto({url!r})"
    return "<tool_call>" + json.dumps({"name": "goto_url", "arguments": {"url": url}}) + "</tool_call>"


def _click(space: str, obs, name: str) -> str:
    eid = find_id(obs, contains=name)
    if space == "webarena":
        return f"```click [{eid}]```"
    if space == "bid":
        return f"click('{eid}')"
    if space == "webagent_r1":
        return f'do(action="Click", element="{eid}")'
    el = next(e for e in obs.elements if e.id == eid)
    (x, y), (vw, vh) = el.center, obs.metadata.viewport
    return "<tool_call>" + json.dumps({"name": "click", "arguments": {"x": round(x / vw * 1000, 1),
                                                                       "y": round(y / vh * 1000, 1)}}) + "</tool_call>"


def test_unprotected_control_reaches_the_recorder(runner, hostile):
    """The same pages in a plain Chromium context (no proxy, rules or routes) do leak: the suite can fail."""
    rec, site = hostile
    rec.take()

    async def go() -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox", "--disable-gpu"])
            page = await (await browser.new_context()).new_page()
            for name in site.pages:
                try:
                    await page.goto(f"{site.url}/v/{name}", timeout=5000)
                    await page.wait_for_timeout(150)
                except Exception:
                    pass
            await page.wait_for_timeout(1000)
            await browser.close()

    runner.run(go())
    hits = rec.take()
    assert any(h.startswith("udp") for h in hits), hits  # WebRTC STUN reached it
    for path in ("/fetch", "/img", "/page-ws", "/worker-ws", "/srcdoc", "/sse", "/beacon", "/import.css",
                 "/fetch-redirect", "/popup", "/refresh"):
        assert any(path in h for h in hits), (path, hits)
    print(f"control (unprotected): {len(hits)} hits")


@pytest.mark.parametrize("space", ["webarena", "bid", "openwebrl", "webagent_r1"])
def test_no_vector_reaches_a_forbidden_origin(runner, any_pool, hostile, space):
    rec, site = hostile
    rec.take()
    pool = any_pool
    opened, forwarded = sum(b["opened"] for b in pool.browsers()), pool.gateway.forwarded
    cfg = EnvConfig(action_space=space, settle_s=0.1)
    task = UrlTask(f"{site.url}/v/index", (site.url,))

    async def go() -> int:
        steps = 0
        async with pool.episode(task, 0, cfg) as (env, obs):
            if space != "webagent_r1":  # no goto in webagent_r1: its vectors are reached by reset + clicks
                for name in site.pages:
                    r = await env.step(_goto(space, f"{site.url}/v/{name}"))
                    steps += 1
                    assert not r.done and "LEAKED" not in r.observation.text, (name, r.feedback, env.error)
                # the agent navigates itself: a redirect hop to the forbidden origin, and a data: page with script
                for url in (f"{site.url}/redirect?to={site.forbidden}/goto-redirect", f"{site.url}/redirect2",
                            "data:text/html,<script>new WebSocket('ws://" + site.forbidden[7:] + "/data-ws');"
                            "fetch('" + site.forbidden + "/data-fetch')</script>", site.forbidden + "/direct"):
                    r = await env.step(_goto(space, url))
                    steps += 1
                    assert "LEAKED" not in r.observation.text and (
                        r.feedback.startswith("Failed") or "Failed:" in r.feedback or "refused" in r.feedback), (url, r.feedback)
                    assert env.session.allowlist.allows(env.session.page.url), (env.session.page.url, url, r.feedback)
        if space == "webagent_r1":
            for name in site.pages:
                async with pool.episode(UrlTask(f"{site.url}/v/{name}", (site.url,)), 0, cfg) as (env, obs):
                    r = await env.step('do(action="Scroll Down")')
                    steps += 1
                    assert "LEAKED" not in r.observation.text, (name, r.feedback)
        for name, label in CLICKS.items():
            async with pool.episode(UrlTask(f"{site.url}/v/{name}", (site.url,)), 0, cfg) as (env, obs):
                r = await env.step(_click(space, obs, label))
                steps += 1
                assert "LEAKED" not in r.observation.text, (name, r.feedback)
                await env.session.blank_forbidden_pages()  # a popup may commit its error page after the step
                assert all(env.session.allowlist.allows(p.url) for p in env.session.pages), env.session.tabs()
                if name == "click_redirect":
                    assert "outside the allowed origins" in r.feedback, r.feedback
        await asyncio.sleep(1.0)  # late sockets (workers, retries, STUN) have time to arrive
        return steps

    steps = runner.run(go())
    hits = rec.take()
    # the episodes ran in this pool's browser (remote: behind the server, the gateway requiring credentials)
    assert sum(b["opened"] for b in pool.browsers()) > opened
    assert pool.gateway.forwarded - forwarded >= len(site.pages)  # the allowed pages came through the gateway
    assert (pool.gateway.credentials is not None) == bool(pool.config.remote_endpoints)
    assert steps >= len(CLICKS) and hits == [], hits
    where = pool.config.remote_endpoints[0] if pool.config.remote_endpoints else "local"
    print(f"{space} ({where}): {steps} agent steps over {len(site.pages) + 4} vectors, forbidden-origin hits: {len(hits)}, "
          f"gateway: {pool.gateway.forwarded - forwarded} forwarded, {pool.gateway.challenged} challenged, "
          f"{pool.gateway.auth_refused} wrong credentials")
