"""MiniWoB++ suite from the `miniwob` PyPI package (its HTML/JS only; no Selenium).

A ThreadingHTTPServer on 127.0.0.1 serves `<site-packages>/miniwob/html`. An episode opens
`/miniwob/<task>.html`, seeds `Math.seedrandom(seed)`, disables the episode timer (EPISODE_MAX_TIME set to
~11 days) and calls `core.startEpisodeReal()`. The page itself ends the episode (`WOB_DONE_GLOBAL`); the
reward is `WOB_RAW_REWARD_GLOBAL` and success is `raw reward >= threshold` (some tasks give partial credit).

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
    """Static server for the MiniWoB++ html directory on a free loopback port."""

    def __init__(self, port: int = 0) -> None:
        handler = functools.partial(_FileHandler, directory=str(html_root()))
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


@dataclass
class MiniWoBTask:
    """One MiniWoB++ task; implements jaxwebrl.browser.task.Task."""

    name: str
    base_url: str
    threshold: float = 1.0
    reuse_context: ClassVar[bool] = True  # setup always loads the page afresh; no cookies or storage matter

    @property
    def task_id(self) -> str:
        return f"miniwob.{self.name}"

    def allowed_origins(self) -> tuple[str, ...]:
        return (self.base_url,)

    async def setup(self, session: BrowserSession, seed: int) -> str:
        page = session.page
        await session.goto(f"{self.base_url}/miniwob/{self.name}.html")
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null")
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
        return EvalResult(raw, bool(done) and raw >= self.threshold,
                          {"raw_reward": raw, "reward": float(reward), "reason": reason, "done": bool(done)})


class MiniWoBSuite:
    """`start()` the server, `task_ids(split)`, `get_task(task_id)`, `seeds(split, n)`, `stop()`."""

    name = "miniwob"

    def __init__(self, tasks: list[str] | None = None, threshold: float = 1.0) -> None:
        self.tasks = tasks or all_task_names()
        unknown = set(self.tasks) - set(all_task_names())
        if unknown:
            raise ValueError(f"MiniWoBSuite.tasks: unknown MiniWoB++ tasks {sorted(unknown)}")
        self.threshold = threshold
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
        return MiniWoBTask(name, self.server.url, self.threshold)
