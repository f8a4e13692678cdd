"""Viewer settings: how many rollouts per RL iteration it keeps and how large the page may grow."""

from __future__ import annotations

import dataclasses

from jaxwebrl.viewer.episodes import MAX_CHARS
from jaxwebrl.viewer.page import MAX_EPISODES, MAX_SCREENSHOTS


@dataclasses.dataclass(frozen=True)
class ViewerConfig:
    """The run config's `viewer` section. `rollouts_per_iteration`: training episodes kept per RL iteration
    (spread over task and success; 0 = none). `max_episodes` / `max_screenshots`: caps of one page.
    `max_chars`: cap of each text field."""

    rollouts_per_iteration: int = 8
    max_episodes: int = MAX_EPISODES
    max_screenshots: int = MAX_SCREENSHOTS
    max_chars: int = MAX_CHARS

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in ("rollouts_per_iteration", "max_episodes", "max_screenshots"):
            if getattr(self, name) < 0:
                raise ValueError(f"ViewerConfig.{name} must be >= 0 (0 keeps none), got {getattr(self, name)}")
        if self.max_chars < 100:
            raise ValueError(f"ViewerConfig.max_chars must be >= 100 characters, got {self.max_chars}")
