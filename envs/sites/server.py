"""A tiny stdlib HTTP server for the local sites: one ThreadingHTTPServer per site on 127.0.0.1 (so each
site is its own origin), a daemon thread each, and per-visitor state keyed by a `sid` cookie so parallel
browser contexts (own cookie jars) never see each other's carts, orders or posts. An optional `PageLatency`
holds each page (not the static files) for a heavy-tailed delay on its request thread (envs/sites/latency.py).
"""

from __future__ import annotations

import html
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from envs.http_logging import LoggingHTTPServer, LoggingRequestHandlerMixin
from envs.sites.latency import PageLatency

STATIC = Path(__file__).with_name("static")
logger = logging.getLogger("envs.http")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, list[str]]
    state: dict[str, Any]

    def arg(self, key: str, default: str = "") -> str:
        if key in self.query:
            return self.query[key]
        vals = self.form.get(key)
        return vals[0] if vals else default


@dataclass
class Response:
    body: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/html; charset=utf-8"


def redirect(location: str) -> Response:
    return Response("", 303, {"Location": location})


def esc(s: Any) -> str:
    return html.escape(str(s), quote=True)


def page(title: str, body: str, nav: str = "", extra_head: str = "") -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<link rel='stylesheet' href='/static/site.css'>{extra_head}</head>"
        f"<body><header>{nav}</header><main>{body}</main></body></html>"
    )


Handler = Callable[[Request], Response]


class SiteServer:
    """Serve `handler` on 127.0.0.1:`port` (0 = any free port). `url` is the origin, no trailing slash.
    `latency`: delay every page by a draw from it (static files are not delayed)."""

    def __init__(self, handler: Handler, port: int = 0, latency: PageLatency | None = None) -> None:
        self.handler = handler
        self.latency = latency
        self.states: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        outer = self

        class _H(LoggingRequestHandlerMixin, BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                parts = urlsplit(self.path)
                if parts.path.startswith("/static/"):
                    return self._static(parts.path[len("/static/"):])
                if outer.latency is not None:  # the server's think time: this request's thread waits, no CPU
                    time.sleep(outer.latency.draw())
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                form = parse_qs(raw, keep_blank_values=True) if method == "POST" else {}
                query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                sid = None
                for c in (self.headers.get("Cookie") or "").split(";"):
                    k, _, v = c.strip().partition("=")
                    if k == "sid":
                        sid = v
                new_sid = sid is None or sid not in outer.states
                if new_sid:
                    sid = uuid.uuid4().hex
                    with outer.lock:
                        outer.states[sid] = {}
                with outer.lock:
                    state = outer.states[sid]
                try:
                    resp = outer.handler(Request(method, parts.path, query, form, state))
                except Exception as exc:  # a bug in a site must show as a page, not kill the server thread
                    logger.error("site handler failed on %s %s", method, parts.path, exc_info=exc)
                    resp = Response(f"<h1>500</h1><pre>{esc(exc)}</pre>", 500)
                body = resp.body.encode()
                self.send_response(resp.status)
                self.send_header("Content-Type", resp.content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                if new_sid:
                    self.send_header("Set-Cookie", f"sid={sid}; Path=/; HttpOnly; SameSite=Lax")
                for k, v in resp.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _static(self, name: str) -> None:
                f = (STATIC / name).resolve()
                if STATIC.resolve() not in f.parents or not f.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = f.read_bytes()
                ctype = {"css": "text/css", "js": "application/javascript", "html": "text/html"}.get(
                    f.suffix.lstrip("."), "application/octet-stream")
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        self.httpd = LoggingHTTPServer(("127.0.0.1", port), _H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "SiteServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "SiteServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
