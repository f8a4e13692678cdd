"""Element- and page-level operations shared by the id-based action spaces (webarena, webagent_r1, bid).

Each returns a one-line feedback string; they raise InvalidAction (unknown id, bad tab) or Playwright
errors, which `base.run_safely` turns into feedback. Navigation effects are reported by comparing the url
and tab count before and after.
"""

from __future__ import annotations

from jaxwebrl.browser.session import BrowserSession, InvalidAction

_KEY_NAMES = {
    "enter": "Enter", "return": "Enter", "tab": "Tab", "esc": "Escape", "escape": "Escape",
    "backspace": "Backspace", "delete": "Delete", "del": "Delete", "space": "Space", " ": "Space",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "ctrl": "Control", "control": "Control", "cmd": "Meta", "meta": "Meta", "command": "Meta",
    "alt": "Alt", "option": "Alt", "shift": "Shift", "home": "Home", "end": "End",
    "pageup": "PageUp", "pagedown": "PageDown", "page_up": "PageUp", "page_down": "PageDown",
}


def normalise_key(combo: str) -> str:
    """`ctrl+a` -> `Control+a`, `enter` -> `Enter`; unknown names pass through to Playwright."""
    parts = [p.strip() for p in combo.strip().split("+")] if combo.strip() != "+" else ["+"]
    out = []
    for p in parts:
        if not p:
            continue
        low = p.lower()
        if low in _KEY_NAMES:
            out.append(_KEY_NAMES[low])
        elif low.startswith("f") and low[1:].isdigit():
            out.append(p.upper())
        else:
            out.append(p)
    if not out:
        raise InvalidAction(f"empty key combination {combo!r}")
    return "+".join(out)


def element_label(session: BrowserSession, eid: str) -> str:
    el = session.last.by_id(str(eid)) if session.last else None
    return f"[{eid}] {el.role} {el.name!r}" if el else f"[{eid}]"


class Effect:
    """Records url/tab count before an action and reports navigation or new tabs afterwards."""

    def __init__(self, session: BrowserSession) -> None:
        self.session = session
        self.url = session.page.url if session.pages else ""
        self.tabs = len(session.pages)

    async def describe(self) -> str:
        await self.session.settle()
        notes = []
        if len(self.session.pages) > self.tabs:
            notes.append(f"A new tab opened: {self.session.page.url}.")
        elif self.session.pages and self.session.page.url != self.url:
            notes.append(f"Page navigated to {self.session.page.url}.")
        return (" " + " ".join(notes)) if notes else ""


async def click(session: BrowserSession, eid: str, button: str = "left", count: int = 1) -> str:
    loc = await session.locate(eid)
    eff = Effect(session)
    if button not in ("left", "right", "middle"):
        raise InvalidAction(f"unknown mouse button {button!r}")
    await loc.click(button=button, click_count=count)
    kind = {1: "Clicked", 2: "Double-clicked"}.get(count, f"Clicked {count}x")
    if button != "left":
        kind = f"{kind} ({button} button)"
    return f"{kind} {element_label(session, eid)}." + await eff.describe()


async def hover(session: BrowserSession, eid: str) -> str:
    loc = await session.locate(eid)
    await loc.hover()
    return f"Hovered over {element_label(session, eid)}."


async def type_text(session: BrowserSession, eid: str, text: str, enter: bool = False, clear: bool = True) -> str:
    loc = await session.locate(eid)
    eff = Effect(session)
    if clear:
        await loc.fill(text)
    else:
        await loc.press_sequentially(text)
    if enter:
        await loc.press("Enter")
    msg = f"Typed {text!r} into {element_label(session, eid)}" + (" and pressed Enter." if enter else ".")
    return msg + await eff.describe()


async def focus(session: BrowserSession, eid: str) -> str:
    loc = await session.locate(eid)
    await loc.focus()
    return f"Focused {element_label(session, eid)}."


async def clear(session: BrowserSession, eid: str) -> str:
    loc = await session.locate(eid)
    await loc.clear()
    return f"Cleared {element_label(session, eid)}."


async def press_on(session: BrowserSession, eid: str, combo: str) -> str:
    loc = await session.locate(eid)
    eff = Effect(session)
    key = normalise_key(combo)
    await loc.press(key)
    return f"Pressed {key} on {element_label(session, eid)}." + await eff.describe()


async def press(session: BrowserSession, combo: str) -> str:
    eff = Effect(session)
    key = normalise_key(combo)
    await session.page.keyboard.press(key)
    return f"Pressed {key}." + await eff.describe()


async def keyboard_type(session: BrowserSession, text: str) -> str:
    await session.page.keyboard.type(text)
    return f"Typed {text!r} with the keyboard."


async def select_option(session: BrowserSession, eid: str, option: str | list[str]) -> str:
    loc = await session.locate(eid)
    tag = await loc.evaluate("e => e.tagName.toLowerCase()")
    if tag != "select":
        raise InvalidAction(f"element {element_label(session, eid)} is not a dropdown (<{tag}>)")
    options = option if isinstance(option, list) else [option]
    labels = await loc.evaluate("e => Array.from(e.options).map(o => [o.value, o.text.trim()])")
    chosen = []
    for want in options:
        match = next((v for v, t in labels if t == want or v == want), None)
        if match is None:
            match = next((v for v, t in labels if want.lower() in t.lower()), None)
        if match is None:
            raise InvalidAction(f"option {want!r} not in {[t for _, t in labels]}")
        chosen.append(match)
    eff = Effect(session)
    await loc.select_option(value=chosen)
    return f"Selected {options if len(options) > 1 else options[0]!r} in {element_label(session, eid)}." + await eff.describe()


async def scroll(session: BrowserSession, direction: str, fraction: float = 1.0) -> str:
    d = direction.strip().lower()
    if d not in ("up", "down", "left", "right"):
        raise InvalidAction(f"scroll direction must be up or down, got {direction!r}")
    vp = session.page.viewport_size or {"width": 1280, "height": 720}
    dx = {"left": -1, "right": 1}.get(d, 0) * vp["width"] * fraction
    dy = {"up": -1, "down": 1}.get(d, 0) * vp["height"] * fraction
    moved = await session.wheel(dx, dy)
    msg = f"Scrolled {d}."
    if not moved:
        msg += " Note: page scroll position did not change and may be at a boundary."
    return msg


async def scroll_by(session: BrowserSession, dx: float, dy: float) -> str:
    moved = await session.wheel(dx, dy)
    msg = f"Scrolled by ({dx:g}, {dy:g})."
    if not moved:
        msg += " Note: page scroll position did not change and may be at a boundary."
    return msg


async def goto(session: BrowserSession, url: str) -> str:
    url = url.strip()
    if not url:
        raise InvalidAction("goto needs a url")
    await session.goto(url)
    return f"Navigated to {session.page.url}."


async def go_back(session: BrowserSession) -> str:
    before = session.page.url
    await session.page.go_back(wait_until="load")
    if session.page.url == before:
        return "Went back. Note: no previous page in history; the url did not change."
    return f"Went back to {session.page.url}."


async def go_forward(session: BrowserSession) -> str:
    before = session.page.url
    await session.page.go_forward(wait_until="load")
    if session.page.url == before:
        return "Went forward. Note: no next page in history; the url did not change."
    return f"Went forward to {session.page.url}."


async def new_tab(session: BrowserSession) -> str:
    await session.new_tab()
    return f"Opened a new tab (tab {session.active})."


async def tab_focus(session: BrowserSession, index: int) -> str:
    await session.switch_tab(int(index))
    return f"Switched to tab {session.active} ({session.page.url})."


async def close_tab(session: BrowserSession) -> str:
    await session.close_tab()
    return f"Closed the tab; now on tab {session.active} ({session.page.url})."
