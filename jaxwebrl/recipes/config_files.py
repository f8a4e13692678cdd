"""Config files that build on another config file beside them (an overlay, not a copy): e.g.
configs/grpo_local_judge.py is configs/grpo_local.py with the reward from a judge."""

from __future__ import annotations

import importlib.util
import os
from types import ModuleType
from typing import Any


def sibling_module(here: str, name: str) -> ModuleType:
    """The config module `name` (e.g. 'grpo_local') in the folder of the file `here` (a config's __file__)."""
    path = os.path.join(os.path.dirname(os.path.abspath(here)), f"{name}.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config {name!r} not found at {path}: the overlay needs it beside {here}")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sibling_config(here: str, name: str) -> Any:
    """`get_config()` of the config file `name` beside `here`."""
    return sibling_module(here, name).get_config()
