"""The remote browser fleet, client side: the secret, the connection to a `jaxwebrl.browser.serve` server,
the check that its browser carries the safety flags, and errors that name the fix.

The protocol between a pool and a server (serve.py) is one WebSocket upgrade request: `Authorization:
Bearer <token>` (the fleet's shared secret, read from a file or `$JAXWEBRL_BROWSER_TOKEN`, never from a
command line) and `x-jaxwebrl-egress: {"host": ..., "ports": [...]}` (where this pool's egress gateway
listens). The server builds Chromium's flags itself from that request (the egress lock for those ports, no
WebRTC over UDP, no extensions) and launches its own Chromium binary; a client cannot name a binary or a
flag. The pool still reads the launched browser's command line back and refuses a server whose browser
lacks the flags (an old or foreign server, e.g. a plain `playwright run-server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
from pathlib import Path

from playwright.async_api import Browser, Playwright

REMOTE_FIELD = "config.env.remote_endpoints"
TOKEN_FIELD = "config.env.remote_token_file"
TOKEN_ENV = "JAXWEBRL_BROWSER_TOKEN"
EGRESS_HEADER = "x-jaxwebrl-egress"
REFUSAL_TAG = "jaxwebrl browser server refused:"  # starts every refusal body the server sends
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{32,1024}")


class RemoteEndpointError(ConnectionError):
    """A remote browser server cannot serve this pool (refused, unreachable, its browser lacks the flags)."""


class TokenError(ValueError):
    """The fleet's secret is missing, unreadable, readable by others or too weak."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_token_file(path: str | os.PathLike[str]) -> Path:
    """A fresh random token in `path`, readable by its owner only (written beside it, then renamed, so a
    reader never sees half a token)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(new_token() + "\n")
    os.replace(tmp, p)
    return p


def read_token(path: str | os.PathLike[str] | None, field: str) -> str:
    """The fleet's secret from `path` (read each time, so a rotated file takes effect on the next connection)
    or, without a path, from $JAXWEBRL_BROWSER_TOKEN. `field` names the setting in errors."""
    make = "python -m jaxwebrl.browser.serve --new-token FILE"
    if path:
        p = Path(path)
        try:
            mode = p.stat().st_mode
            token = p.read_text().strip()
        except OSError as exc:
            raise TokenError(f"{field}: cannot read the token file {p} ({exc.strerror}); fix: make one with "
                             f"`{make}` and copy it to every browser host and training host") from exc
        if mode & 0o077:
            raise TokenError(f"{field}: the token file {p} can be read by other users (mode {oct(mode & 0o777)}); "
                             f"fix: chmod 600 {p}")
        where = str(p)
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise TokenError(f"{field}: no secret for the browser fleet; fix: give a token file (make one with "
                             f"`{make}`) or set ${TOKEN_ENV}")
        where = f"${TOKEN_ENV}"
    if not TOKEN_RE.fullmatch(token):
        raise TokenError(f"{field}: the token in {where} is not 32 to 1024 characters of [A-Za-z0-9._~+/=-]; fix: "
                         f"make one with `{make}`")
    return token


def serve_command(url: str) -> str:
    """The command that starts a browser server for endpoint `url` on its host."""
    parts = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = parts.rpartition(":")
    return (f"`python -m jaxwebrl.browser.serve --host {host or 'ADDRESS'} --port {port or 'PORT'} --token-file FILE` "
            f"(FILE: the same secret as {TOKEN_FIELD}; this jaxwebrl and Playwright version)")


def explain_endpoint_error(url: str, exc: BaseException) -> str:
    """One line: what went wrong with remote endpoint `url` and the fix."""
    text = str(exc)
    body = text.split(REFUSAL_TAG, 1)[1].strip().splitlines()[0] if REFUSAL_TAG in text else ""
    fix = f"start {serve_command(url)} on that host, or remove it from {REMOTE_FIELD}"
    if "ECONNREFUSED" in text or isinstance(exc, ConnectionRefusedError):
        why = "refused the connection (no browser server listens there)"
    elif " 401 " in text:
        why = "refused this pool's token"
        fix = f"give {TOKEN_FIELD} (or ${TOKEN_ENV}) the secret that server reads with --token-file"
    elif body:
        why = f"refused the connection: {body}"
    elif any(k in text for k in ("Executable doesn't exist", "lacks the safety flags", "--enable-automation not set")):
        why = ("is not a jaxwebrl browser server: its browser lacks the safety flags (the egress lock, no WebRTC, "
               "no extensions) or could not start")
    elif "version mismatch" in text or " 428 " in text:
        versions = [ln.strip(" ║-") for ln in text.splitlines() if "version: v" in ln]
        why = f"runs another Playwright version ({', '.join(versions) or 'version mismatch'})"
    elif isinstance(exc, asyncio.TimeoutError) or "Timeout" in text:
        why = "did not answer in time (host down or firewalled?)"
    else:
        why = f"failed: {type(exc).__name__}: {text.strip().splitlines()[0][:300] if text.strip() else ''}"
    return f"{url} {why}; fix: {fix}"


async def connect(pw: Playwright, url: str, token: str, egress_host: str, egress_ports: list[int],
                  required_args: list[str], timeout_s: float) -> Browser:
    """Connect to the browser server at `url` (it launches a Chromium for this connection, locked to the
    gateway's `egress_host`:`egress_ports`) and check that the browser carries `required_args`. Raises
    `RemoteEndpointError` naming the url, what failed and the fix."""
    headers = {"Authorization": f"Bearer {token}",
               EGRESS_HEADER: json.dumps({"host": egress_host, "ports": list(egress_ports)})}
    browser: Browser | None = None
    try:
        browser = await asyncio.wait_for(pw.chromium.connect(url, timeout=timeout_s * 1000, headers=headers),
                                         timeout_s + 5)
        await check_launch_flags(browser, required_args, timeout_s)
        return browser
    except Exception as exc:
        if browser is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 5)
        raise RemoteEndpointError(explain_endpoint_error(url, exc)) from exc


async def check_launch_flags(browser: Browser, required_args: list[str], timeout_s: float) -> None:
    """Read the browser's command line (Chromium reports it when launched with --enable-automation) and
    fail unless every one of `required_args` is on it."""
    cdp = await browser.new_browser_cdp_session()
    try:
        line = await asyncio.wait_for(cdp.send("Browser.getBrowserCommandLine"), timeout_s)
    finally:
        with contextlib.suppress(Exception):
            await cdp.detach()
    missing = [a.split("=", 1)[0] for a in required_args if a not in line.get("arguments", [])]
    if missing:
        raise RuntimeError(f"the remote browser lacks the safety flags {missing}")
