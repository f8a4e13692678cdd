"""Task suites by name, found through Python entry points so the library never imports a suite package.

A suite is any object with `start()`, `stop()`, `task_ids(split)`, `get_task(task_id)`, `seeds(split, n)`
and `name` (see `envs/miniwob.py`). Suites register under the `jaxwebrl.suites` entry-point group
(pyproject: `miniwob = "envs.miniwob:MiniWoBSuite"`); scripted solvers, which make demonstrations for
behaviour cloning, under `jaxwebrl.solvers` (a module with `SOLVABLE` task names and `plan(...)`). A
project adds its own suite by declaring an entry point, or at run time with `register_suite`.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Callable

_SUITES: dict[str, Callable[..., Any]] = {}
_SOLVERS: dict[str, Callable[[], ModuleType]] = {}


def register_suite(name: str, factory: Callable[..., Any]) -> None:
    """Make `factory(**kwargs)` available as suite `name` (an unstarted suite)."""
    _SUITES[name] = factory


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def suite_names() -> tuple[str, ...]:
    return tuple(sorted(set(_SUITES) | set(_entry_points("jaxwebrl.suites"))))


def get_suite(name: str, **kwargs: Any) -> Any:
    """An unstarted suite: `get_suite("miniwob", tasks=["click-button"]).start()`."""
    if name in _SUITES:
        return _SUITES[name](**kwargs)
    eps = _entry_points("jaxwebrl.suites")
    if name not in eps:
        raise ValueError(f"unknown task suite {name!r}; registered: {suite_names()} (declare a `jaxwebrl.suites` "
                         "entry point or call jaxwebrl.rollout.suites.register_suite)")
    return eps[name].load()(**kwargs)


def get_solvers(suite: str) -> ModuleType | None:
    """The suite's scripted solvers (`SOLVABLE`, `plan`), or None when it has none."""
    if suite in _SOLVERS:
        return _SOLVERS[suite]()
    eps = _entry_points("jaxwebrl.solvers")
    return eps[suite].load() if suite in eps else None


def make_suite(run: Any) -> Any:
    """The run's task suite, started (`tasks.train` limits it to those tasks, `tasks.suite_mode` picks a variant)."""
    return get_suite(run.tasks.suite, **run.tasks.suite_kwargs()).start()


def split_tasks(suite: Any, run: Any) -> tuple[list[Any], list[int], list[Any], list[int]]:
    """(train tasks, train seeds, eval tasks, eval seeds): held-out seeds always; held-out tasks if named."""
    train_ids = suite.task_ids("all") if run.tasks.train else suite.task_ids("train")
    eval_ids = run.tasks.eval_names or train_ids
    train = [suite.get_task(t) for t in train_ids]
    held_out = [suite.get_task(t if "." in t else f"{suite.name}.{t}") for t in eval_ids]
    return (train, suite.seeds("train", run.tasks.train_seeds), held_out, suite.seeds("test", run.tasks.eval_seeds))
