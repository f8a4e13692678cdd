"""WebArena-style rule evaluators: `string_match` (exact / must_include), `url_match`, `program_html`.

A task's `eval` block lists `eval_types`; the reward is the product of the listed checks (1.0 or 0.0),
as in WebArena. `program_html` entries run a JavaScript expression (the "locator") on a page of the
episode's own context (so the cart/orders of that episode are what is checked) and compare its text with
`required_contents`.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jaxwebrl.browser.session import BrowserSession


def normalise(s: str) -> str:
    s = str(s).strip().lower()
    s = re.sub(r"\s+", " ", s)
    return s.strip(" .'\"`")


def string_match(answer: str | None, reference: dict[str, Any]) -> bool:
    """exact_match: normalised equality; must_include: every string appears (case-insensitive)."""
    if answer is None:
        return False
    got = normalise(answer)
    if "exact_match" in reference and normalise(reference["exact_match"]) != got:
        return False
    for needle in reference.get("must_include", []):
        alts = [normalise(a) for a in str(needle).split(" |OR| ")]
        if not any(a in got for a in alts):
            return False
    return "exact_match" in reference or bool(reference.get("must_include"))


def url_match(current: str, reference: str) -> bool:
    """Same host:port and path (trailing slash ignored); every reference query parameter present and equal.
    Alternatives are separated by ` |OR| `."""
    for ref in reference.split(" |OR| "):
        a, b = urlsplit(current), urlsplit(ref.strip())
        if (a.hostname, a.port) != (b.hostname, b.port):
            continue
        if (a.path.rstrip("/") or "/") != (b.path.rstrip("/") or "/"):
            continue
        qa, qb = parse_qs(a.query), parse_qs(b.query)
        if all(qa.get(k) == v or [x.lower() for x in qa.get(k, [])] == [x.lower() for x in v] for k, v in qb.items()):
            return True
    return False


def contents_match(value: str, required: dict[str, Any]) -> bool:
    if "exact_match" in required:
        return normalise(value) == normalise(required["exact_match"])
    if "must_include" in required:
        return all(any(normalise(a) in normalise(value) for a in str(n).split(" |OR| ")) for n in required["must_include"])
    if "must_exclude" in required:
        return all(normalise(n) not in normalise(value) for n in required["must_exclude"])
    return False


async def run_locator(session: BrowserSession, url: str, locator: str) -> str:
    """Evaluate the JS expression `locator` on `url` ("last" = the agent's current page) and return text."""
    expr = f"() => {{ try {{ const v = ({locator}); return v == null ? '' : String(v); }} catch (e) {{ return ''; }} }}"
    if url == "last":
        return str(await session.page.evaluate(expr))
    session.adopt_new_pages = False
    page = await session.context.new_page()
    try:
        await page.goto(url, wait_until="load")
        return str(await page.evaluate(expr))
    finally:
        await page.close()
        session.adopt_new_pages = True


async def program_html(session: BrowserSession, checks: list[dict[str, Any]]) -> bool:
    for check in checks:
        value = await run_locator(session, check["url"], check["locator"])
        if not contents_match(value, check["required_contents"]):
            return False
    return True


async def evaluate(spec: dict[str, Any], session: BrowserSession, answer: str | None) -> tuple[float, dict[str, Any]]:
    """Run every listed check; reward 1.0 only if all pass. Returns (reward, per-check results)."""
    results: dict[str, bool] = {}
    for kind in spec["eval_types"]:
        if kind == "string_match":
            results[kind] = string_match(answer, spec["reference_answers"])
        elif kind == "url_match":
            results[kind] = url_match(session.page.url, spec["reference_url"])
        elif kind == "program_html":
            results[kind] = await program_html(session, spec["program_html"])
        else:
            raise ValueError(f"unknown eval type {kind!r}")
    return (1.0 if results and all(results.values()) else 0.0), results
