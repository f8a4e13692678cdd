"""BrowserSession: one isolated browser context (own cookies/storage) seen as a list of tabs.

This is the `page handle` the action executors receive. It owns the tab list (popups are added as tabs and
become active, closed pages are removed), the element-id counter, the last snapshot (id -> frame map), the
allowlist, and the navigation helpers that enforce it. It knows nothing of tasks or action grammars.
"""

from __future__ import annotations

import asyncio
import collections
import math
from typing import Any, Protocol

from playwright.async_api import BrowserContext, Locator, Page

from jaxwebrl.browser.marking import ID_ATTR, MARK_JS, IdCounter, Snapshot, mark_page
from jaxwebrl.browser.safety import Allowlist, dismiss_dialog, install

NAVIGATION_TIMEOUT_S = 30.0  # the least a page load (reset, or a navigation an action starts) may take
# A wheel is received when the window sees its `wheel` or a `scroll` (capture: an inner scroller's too), or, over
# an iframe, whose events the window never sees, after 1 s of the page's own timers.
WHEEL_ARM_JS = """() => { window.__jaxwebrlWheel = new Promise(resolve => {
  for (const type of ['wheel', 'scroll']) addEventListener(type, resolve, {once: true, capture: true, passive: true});
  setTimeout(resolve, 1000);
}); }"""
WHEEL_SETTLED_JS = "() => window.__jaxwebrlWheel.then(() => new Promise(r => setTimeout(r, 100)))"


class InvalidAction(Exception):
    """An action that refers to something that does not exist (unknown id, bad tab index): a format error."""


class AgentTimeout(Exception):
    """The policy's own request (a wait) does not fit in the time left to its step or episode. The episode
    ends `agent_timeout`: the policy's outcome, rewarded and trained on, not an infrastructure failure."""


class SessionSettings(Protocol):
    """What a session reads from the env's configuration (EnvConfig provides it)."""

    action_timeout_s: float
    step_timeout_s: float
    settle_s: float


class BrowserSession:
    """Tabs, element ids and safe navigation for one context. Create with `await BrowserSession.create(...)`."""

    def __init__(self, context: BrowserContext, config: SessionSettings, allowlist: Allowlist) -> None:
        self.context = context
        self.config = config
        self.allowlist = allowlist
        self.blocked: list[str] = []
        self.pages: list[Page] = []
        self.active = 0
        self.counter = IdCounter()
        self.last: Snapshot | None = None
        self.closed = False
        self.adopt_new_pages = True  # False while an evaluator opens its own scratch page
        self._nav_pending: set[Any] = set()  # in-flight document requests (navigation started, not loaded)
        self._nav_event = asyncio.Event()  # set when a navigation request or a new tab begins
        self._nav_idle = asyncio.Event()  # set while no document request is in flight
        self._nav_idle.set()
        # safety-limit timeouts that fired in this session's current episode, by kind (the env reports them)
        self.timeouts: collections.Counter[str] = collections.Counter()
        self.left_allowlist: list[str] = []  # urls tabs committed outside the allowlist (reported, then blanked)
        self._blanking: set[asyncio.Future[Any]] = set()
        self.deadline = math.inf  # loop time by which the current step must end (set by the env per step)
        self.agent_wait_s = 0.0  # seconds the policy's own waits took in the current step

    @classmethod
    async def create(cls, context: BrowserContext, config: SessionSettings, allowlist: Allowlist) -> "BrowserSession":
        self = cls(context, config, allowlist)
        context.set_default_timeout(config.action_timeout_s * 1000)
        # a page load is not an agent action: on a loaded 2-core machine (load 13) a MiniWoB++ reset's goto took
        # over 10 s; a step's own timeout still bounds navigations inside a step
        context.set_default_navigation_timeout(max(config.action_timeout_s, NAVIGATION_TIMEOUT_S) * 1000)
        await context.add_init_script(MARK_JS)
        await install(context, allowlist, self.blocked)
        context.on("page", self._on_page)
        context.on("request", self._on_request)
        context.on("requestfinished", self._request_done)
        context.on("requestfailed", self._request_done)
        page = await context.new_page()
        self._adopt(page)
        return self

    def recycle(self, allowlist: Allowlist) -> None:
        """Ready a parked session for its next episode: the allowlist becomes `allowlist`'s (in place: the
        routes hold this object), the ids restart at 1 (the next navigation loads a fresh document),
        blocked-request history and tab state are cleared."""
        self.allowlist.replace(allowlist.origins, allowlist.allow_data_urls)
        self.counter = IdCounter()
        self.last = None
        self.blocked.clear()  # in place: the route handler holds this list
        self.left_allowlist.clear()
        self.active = 0
        self.adopt_new_pages = True
        self._nav_pending.clear()
        self._nav_idle.set()
        self.timeouts.clear()

    @property
    def reusable(self) -> bool:
        """One tab left and nothing closed: the context can serve another episode of the same task."""
        return not self.closed and len(self.pages) == 1 and len(self.context.pages) == 1

    # ---- tabs -------------------------------------------------------------------------------------
    def _adopt(self, page: Page) -> None:
        if page in self.pages:
            return
        page.on("dialog", dismiss_dialog)
        page.on("close", self._on_close)
        page.on("framenavigated", lambda frame, p=page: self._on_navigated(p, frame))
        page.on("download", lambda d: asyncio.ensure_future(_cancel(d)))
        self.pages.append(page)

    def _on_page(self, page: Page) -> None:
        """A popup (target=_blank, window.open) becomes a new tab and the active one."""
        if page in self.pages or not self.adopt_new_pages:
            return
        self._adopt(page)
        self.active = len(self.pages) - 1
        self._nav_event.set()

    def _on_request(self, request: Any) -> None:
        try:
            if request.is_navigation_request():
                self._nav_pending.add(request)
                self._nav_idle.clear()
                self._nav_event.set()
        except Exception:
            pass

    def _request_done(self, request: Any) -> None:
        self._nav_pending.discard(request)
        if not self._nav_pending:
            self._nav_idle.set()

    def _on_close(self, page: Page) -> None:
        if page in self.pages:
            idx = self.pages.index(page)
            self.pages.remove(page)
            if self.active >= idx and self.active > 0:
                self.active -= 1

    @property
    def page(self) -> Page:
        if not self.pages:
            raise InvalidAction("no open tab")
        self.active = min(self.active, len(self.pages) - 1)
        return self.pages[self.active]

    async def ensure_page(self) -> Page:
        """Always leave at least one tab open (closing the last tab opens about:blank)."""
        if not self.pages:
            page = await self.context.new_page()
            self._adopt(page)
            self.active = 0
        return self.page

    async def new_tab(self, url: str | None = None) -> Page:
        page = await self.context.new_page()
        self._adopt(page)
        self.active = self.pages.index(page)
        if url:
            await self.goto(url)
        return page

    async def switch_tab(self, index: int) -> Page:
        if not 0 <= index < len(self.pages):
            raise InvalidAction(f"tab index {index} out of range (open tabs: {len(self.pages)})")
        self.active = index
        await self.page.bring_to_front()
        return self.page

    async def close_tab(self) -> None:
        page = self.page
        await page.close()
        if page in self.pages:
            self._on_close(page)
        await self.ensure_page()

    def tabs(self) -> list[dict[str, Any]]:
        return [{"index": i, "url": p.url, "active": i == self.active} for i, p in enumerate(self.pages)]

    async def tab_titles(self) -> list[str]:
        out = []
        for p in self.pages:
            try:
                out.append(await asyncio.wait_for(p.title(), 2.0))
            except Exception:
                out.append("")
        return out

    # ---- navigation -------------------------------------------------------------------------------
    async def goto(self, url: str) -> None:
        """Navigate the active tab; raises PermissionError for urls outside the allowlist."""
        if not self.allowlist.allows(url):
            raise PermissionError(self.allowlist.why_refused(url))
        await self.page.goto(url, wait_until="load")

    def _on_navigated(self, page: Page, frame: Any) -> None:
        """A tab committed a document outside the allowlist (a refused redirect or popup shows as a
        chrome-error page, a data: page): send it to about:blank at once, whenever that happens."""
        try:
            if frame != page.main_frame or self.allowlist.allows(frame.url):
                return
        except Exception:
            return
        self.left_allowlist.append(frame.url)
        self.blocked.append(frame.url)
        task = asyncio.ensure_future(self._blank(page))
        self._blanking.add(task)
        task.add_done_callback(self._blanking.discard)

    async def _blank(self, page: Page) -> None:
        try:
            await page.goto("about:blank")
        except Exception:
            try:
                await page.close()
            except Exception:
                pass

    async def blank_forbidden_pages(self) -> list[str]:
        """Tabs that ended on a url outside the allowlist (a refused redirect, a data: page, a blocked
        popup's error page) are sent to about:blank before anything is observed; returns the urls they were
        on since the last call."""
        if self._blanking:
            _, late = await asyncio.wait(set(self._blanking), timeout=self.config.action_timeout_s)
            self.timeouts["blank_page"] += bool(late)
        out, self.left_allowlist = self.left_allowlist, []
        for page in list(self.pages):
            url = page.url
            if self.allowlist.allows(url):
                continue
            out.append(url)
            self.blocked.append(url)
            await self._blank(page)
        return list(dict.fromkeys(out))

    async def await_navigation_start(self, timeout_s: float = 10.0) -> bool:
        """After an input that may navigate (a mouse click at a point), learn whether it began a navigation or
        a new tab, from the page rather than the clock: a round trip through the page's event loop runs after
        the click's handlers and default action, which is where a navigation or popup is requested, and its
        request event normally reaches us before the round trip's answer (a later one is still waited out by
        the `settle` that follows). Returns True when one began. `timeout_s`
        is a safety limit on the round trip (a hung page); when it fires it is counted."""
        url, tabs = self.page.url, len(self.pages)
        self._nav_event.clear()
        page = self.page
        try:
            await asyncio.wait_for(page.evaluate("() => new Promise(r => setTimeout(r, 0))"), timeout_s)
        except asyncio.TimeoutError:
            self.timeouts["navigation_start"] += 1
        except Exception:  # the page navigated away during the round trip: a navigation began
            return True
        return self._nav_event.is_set() or bool(self._nav_pending) or page.url != url or len(self.pages) != tabs

    async def settle(self) -> None:
        """Let the page react before observing: `settle_s` on the page's own clock (a page timer, so timers the
        action scheduled for earlier fire first, whatever the machine's load), then wait out any navigation
        it started (on its events). The waits' safety limits are `action_timeout_s`; each that fires is
        counted in `timeouts`."""
        if self.config.settle_s > 0:
            try:
                await asyncio.wait_for(self.page.evaluate("ms => new Promise(r => setTimeout(r, ms))",
                                                          self.config.settle_s * 1000),
                                       self.config.action_timeout_s)
            except asyncio.TimeoutError:
                self.timeouts["settle"] += 1
            except Exception:  # the page navigated (its context went away): wait for the new document below
                pass
        if self._nav_pending:
            try:
                await asyncio.wait_for(self._nav_idle.wait(), self.config.action_timeout_s)
            except asyncio.TimeoutError:
                self.timeouts["navigation"] += 1
        try:
            await self.page.wait_for_load_state("load", timeout=self.config.action_timeout_s * 1000)
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError":
                self.timeouts["load"] += 1

    # ---- the policy's own time ----------------------------------------------------------------------
    def start_step(self, deadline: float) -> None:
        """The env opens a step that must end by loop time `deadline` (step or episode limit, the earlier)."""
        self.deadline = deadline
        self.agent_wait_s = 0.0

    def wait_reserve_s(self) -> float:
        """Time kept free after an agent's wait for the browser's own work (settle, observe)."""
        return min(self.config.step_timeout_s / 3, 2 * self.config.action_timeout_s)

    async def agent_wait(self, seconds: float) -> None:
        """Sleep for the policy (wait/noop actions). Raises AgentTimeout at once when the wait would not
        leave `wait_reserve_s` before the step's deadline: the overrun is the policy's, not the browser's."""
        loop = asyncio.get_running_loop()
        left = self.deadline - loop.time() - self.wait_reserve_s()
        if seconds > left:
            raise AgentTimeout(f"a wait of {seconds:g} s does not fit in the {max(left, 0):.1f} s left to this step")
        t0 = loop.time()
        try:  # a page-bound sleep: it fails at once if the browser dies meanwhile
            await self.page.wait_for_timeout(seconds * 1000)
        finally:
            self.agent_wait_s += loop.time() - t0

    # ---- elements ---------------------------------------------------------------------------------
    async def snapshot(self) -> Snapshot:
        self.last = await mark_page(self.page, self.counter)
        return self.last

    async def locate(self, eid: str) -> Locator:
        """Locator for element `eid` in the frame that reported it; searches all frames if it is new."""
        eid = str(eid).strip()
        if not eid.isdigit():
            raise InvalidAction(f"element id {eid!r} is not a number")
        selector = f'[{ID_ATTR}="{eid}"]'
        frame = self.last.frames.get(eid) if self.last else None
        candidates = [frame] if frame is not None and not frame.is_detached() else []
        candidates += [f for f in self.page.frames if f not in candidates]
        for f in candidates:
            try:
                loc = f.locator(selector)
                if await loc.count() > 0:
                    return loc.first
            except Exception:
                continue
        raise InvalidAction(f"element id [{eid}] not found on the current page")

    async def describe_at(self, x: float, y: float) -> dict[str, Any] | None:
        try:
            return await self.page.evaluate(
                "([x, y]) => window.__jaxwebrl ? window.__jaxwebrl.describeAt(x, y) : null", [x, y]
            )
        except Exception:
            return None

    async def focused_info(self) -> dict[str, Any] | None:
        try:
            return await self.page.evaluate("() => window.__jaxwebrl ? window.__jaxwebrl.focusedInfo() : null")
        except Exception:
            return None

    async def viewport(self) -> tuple[float, float]:
        """The viewport in CSS pixels: what mouse coordinates address and a viewport screenshot spans (at
        any device scale factor; the screenshot then has factor-times as many pixels)."""
        vp = self.page.viewport_size
        if vp:
            return float(vp["width"]), float(vp["height"])
        w, h = await self.page.evaluate("() => [window.innerWidth, window.innerHeight]")  # a remote no-viewport page
        return float(w), float(h)

    async def wheel(self, dx: float, dy: float) -> bool:
        """A mouse-wheel scroll, waited for on the page's own clock; True when the window's scroll position moved.

        `mouse.wheel` returns once the input is sent, not once the page has scrolled. A fixed wait after it
        (100 ms, as here before) came back before the page had even received the wheel under load, and the
        observation showed the old position (a scroll reported as "at a boundary"). So the page says when it
        got the wheel, then 100 ms of its own timers pass, time for a smooth scroll to end. The
        wait's safety limit is `action_timeout_s` (counted in `timeouts["wheel"]`)."""
        before = await self.scroll_position()
        try:
            await self.page.evaluate(WHEEL_ARM_JS)
            armed = True
        except Exception:  # the page is navigating: nothing to wait for on it
            armed = False
        await self.page.mouse.wheel(dx, dy)
        if armed:
            try:
                await asyncio.wait_for(self.page.evaluate(WHEEL_SETTLED_JS), self.config.action_timeout_s)
            except asyncio.TimeoutError:
                self.timeouts["wheel"] += 1
            except Exception:  # the wheel navigated the page away
                pass
        return await self.scroll_position() != before

    async def scroll_position(self) -> tuple[float, float]:
        try:
            x, y = await self.page.evaluate("() => [window.scrollX, window.scrollY]")
            return float(x), float(y)
        except Exception:
            return (0.0, 0.0)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await asyncio.wait_for(self.context.close(), 10.0)
        except Exception:
            pass


async def _cancel(download: Any) -> None:
    try:
        await download.cancel()
    except Exception:
        pass
