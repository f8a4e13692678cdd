"""Many episodes at once: groups, no barriers, off-policy limit, task sampling, curricula and replay."""

from jaxwebrl.rollout.collector import CollectStats, Collector, Group, RolloutConfig
from jaxwebrl.rollout.tasks import HorizonSchedule, ReplayBuffer, TaskSampler, replay_draw_count

__all__ = ["CollectStats", "Collector", "Group", "RolloutConfig", "HorizonSchedule", "ReplayBuffer", "TaskSampler", "replay_draw_count"]
