"""Static HTML trajectory viewer: see what the agent did, episode by episode and step by step.

    from jaxwebrl.viewer import episodes_from_trajectories, write_viewer
    log = ViewerLog(workdir / "viewer_episodes.jsonl")       # the online loop, once per iteration:
    log.add_trajectories(trajectories, policy="grpo rollout", iteration=it, k=8)
    write_viewer(workdir / "viewer.html", log.read() + episodes_from_reports({"BC": bc_report, "RL": rl_report}))
"""

from jaxwebrl.viewer.config import ViewerConfig
from jaxwebrl.viewer.capture import TURN_INFO_KEY, element_hit, turn_info
from jaxwebrl.viewer.episodes import (
    MAX_CHARS,
    ViewerEpisode,
    ViewerLog,
    episode_from_trajectory,
    episodes_from_reports,
    episodes_from_trajectories,
    sample_trajectories,
    select_episodes,
    thumbnail,
)
from jaxwebrl.viewer.page import MAX_EPISODES, MAX_SCREENSHOTS, render_viewer, write_viewer

__all__ = [
    "MAX_CHARS", "MAX_EPISODES", "MAX_SCREENSHOTS", "TURN_INFO_KEY", "ViewerConfig", "ViewerEpisode", "ViewerLog", "element_hit",
    "episode_from_trajectory", "episodes_from_reports", "episodes_from_trajectories", "render_viewer",
    "sample_trajectories", "select_episodes", "thumbnail", "turn_info", "write_viewer",
]
