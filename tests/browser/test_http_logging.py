"""The task-page servers stay quiet when a browser hangs up mid-response, and still report real errors.

A raw socket asks for a large file, reads a little and resets the connection (SO_LINGER 0), as Chromium
does when a page is navigated away: nothing may reach stderr, and the drop is counted. The file is larger
than Linux's largest autotuned send buffer (tcp_wmem max, 4 MiB by default), so the server is still
writing when the reset arrives: a 290 kB MiniWoB++ file could be buffered whole, and then nothing dropped. A handler that
raises must still log at ERROR with its traceback."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from envs.http_logging import LoggingHTTPServer, LoggingRequestHandlerMixin
from envs.miniwob import MiniWoBServer
from envs.sites.server import Response, SiteServer



def send_buffer_max() -> int:
    try:
        return int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 << 20


def drop_mid_response(port: int, path: str) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    assert s.recv(1024).startswith(b"HTTP/1.")  # the response had started
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
    s.close()


def wait_for(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_dropped_connection_prints_no_traceback(capfd, caplog, tmp_path):
    caplog.set_level(logging.DEBUG, logger="envs.http")
    (tmp_path / "big.bin").write_bytes(b"x" * (4 * send_buffer_max()))
    (tmp_path / "small.html").write_text("<p>ok</p>")
    server = MiniWoBServer(root=tmp_path).start()  # the MiniWoB++ file server, over a folder with a big file
    try:
        port = server.httpd.server_address[1]
        for _ in range(3):
            drop_mid_response(port, "/big.bin")
        assert wait_for(lambda: server.httpd.dropped_connections >= 1), "no drop reached the server"
        with urllib.request.urlopen(server.url + "/small.html") as r:  # still serving
            assert r.status == 200
    finally:
        server.stop()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err, err
    drops = [r for r in caplog.records if "closed the connection early" in r.getMessage()]
    assert drops and all(r.levelno == logging.DEBUG for r in drops)
    assert server.httpd.failed_requests == 0


def test_real_handler_error_is_logged_with_traceback(caplog):
    class Broken(LoggingRequestHandlerMixin, BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            raise RuntimeError("handler bug")

    httpd = LoggingHTTPServer(("127.0.0.1", 0), Broken)
    import threading

    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises((urllib.error.URLError, ConnectionError, Exception)):
            urllib.request.urlopen(f"http://127.0.0.1:{httpd.server_address[1]}/x", timeout=5)
        assert wait_for(lambda: httpd.failed_requests == 1)
    finally:
        httpd.shutdown()
        httpd.server_close()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "envs.http"]
    assert len(errors) == 1 and errors[0].exc_info and "handler bug" in str(errors[0].exc_info[1])
    assert httpd.dropped_connections == 0


def test_site_handler_error_is_logged_and_served_as_500(caplog):
    def handler(req):
        if req.path == "/boom":
            raise ValueError("site bug")
        return Response("ok")

    with SiteServer(handler) as site:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(site.url + "/boom", timeout=5)
        assert e.value.code == 500
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "envs.http"]
    assert len(errors) == 1 and "site bug" in str(errors[0].exc_info[1])
