"""Logging for the stdlib HTTP servers that serve task pages (MiniWoB++ files, the local sites).

socketserver's default `handle_error` prints a full traceback to stderr for every exception, including a
browser that closes a connection mid-response (BrokenPipeError / ConnectionResetError when a page is
navigated away or a context is closed). Those are routine during evaluation; a user reads them as a crash.
Here a dropped connection is counted and logged at DEBUG, and any other exception is logged once at ERROR
with its traceback through the `envs.http` logger.
"""

from __future__ import annotations

import http.server
import logging
import sys
import threading
from typing import Any

logger = logging.getLogger("envs.http")

# What a client hanging up looks like from the server side; nothing on our side failed.
CLIENT_DISCONNECTS: tuple[type[BaseException], ...] = (BrokenPipeError, ConnectionResetError,
                                                       ConnectionAbortedError, TimeoutError)


class LoggingHTTPServer(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer that logs instead of printing: drops at DEBUG (and counted), errors at ERROR."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dropped_connections = 0
        self.failed_requests = 0
        self._count_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, CLIENT_DISCONNECTS):
            with self._count_lock:
                self.dropped_connections += 1
            logger.debug("client %s closed the connection early: %r", client_address, exc)
            return
        with self._count_lock:
            self.failed_requests += 1
        logger.error("request from %s to %s failed", client_address, self.server_address, exc_info=exc)


class LoggingRequestHandlerMixin:
    """Routes BaseHTTPRequestHandler's access log to DEBUG and its error log (4xx/5xx sent) to INFO."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("%s " + format, self.address_string(), *args)  # type: ignore[attr-defined]

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.info("%s " + format, self.address_string(), *args)  # type: ignore[attr-defined]
