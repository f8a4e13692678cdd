"""The errors and small checks every config section uses.

Each package owns its config section (a frozen dataclass next to the code it configures) and checks its
own fields in `__post_init__` with these helpers. A section names only its own fields (`FieldError("lr",
...)`); `jaxwebrl.config`, which composes the sections, adds the section's path so the user reads
`config.optim.lr: ...; fix`. This module imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field and the fix (DESIGN principle 8)."""


class FieldError(ConfigError):
    """A bad value of one field of a section; `jaxwebrl.config` prefixes the section's path."""

    def __init__(self, field: str, problem: str, fix: str):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}; {fix}")

    def at(self, prefix: str) -> ConfigError:
        """The same error as seen from the whole config (`prefix` = e.g. 'config.optim.')."""
        return ConfigError(f"{prefix}{self.field}: {self.problem}; {self.fix}")


def one_of(field: str, value: Any, options: Collection[str]) -> None:
    """`value` must be one of `options` (a registry's keys, never a retyped list)."""
    if value not in options:
        raise FieldError(field, f"{value!r} is not allowed", f"use one of {tuple(options)}")


def at_least(field: str, value: float, low: float, fix: str = "") -> None:
    if value < low:
        raise FieldError(field, f"{value} must be >= {low}", fix or f"set it to {low} or more")


def positive(field: str, value: float, fix: str = "") -> None:
    if not value > 0:
        raise FieldError(field, f"{value} must be > 0", fix or "set a positive value")


def comma_list(spec: str) -> list[str]:
    """A config list written as "a, b,c" -> ['a', 'b', 'c'] (spaces and empty entries dropped)."""
    return [s.strip() for s in str(spec).split(",") if s.strip()]


def pairs(spec: str, cast: Callable[[str], Any] = float) -> dict[str, Any]:
    """A config mapping written as 'easy:2,medium:5' -> {'easy': 2.0, 'medium': 5.0}."""
    out = {}
    for item in comma_list(spec):
        key, sep, value = item.partition(":")
        if not sep:
            raise ValueError(f"{item!r} is not 'name:value'")
        out[key.strip()] = cast(value.strip())
    return out


def checked_pairs(field: str, spec: str, cast: Callable[[str], Any] = float) -> dict[str, Any]:
    """`pairs` with a FieldError naming the field when the spec does not parse."""
    try:
        return pairs(spec, cast)
    except ValueError as e:
        raise FieldError(field, f"{spec!r} does not parse ({e})", "write it as 'name:value,name:value'") from None


def with_changes(config: Any, **changes: Any) -> Any:
    """A copy of a frozen config with dotted fields changed, e.g. `with_changes(run, **{"loss.kind": "sft"})`;
    every changed section is built again, so its checks run on the new values."""
    nested: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for dotted, value in changes.items():
        head, _, rest = dotted.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            top[head] = value
    for head, sub in nested.items():
        top[head] = with_changes(getattr(config, head), **sub)
    return dataclasses.replace(config, **top)
