"""The viewer page: one self-contained HTML file (inline JS and CSS, images as data URIs; no server, no CDN).

Safety: the episodes travel as JSON inside `<script type="application/json">` with `<`, `>`, `&` escaped,
so no page or model text can close the element; the script puts all text in the DOM with `textContent`;
a Content-Security-Policy allows only this page's own script and style (by hash) and data: images, so even
markup that got in could not run script or load anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
from pathlib import Path
from typing import Any, Sequence

from jaxwebrl.viewer.episodes import THUMB_WIDTH, ViewerEpisode, select_episodes, thumbnail

_HERE = Path(__file__).parent
MAX_EPISODES = 500
MAX_SCREENSHOTS = 200
_IMAGE_PREFIXES = ("data:image/jpeg;base64,", "data:image/png;base64,")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src '{script_hash}'; style-src '{style_hash}'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<header><h1 id="title"></h1>
<div class="summary"><span id="count">0</span> of <span id="total">0</span> episodes shown. <span id="note"></span></div>
</header>
<div id="filters">
<label>task <select id="f-task"></select></label>
<label>policy <select id="f-policy"></select></label>
<label>outcome <select id="f-success"></select></label>
<label>termination <select id="f-termination"></select></label>
<label>iteration <select id="f-iteration"></select></label>
</div>
<main>
<div id="list"><table>
<thead><tr><th>policy</th><th>iter</th><th>task</th><th>seed</th><th>ok</th><th>reward</th><th>termination</th><th>steps</th></tr></thead>
<tbody id="episodes"></tbody></table></div>
<div id="detail"><div id="episode-head"><div class="empty">Click an episode (keys: up/down for episodes, left/right for steps).</div></div><div id="steps"></div><div id="step-detail"></div></div>
</main>
<script type="application/json" id="viewer-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def _csp_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _json_for_html(payload: Any) -> str:
    """JSON that cannot end the <script> element it sits in (and stays valid JSON)."""
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _finite(x: Any) -> Any:
    """NaN/inf are not JSON: show them as text."""
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def render_viewer(
    episodes: Sequence[ViewerEpisode],
    *,
    title: str = "jaxwebrl trajectories",
    max_episodes: int = MAX_EPISODES,
    max_screenshots: int = MAX_SCREENSHOTS,
    seed: int = 0,
) -> str:
    """The page's HTML; see `write_viewer`."""
    for e in episodes:
        if not isinstance(e, ViewerEpisode):
            raise TypeError(f"write_viewer takes ViewerEpisode objects, got {type(e).__name__}: build them with "
                            "jaxwebrl.viewer.episodes_from_trajectories(trajectories, policy=..., iteration=...)")
    if max_episodes < 0 or max_screenshots < 0:
        raise ValueError("write_viewer: max_episodes and max_screenshots must be >= 0")
    shown = select_episodes(list(episodes), max_episodes, seed)
    shots_left, shots_dropped, rows = max_screenshots, 0, []
    for e in shown:
        d = e.to_dict()
        for step in d["steps"]:
            shot = step.get("screenshot")
            if shot is None:
                continue
            if isinstance(shot, str) and shot.startswith("data:image/png;base64,") and shots_left > 0:
                shot = thumbnail(shot, THUMB_WIDTH)
            if not isinstance(shot, str) or not shot.startswith(_IMAGE_PREFIXES) or shots_left <= 0:
                step["screenshot"], shots_dropped = None, shots_dropped + 1
            else:
                step["screenshot"], shots_left = shot, shots_left - 1
        rows.append(_finite(d))
    payload = {"title": title, "episodes": rows, "left_out": len(episodes) - len(shown),
               "max_episodes": max_episodes, "screenshots_left_out": shots_dropped}
    script = (_HERE / "viewer.js").read_text()
    style = (_HERE / "viewer.css").read_text()
    return _PAGE.format(script_hash=_csp_hash(script), style_hash=_csp_hash(style), title=html.escape(title),
                        style=style, data=_json_for_html(payload), script=script)


def write_viewer(
    path: str | os.PathLike[str],
    episodes: Sequence[ViewerEpisode],
    *,
    title: str = "jaxwebrl trajectories",
    max_episodes: int = MAX_EPISODES,
    max_screenshots: int = MAX_SCREENSHOTS,
    seed: int = 0,
) -> Path:
    """Write the viewer for `episodes` to `path` (one HTML file). At most `max_episodes` episodes (spread
    over policy, iteration, task and success) and `max_screenshots` screenshots (shrunk to `THUMB_WIDTH`
    px, ~50-100 ms each) are kept; the page says how many were left out. Zero episodes give a page that
    says so."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render_viewer(episodes, title=title, max_episodes=max_episodes, max_screenshots=max_screenshots, seed=seed)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
