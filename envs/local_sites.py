"""Local-sites suite: starts the shop and wiki servers on loopback and serves the WebArena-style task files
in `envs/tasks/*.json` (placeholders `__SHOP__`, `__WIKI__`, `__PLAYGROUND__` are replaced by the origins).

Each task runs in its own context, so per-visitor server state (cart, orders, comments) starts empty for
every episode; the seed is unused (the sites are deterministic). `latency` (or the environment variable
`JAXWEBRL_SITE_LATENCY`) makes every page wait a heavy-tailed server delay, as live sites do
(envs/sites/latency.py; off by default).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs import evaluators
from envs.sites import SITES
from envs.sites.latency import ENV_VAR, PageLatency
from envs.sites.server import SiteServer
from jaxwebrl.browser.session import BrowserSession
from jaxwebrl.browser.task import EvalResult

TASK_DIR = Path(__file__).with_name("tasks")


def _fill(obj: Any, urls: dict[str, str]) -> Any:
    if isinstance(obj, str):
        for name, url in urls.items():
            obj = obj.replace(f"__{name.upper()}__", url)
        return obj
    if isinstance(obj, list):
        return [_fill(x, urls) for x in obj]
    if isinstance(obj, dict):
        return {k: _fill(v, urls) for k, v in obj.items()}
    return obj


@dataclass
class SiteTask:
    """One task file entry with concrete urls; implements jaxwebrl.browser.task.Task."""

    spec: dict[str, Any]
    origins: tuple[str, ...]
    task_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.task_id = self.spec["task_id"]

    @property
    def intent(self) -> str:
        return self.spec["intent"]

    @property
    def difficulty(self) -> str:
        return self.spec["difficulty"]

    @property
    def has_rule_evaluator(self) -> bool:
        """False for a task file entry without checks (an open-web style task: `reward.source='rule_or_judge'`
        has a judge score it)."""
        return bool((self.spec.get("eval") or {}).get("eval_types"))

    def allowed_origins(self) -> tuple[str, ...]:
        return self.origins

    async def setup(self, session: BrowserSession, seed: int) -> str:
        await session.goto(self.spec["start_url"])
        return self.spec["intent"]

    async def is_done(self, session: BrowserSession) -> bool:
        return False

    async def evaluate(self, session: BrowserSession, answer: str | None) -> EvalResult:
        if not self.has_rule_evaluator:
            return EvalResult(0.0, False, {"rule_evaluator": False})
        reward, checks = await evaluators.evaluate(self.spec["eval"], session, answer)
        return EvalResult(reward, reward >= 1.0, {"checks": checks})


def load_task_specs(directory: Path = TASK_DIR) -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = []
    for f in sorted(directory.glob("*.json")):
        specs.extend(json.loads(f.read_text()))
    ids = [s["task_id"] for s in specs]
    if len(ids) != len(set(ids)):
        raise ValueError(f"duplicate task ids in {directory}")
    return specs


class LocalSitesSuite:
    """`start()` the servers, then `task_ids(split)` / `get_task(task_id)`; `stop()` when done."""

    name = "local_sites"

    def __init__(self, sites: tuple[str, ...] = ("shop", "wiki", "playground"), test_fraction: float = 0.25,
                 tasks: list[str] | None = None, latency: str | PageLatency | None = None) -> None:
        """`tasks`: only these task ids (the run config's `tasks.train`); None = every task file entry.
        `latency`: page delays, a `PageLatency` or its spec (None: `$JAXWEBRL_SITE_LATENCY`, unset = none)."""
        self.site_names = sites
        if latency is None:
            latency = os.environ.get(ENV_VAR)
        self.latency = latency if isinstance(latency, PageLatency) or latency is None else PageLatency.parse(latency)
        self.servers: dict[str, SiteServer] = {}
        self.specs = load_task_specs()
        if tasks:
            known = {s["task_id"] for s in self.specs}
            unknown = sorted(set(tasks) - known)
            if unknown:
                raise ValueError(f"LocalSitesSuite.tasks: unknown task ids {unknown}; see envs/tasks/*.json")
            self.specs = [s for s in self.specs if s["task_id"] in set(tasks)]
        self.test_fraction = test_fraction

    def start(self) -> "LocalSitesSuite":
        if not self.servers:
            self.servers = {n: SiteServer(SITES[n], latency=self.latency).start() for n in self.site_names}
        return self

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()
        self.servers = {}

    def __enter__(self) -> "LocalSitesSuite":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def urls(self) -> dict[str, str]:
        return {n: s.url for n, s in self.servers.items()}

    def task_ids(self, split: str = "all") -> list[str]:
        """`all`, `train`, or `test`: every 4th task of each site (by file order) is test by default."""
        ids = [s["task_id"] for s in self.specs]
        if split == "all":
            return ids
        period = max(2, round(1 / self.test_fraction))
        test = {i for k, i in enumerate(ids) if k % period == period - 1}
        if split == "test":
            return [i for i in ids if i in test]
        if split == "train":
            return [i for i in ids if i not in test]
        raise ValueError(f"unknown split {split!r}; use all, train or test")

    @staticmethod
    def seeds(split: str, n: int, start: int = 0) -> list[int]:
        """Episode seeds (the sites are deterministic, so a seed only names the episode): test from 10000."""
        base = 10000 if split == "test" else 0
        return [base + start + i for i in range(n)]

    def get_task(self, task_id: str) -> SiteTask:
        if not self.servers:
            raise RuntimeError("LocalSitesSuite.start() must be called before get_task()")
        task_id = task_id.removeprefix(f"{self.name}.")  # the run's held-out list may name tasks by suite
        spec = next((s for s in self.specs if s["task_id"] == task_id), None)
        if spec is None:
            raise KeyError(task_id)
        spec = _fill(spec, self.urls)
        return SiteTask(spec, (self.servers[spec["site"]].url,))
