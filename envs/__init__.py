"""Task suites for jaxwebrl. `get_suite("miniwob" | "local_sites", **kwargs)` returns an unstarted suite:

    suite = get_suite("miniwob", tasks=["click-button"]).start()
    task = suite.get_task(suite.task_ids("train")[0])      # a jaxwebrl.browser.task.Task
    async with pool.episode(task, seed=0) as (env, obs): ...
    suite.stop()

MiniWoB++ takes `mode="jaxwebrl"` (default) or `mode="browsergym"` (browsergym-miniwob's seeding, page,
viewport and success rule, for numbers comparable with BrowserGym/AgentLab); see envs/miniwob.py.
"""

from __future__ import annotations

from typing import Any


def get_suite(name: str, **kwargs: Any) -> Any:
    if name == "miniwob":
        from envs.miniwob import MiniWoBSuite

        return MiniWoBSuite(**kwargs)
    if name == "local_sites":
        from envs.local_sites import LocalSitesSuite

        return LocalSitesSuite(**kwargs)
    raise ValueError(f"unknown suite {name!r}; choose miniwob or local_sites")


SUITES = ("miniwob", "local_sites")
