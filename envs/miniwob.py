"""MiniWoB++ suite from the `miniwob` PyPI package (its HTML/JS only; no Selenium).

A ThreadingHTTPServer on 127.0.0.1 serves `<site-packages>/miniwob/html`. An episode opens
`/miniwob/<task>.html`, seeds `Math.seedrandom(seed)`, disables the episode timer (EPISODE_MAX_TIME set to
~11 days) and calls `core.startEpisodeReal()`. The page itself ends the episode (`WOB_DONE_GLOBAL`); the
reward is `WOB_RAW_REWARD_GLOBAL` and success is `raw reward >= threshold` (some tasks give partial credit).

Two modes (`MiniWoBSuite(mode=...)`), both on the same HTML:

- `jaxwebrl` (default): `Math.seedrandom(String(seed))`, the goal stays on the page (`#query`), the
  viewport is whatever EnvConfig.viewport says (1280x720 by default), success is `raw reward >= threshold`
  (full credit), and `EvalResult.reward` is the raw reward (partial credit stays visible to the learner).
- `browsergym`: what browsergym-miniwob 0.14.x does, so numbers are comparable with BrowserGym/AgentLab
  results: the page is seeded with `N = numpy.random.RandomState(seed).randint(0, 10**6)` passed to
  `Math.seedrandom` as a number (seedrandom hashes a number and its string differently, so the same seed
  gives another episode than in `jaxwebrl` mode); the goal text, reward panel, click canvas and start cover
  are taken out of the page (the goal is given only as the utterance); the page viewport is 332x214;
  the episode timer is 1,000,000 ms; success is any positive raw reward and `EvalResult.reward` is
  1.0 or 0.0 (BrowserGym's reward). BrowserGym's slow_mo (100 ms per Playwright call) and its 1.5
  screenshot zoom are timing/rendering of its own observation and are not reproduced.
  tests/test_miniwob_browsergym.py checks utterance, page text and reward against browsergym-miniwob.

Splits: by task list (a fixed hash of the task name puts ~20% of tasks in `test`) and by seed (seeds
< 1_000_000 are train, >= 1_000_000 test), so a test episode differs from training in task or seed.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from envs.http_logging import LoggingHTTPServer, LoggingRequestHandlerMixin
from jaxwebrl.browser.session import BrowserSession
from jaxwebrl.browser.task import EvalResult

TEST_SEED_START = 1_000_000
EPISODE_MAX_MS = 1_000_000_000  # setTimeout overflows above 2**31-1 ms
MODES = ("jaxwebrl", "browsergym")
BROWSERGYM_VIEWPORT = (332, 214)  # browsergym-miniwob's AbstractMiniwobTask.viewport
BROWSERGYM_EPISODE_MAX_MS = 1_000_000  # its default episode_max_time


def browsergym_seed(seed: int) -> int:
    """The number browsergym-miniwob passes to `Math.seedrandom` for episode seed `seed`."""
    import numpy as np

    return int(np.random.RandomState(seed).randint(0, 1_000_000))


def html_root() -> Path:
    import miniwob  # the package's Python side needs Selenium only when its gym env is used

    return Path(miniwob.__file__).parent / "html"


def all_task_names() -> list[str]:
    return sorted(p.stem for p in (html_root() / "miniwob").glob("*.html"))


def _in_test(name: str) -> bool:
    return int(hashlib.sha256(name.encode()).hexdigest(), 16) % 5 == 0


class _FileHandler(LoggingRequestHandlerMixin, http.server.SimpleHTTPRequestHandler):
    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=3600")
        super().end_headers()


class MiniWoBServer:
    """Static server for the MiniWoB++ html directory (or another `root`) on a free loopback port."""

    def __init__(self, port: int = 0, root: Path | None = None) -> None:
        handler = functools.partial(_FileHandler, directory=str(root or html_root()))
        self.httpd = LoggingHTTPServer(("127.0.0.1", port), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> "MiniWoBServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_START_JS = """(args) => {
  const [seed, maxMs] = args;
  Math.seedrandom(String(seed));
  core.EPISODE_MAX_TIME = maxMs;
  core.startEpisodeReal();
  // The reward/timer panel is bookkeeping, not part of the task: hidden, it stays out of observations.
  const panel = document.getElementById('reward-display');
  if (panel) panel.style.display = 'none';
  return true;
}"""


# BrowserGym mode: the human display (goal text in #query, reward panel, click canvas, start cover) is out
# of the DOM while the agent acts. core's own functions write into those elements, so each of the three
# entry points that touch them (utterance, episode start, episode end) puts them back for its call only.
_BROWSERGYM_START_JS = """(args) => {
  const [n, maxMs] = args;
  const hudIds = ['reward-display', 'click-canvas', 'sync-task-cover'];
  const hud = {};
  let goalHtml = '';
  const detach = () => {
    core.clearTimer();
    document.body.removeEventListener('click', core.canvasDrawClick);
    const query = document.getElementById('query');
    goalHtml = query.innerHTML;
    query.innerHTML = '';
    for (const id of hudIds) { hud[id] = document.getElementById(id); hud[id].remove(); }
  };
  const attach = () => {
    document.getElementById('query').innerHTML = goalHtml;
    for (const id of hudIds) document.body.appendChild(hud[id]);
    core.createDisplay();
  };
  const withDisplay = (fn) => function (...a) { attach(); const out = fn.apply(this, a); detach(); return out; };
  core.getUtterance = withDisplay(core.getUtterance);
  core.startEpisodeReal = withDisplay(core.startEpisodeReal);
  core.endEpisode = withDisplay(core.endEpisode);
  detach();
  Math.seedrandom(n);
  core.EPISODE_MAX_TIME = maxMs;
  core.startEpisodeReal();
  return true;
}"""


# WebGym sets a task's difficulty by how much it asks (facts to establish); here by the actions a solution
# takes: easy = one action, medium = two or three, hard = more. Tasks not listed are "medium".
DIFFICULTY = {
    **dict.fromkeys(("click-button", "click-link", "click-test", "click-test-2", "focus-text", "focus-text-2",
                     "click-dialog", "click-dialog-2", "click-tab", "click-color", "click-shape"), "easy"),
    **dict.fromkeys(("click-checkboxes", "click-option", "enter-text", "choose-list", "click-widget",
                     "click-tab-2", "enter-password", "click-button-sequence"), "medium"),
    **dict.fromkeys(("login-user", "book-flight", "email-inbox", "search-engine", "click-checkboxes-large",
                     "enter-date", "form-sequence"), "hard"),
}


@dataclass
class MiniWoBTask:
    """One MiniWoB++ task; implements jaxwebrl.browser.task.Task."""

    name: str
    base_url: str
    threshold: float = 1.0
    mode: str = "jaxwebrl"
    reuse_context: ClassVar[bool] = True  # setup always loads the page afresh; no cookies or storage matter

    @property
    def task_id(self) -> str:
        return f"miniwob.{self.name}"

    @property
    def difficulty(self) -> str:
        """easy / medium / hard (see DIFFICULTY): WebGym's difficulty ratio and per-difficulty horizons."""
        return DIFFICULTY.get(self.name, "medium")

    def allowed_origins(self) -> tuple[str, ...]:
        return (self.base_url,)

    async def setup(self, session: BrowserSession, seed: int) -> str:
        page = session.page
        await session.goto(f"{self.base_url}/miniwob/{self.name}.html")
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null")
        if self.mode == "browsergym":
            vw, vh = BROWSERGYM_VIEWPORT
            await page.set_viewport_size({"width": vw, "height": vh})
            await page.evaluate(_BROWSERGYM_START_JS, [browsergym_seed(seed), BROWSERGYM_EPISODE_MAX_MS])
        else:
            await page.evaluate(_START_JS, [seed, EPISODE_MAX_MS])
        await page.wait_for_function("() => WOB_TASK_READY === true")
        return str(await page.evaluate("() => core.getUtterance()"))

    async def is_done(self, session: BrowserSession) -> bool:
        try:
            return bool(await session.page.evaluate("() => typeof WOB_DONE_GLOBAL !== 'undefined' && WOB_DONE_GLOBAL"))
        except Exception:
            return False

    async def evaluate(self, session: BrowserSession, answer: str | None) -> EvalResult:
        raw, reward, reason, done = await session.page.evaluate(
            "() => [WOB_RAW_REWARD_GLOBAL, WOB_REWARD_GLOBAL, WOB_REWARD_REASON, WOB_DONE_GLOBAL]")
        raw = float(raw) if done else 0.0
        # `timed_out`: the page's own episode timer ended it (EPISODE_MAX_TIME; BrowserGym mode's 1,000 s can be
        # reached on a slow machine): the env counts it among the run's timeouts
        info = {"raw_reward": raw, "reward": float(reward), "reason": reason, "done": bool(done), "mode": self.mode,
                "timed_out": bool(done) and reason == "timed out"}
        if self.mode == "browsergym":
            success = bool(done) and raw > 0  # browsergym-miniwob: reward = float(RAW_REWARD_GLOBAL > 0)
            return EvalResult(float(success), success, info)
        return EvalResult(raw, bool(done) and raw >= self.threshold, info)


class MiniWoBSuite:
    """`start()` the server, `task_ids(split)`, `get_task(task_id)`, `seeds(split, n)`, `stop()`.

    `mode` is `jaxwebrl` (default) or `browsergym` (browsergym-miniwob's seeding, page, viewport and
    success rule; see the module docstring). `threshold` applies to `jaxwebrl` mode only."""

    name = "miniwob"

    def __init__(self, tasks: list[str] | None = None, threshold: float = 1.0, mode: str = "jaxwebrl") -> None:
        self.tasks = tasks or all_task_names()
        unknown = set(self.tasks) - set(all_task_names())
        if unknown:
            raise ValueError(f"MiniWoBSuite.tasks: unknown MiniWoB++ tasks {sorted(unknown)}")
        if mode not in MODES:
            raise ValueError(f"MiniWoBSuite.mode: unknown mode {mode!r}; use one of {MODES} "
                             "('browsergym' scores episodes the way browsergym-miniwob does)")
        self.threshold = threshold
        self.mode = mode
        self.server: MiniWoBServer | None = None

    def start(self) -> "MiniWoBSuite":
        if self.server is None:
            self.server = MiniWoBServer().start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def __enter__(self) -> "MiniWoBSuite":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def task_ids(self, split: str = "all") -> list[str]:
        if split == "all":
            names = self.tasks
        elif split == "train":
            names = [t for t in self.tasks if not _in_test(t)]
        elif split == "test":
            names = [t for t in self.tasks if _in_test(t)]
        else:
            raise ValueError(f"unknown split {split!r}; use all, train or test")
        return [f"miniwob.{t}" for t in names]

    @staticmethod
    def seeds(split: str, n: int, start: int = 0) -> list[int]:
        base = TEST_SEED_START if split == "test" else 0
        return [base + start + i for i in range(n)]

    def get_task(self, task_id: str) -> MiniWoBTask:
        if self.server is None:
            raise RuntimeError("MiniWoBSuite.start() must be called before get_task()")
        name = task_id.removeprefix("miniwob.")
        if name not in self.tasks:
            raise KeyError(task_id)
        return MiniWoBTask(name, self.server.url, self.threshold, self.mode)

    @property
    def viewport(self) -> tuple[int, int] | None:
        """The viewport this mode fixes (browsergym: 332x214), or None when EnvConfig.viewport decides."""
        return BROWSERGYM_VIEWPORT if self.mode == "browsergym" else None
