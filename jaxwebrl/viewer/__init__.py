"""Static HTML trajectory viewer: see what the agent did, episode by episode and step by step.

    from jaxwebrl.viewer import episodes_from_trajectories, write_viewer
    eps = episodes_from_trajectories(report.trajectories, policy="RL")
    write_viewer(workdir / "viewer.html", eps)
"""

from jaxwebrl.viewer.capture import TURN_INFO_KEY, element_hit, marked_thumbnail, turn_info
from jaxwebrl.viewer.episodes import (
    MAX_CHARS,
    ViewerEpisode,
    ViewerLog,
    episode_from_trajectory,
    episodes_from_trajectories,
    sample_trajectories,
    select_episodes,
)
from jaxwebrl.viewer.page import MAX_EPISODES, MAX_SCREENSHOTS, render_viewer, write_viewer

__all__ = [
    "MAX_CHARS", "MAX_EPISODES", "MAX_SCREENSHOTS", "TURN_INFO_KEY", "ViewerEpisode", "ViewerLog", "element_hit",
    "episode_from_trajectory", "episodes_from_trajectories", "marked_thumbnail", "render_viewer",
    "sample_trajectories", "select_episodes", "turn_info", "write_viewer",
]
