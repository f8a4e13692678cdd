"""Observations built from a marked snapshot: a11y-tree text, simplified HTML, screenshot (+ set-of-marks)
and page metadata, selected and combined by `ObsConfig`.

Text formats:
- a11y tree (BrowserAgent / NNetNav / WebArena line format), one element per line, tab-indented by depth:
  `[331] textbox "Search 'Wikipedia'" required: False` (name is Python repr, properties as `key: value`).
- simplified HTML (WebAgent-R1): kept elements only, each with `id="N"`, wrappers without text flattened.
The text budget cuts at a line boundary and appends `[... truncated: showing K of N lines]`, so the same
page always truncates the same way.
"""

from __future__ import annotations

import hashlib
import html as _html
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jaxwebrl.browser.config import ObsConfig
from jaxwebrl.browser.marking import Element, Snapshot
from jaxwebrl.browser.safety import origin_of
from jaxwebrl.browser.session import BrowserSession

VOID_TAGS = frozenset({"input", "img", "br", "hr"})


@dataclass
class PageMetadata:
    """What OpenWebRL puts beside the screenshot: url, tabs, scroll, focused element, viewport."""

    url: str
    title: str
    tabs: list[dict[str, Any]]
    active_tab: int
    scroll: tuple[float, float]
    page_size: tuple[float, float]
    viewport: tuple[float, float]
    focused: str | None

    def to_text(self) -> str:
        tabs = "; ".join(
            f"{t['index']}{' (current)' if t['active'] else ''}: {t.get('title') or ''} {t['url']}".strip()
            for t in self.tabs
        )
        return (
            f"URL: {self.url}\nTitle: {self.title}\nTabs: {tabs}\n"
            f"Viewport: {int(self.viewport[0])}x{int(self.viewport[1])}, page size "
            f"{int(self.page_size[0])}x{int(self.page_size[1])}, scroll ({int(self.scroll[0])}, {int(self.scroll[1])})\n"
            f"Focused: {self.focused or 'none'}"
        )


@dataclass
class Observation:
    """One observation. `text` is what the prompt shows (per ObsConfig.text_mode); the parts are kept too."""

    goal: str
    text: str
    axtree: str | None = None
    html: str | None = None
    screenshot: bytes | None = None
    metadata: PageMetadata | None = None
    truncated: bool = False
    elements: list[Element] = field(default_factory=list)


def observation_digest(obs: Observation) -> str:
    """A stable fingerprint of what the policy saw: the text's hash, plus the screenshot's when there is one
    (WebGym's repetition filter compares screenshots; text-only runs compare the text)."""
    digest = hashlib.sha1(obs.text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if obs.screenshot:
        digest += ":" + hashlib.sha1(obs.screenshot).hexdigest()[:16]
    return digest


def _fmt_value(v: Any) -> str:
    return "True" if v is True else "False" if v is False else str(v)


def relative_url(url: str, page_url: str | None) -> str:
    """`url` as a path when it is on `page_url`'s origin: a local server's port then never reaches the prompt."""
    origin = origin_of(url)
    if not page_url or not origin or origin != origin_of(page_url):
        return url
    parts = urlsplit(url)
    return urlunsplit(("", "", parts.path or "/", parts.query, parts.fragment))


def shown_name(el: Element) -> str:
    """The name an element's a11y line shows: its accessible name, or a text node's own text."""
    return el.name if el.name or el.role != "StaticText" else el.text


def element_head(el: Element, id_after_name: bool = False) -> str:
    """An element's id, role and name as its a11y line shows them (`[12] button 'No'`, or `button 'No' [12]`)."""
    name = shown_name(el)
    return f"{el.role} {name!r} [{el.id}]" if id_after_name else f"[{el.id}] {el.role} {name!r}"


def axtree_line(el: Element, depth_offset: int = 1, page_url: str | None = None,
                viewport: tuple[float, float] | None = None, id_after_name: bool = False) -> str:
    """One element's line. With `viewport`, an interactive element in view also shows its box centre on the
    0..1000 grid (`centre: (x, y)`), what coordinate tools aim at when the policy reads text, not pixels. With
    `id_after_name`, the id follows the name (`button 'No' [12]`)."""
    line = "\t" * (el.depth + depth_offset) + element_head(el, id_after_name)
    for key, value in el.props.items():
        if key == "url" and isinstance(value, str):
            value = relative_url(value, page_url)
        line += f" {key}: {_fmt_value(value)}"
    if viewport is not None and el.interactive and el.in_viewport and all(viewport):
        x, y = el.normalised_centre(viewport)
        line += f" centre: ({x}, {y})"
    return line


def render_axtree(snap: Snapshot, include_hidden: bool = False, relative_urls: bool = False,
                  box_centres: bool = False, ids_after_names: bool = False) -> str:
    """One line per visible element; with `relative_urls`, links on the page's own origin show only their path;
    with `box_centres`, interactive elements in view show their centre on the 0..1000 grid; with
    `ids_after_names`, each id follows its element's name."""
    page_url = snap.url if relative_urls else None
    viewport = snap.viewport if box_centres else None
    lines = [f"RootWebArea {snap.title!r}" + (" focused: True" if snap.focused is None else "")]
    lines += [axtree_line(el, page_url=page_url, viewport=viewport, id_after_name=ids_after_names)
              for el in snap.elements if include_hidden or el.visible]
    return "\n".join(lines)


def _html_open(el: Element) -> str:
    attrs = [f'id="{el.id}"']
    for key, value in el.attrs.items():
        if key in ("role",) and el.tag not in ("div", "span"):
            continue
        attrs.append(f'{key}="{_html.escape(value, quote=True)}"')
    for key, value in el.props.items():
        if key == "url" or key == "focused":
            continue
        if isinstance(value, bool):
            if value and key != "required" or (key == "required" and value):
                attrs.append(key)
        else:
            attrs.append(f'{key}="{_html.escape(str(value), quote=True)}"')
    return f"<{el.tag} " + " ".join(attrs)


def render_html(snap: Snapshot, include_hidden: bool = False) -> str:
    """Nested simplified HTML, one open tag per line; a node's children are those after it with larger depth."""
    els = [el for el in snap.elements if include_hidden or el.visible]
    lines: list[str] = []
    stack: list[Element] = []
    for i, el in enumerate(els):
        while stack and stack[-1].depth >= el.depth:
            top = stack.pop()
            lines.append(f"</{top.tag}>")
        content = _html.escape(el.text if el.text else (el.name if not el.interactive or el.tag not in ("input", "select", "textarea") else ""))
        has_children = i + 1 < len(els) and els[i + 1].depth > el.depth
        if el.tag in VOID_TAGS:
            lines.append(_html_open(el) + "/>")
        elif has_children:
            lines.append(_html_open(el) + ">" + content)
            stack.append(el)
        else:
            lines.append(_html_open(el) + ">" + content + f"</{el.tag}>")
    while stack:
        lines.append(f"</{stack.pop().tag}>")
    return f"<html><title>{_html.escape(snap.title)}</title>\n" + "\n".join(lines) + "\n</html>"


def truncate(text: str, budget: int) -> tuple[str, bool]:
    """Cut `text` at a line boundary so that the result (marker included) fits in `budget` characters."""
    if len(text) <= budget:
        return text, False
    lines = text.split("\n")
    marker_room = 60
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget - marker_room:
            break
        kept.append(line)
        used += len(line) + 1
    if not kept:
        kept = [lines[0][: max(0, budget - marker_room)]]
    return "\n".join(kept) + f"\n[... truncated: showing {len(kept)} of {len(lines)} lines]", True


SOM_JS = """(boxes) => {
  const root = document.createElement('div');
  root.id = '__jaxwebrl_som';
  root.style.cssText = 'position:fixed;left:0;top:0;width:0;height:0;z-index:2147483647;pointer-events:none';
  for (const [id, x, y, w, h] of boxes) {
    const b = document.createElement('div');
    b.style.cssText = `position:fixed;left:${x}px;top:${y}px;width:${w}px;height:${h}px;border:2px solid #e0218a;box-sizing:border-box`;
    const t = document.createElement('span');
    t.textContent = id;
    t.style.cssText = 'position:absolute;left:-2px;top:-14px;background:#e0218a;color:#fff;font:bold 10px monospace;padding:0 2px';
    b.appendChild(t);
    root.appendChild(b);
  }
  document.documentElement.appendChild(root);
}"""


async def screenshot(session: BrowserSession, snap: Snapshot, set_of_marks: bool) -> bytes:
    """Viewport PNG; with set-of-marks, boxes and ids of visible interactive elements are drawn first."""
    page = session.page
    if not set_of_marks:
        return await page.screenshot(type="png")
    boxes = [[el.id, *el.bbox] for el in snap.elements if el.interactive and el.in_viewport]
    await page.evaluate(SOM_JS, boxes)
    try:
        return await page.screenshot(type="png")
    finally:
        await page.evaluate("() => { const r = document.getElementById('__jaxwebrl_som'); if (r) r.remove(); }")


async def observe(session: BrowserSession, config: ObsConfig, goal: str) -> Observation:
    """Mark the active tab and build the configured observation parts."""
    await session.ensure_page()
    snap = await session.snapshot()
    ax = (render_axtree(snap, config.include_hidden, config.relative_urls, config.box_centres, config.ids_after_names)
          if config.text_mode in ("axtree", "both") else None)
    ht = render_html(snap, config.include_hidden) if config.text_mode in ("html", "both") else None
    truncated = False
    if config.text_mode == "both":
        half = config.text_budget_chars // 2
        ax, t1 = truncate(ax or "", half)
        ht, t2 = truncate(ht or "", half)
        text, truncated = f"{ax}\n\n{ht}", t1 or t2
    elif ax is not None:
        ax, truncated = truncate(ax, config.text_budget_chars)
        text = ax
    elif ht is not None:
        ht, truncated = truncate(ht, config.text_budget_chars)
        text = ht
    else:
        text = ""
    shot = await screenshot(session, snap, config.set_of_marks) if config.screenshot else None
    meta = None
    if config.metadata:
        titles = await session.tab_titles()
        tabs = session.tabs()
        for t, title in zip(tabs, titles):
            t["title"] = title
        focused = snap.by_id(snap.focused) if snap.focused else None
        meta = PageMetadata(
            url=snap.url, title=snap.title, tabs=tabs, active_tab=session.active, scroll=snap.scroll,
            page_size=snap.size, viewport=snap.viewport,
            focused=f"[{focused.id}] {focused.role} {focused.name!r}" if focused else None,
        )
    return Observation(goal=goal, text=text, axtree=ax, html=ht, screenshot=shot, metadata=meta,
                       truncated=truncated, elements=snap.elements)
