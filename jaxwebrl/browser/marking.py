"""Element marking across frames: run marking.js in every frame of a page and merge the results.

Ids are numbers drawn from one counter per browser session (`IdCounter`), so they are unique across
frames and tabs and an element keeps its id between observations. The merged `Snapshot` lists elements in
document order with iframe contents inlined under their iframe element, bounding boxes in main-viewport
CSS pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Frame, Page

MARK_JS = (Path(__file__).with_name("marking.js")).read_text()
ID_ATTR = "data-jwid"
_CALL = "([n, o]) => window.__jaxwebrl ? window.__jaxwebrl.mark(n, o) : null"


@dataclass
class IdCounter:
    """Next element id for a session; shared by all its frames and tabs."""

    next: int = 1


@dataclass
class Element:
    """One marked element as reported by marking.js (bbox = x, y, w, h in main-viewport pixels)."""

    id: str
    tag: str
    role: str
    name: str
    text: str
    depth: int
    visible: bool
    interactive: bool
    in_viewport: bool
    bbox: tuple[float, float, float, float]
    props: dict[str, Any]
    attrs: dict[str, str]
    is_frame: bool

    @property
    def center(self) -> tuple[float, float]:
        x, y, w, h = self.bbox
        return x + w / 2, y + h / 2

    def normalised_centre(self, viewport: tuple[float, float]) -> tuple[int, int]:
        """The box centre on OpenWebRL's 0..1000 grid of the viewport (what its coordinate tools take)."""
        cx, cy = self.center
        w, h = viewport
        return (min(1000, max(0, round(cx / w * 1000))), min(1000, max(0, round(cy / h * 1000))))


@dataclass
class Snapshot:
    """The marked state of one page: elements in document order plus page geometry."""

    elements: list[Element]
    url: str
    title: str
    focused: str | None
    scroll: tuple[float, float]
    size: tuple[float, float]
    viewport: tuple[float, float]
    frames: dict[str, Frame] = field(default_factory=dict)

    def by_id(self, eid: str) -> Element | None:
        for el in self.elements:
            if el.id == eid:
                return el
        return None


async def _mark_one(frame: Frame, counter: IdCounter) -> dict[str, Any] | None:
    res = await frame.evaluate(_CALL, [counter.next, {}])
    if res is None:  # the init script did not run in this frame (e.g. about:blank): inject now
        await frame.evaluate(MARK_JS)
        res = await frame.evaluate(_CALL, [counter.next, {}])
    if res is not None:
        counter.next = int(res["next_id"])
    return res


async def _walk(
    frame: Frame,
    counter: IdCounter,
    depth: int,
    offset: tuple[float, float],
    out: list[Element],
    frames: dict[str, Frame],
) -> dict[str, Any] | None:
    try:
        res = await _mark_one(frame, counter)
    except Exception:  # detached or navigating frame: leave it out of this snapshot
        return None
    if res is None:
        return None
    children: dict[str, tuple[Frame, tuple[float, float]]] = {}
    for child in frame.child_frames:
        try:
            handle = await child.frame_element()
            fid = await handle.get_attribute(ID_ATTR)
            box = await handle.bounding_box()
        except Exception:
            continue
        if fid is not None:
            children[fid] = (child, (box["x"], box["y"]) if box else offset)
    for raw in res["nodes"]:
        x, y, w, h = raw["bbox"]
        el = Element(
            id=raw["id"], tag=raw["tag"], role=raw["role"], name=raw["name"], text=raw["text"],
            depth=raw["depth"] + depth, visible=raw["visible"], interactive=raw["interactive"],
            in_viewport=raw["in_viewport"], bbox=(x + offset[0], y + offset[1], w, h),
            props=raw["props"], attrs=raw["attrs"], is_frame=raw["is_frame"],
        )
        out.append(el)
        frames[el.id] = frame
        if el.is_frame and el.id in children:
            child, child_off = children[el.id]
            await _walk(child, counter, el.depth + 1, child_off, out, frames)
    return res


async def mark_page(page: Page, counter: IdCounter) -> Snapshot:
    """Mark every frame of `page` (parents before children) and return the merged snapshot."""
    out: list[Element] = []
    frames: dict[str, Frame] = {}
    res = await _walk(page.main_frame, counter, 0, (0.0, 0.0), out, frames)
    if res is None:
        vp = page.viewport_size or {"width": 0, "height": 0}
        return Snapshot([], page.url, "", None, (0, 0), (0, 0), (vp["width"], vp["height"]), frames)
    return Snapshot(
        elements=out, url=res["url"], title=res["title"], focused=res["focused"],
        scroll=tuple(res["scroll"]), size=tuple(res["size"]), viewport=tuple(res["viewport"]), frames=frames,
    )
