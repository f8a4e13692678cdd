"""What exploration stores: each accepted (instruction, prefix) pair as an `ExplorationDemo`, appended to
`demonstrations.jsonl` the moment it is accepted (dropped prefixes to `dropped.jsonl`), and read back for
relabeling."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class ExploredStep:
    observation: str  # the page the action was taken on (as the agent saw it, without the summaries)
    response: str  # the explorer's full response
    action: str  # the executed action(s)
    feedback: str | None  # the env's message about the previous action, shown with `observation`


@dataclasses.dataclass
class ExplorationDemo:
    """An accepted (instruction, prefix) pair, before relabeling."""

    task_id: str
    seed: int
    episode_id: str
    persona: str
    instruction: str
    prune_step: int  # t: the prefix is steps[:t]
    orm_score: float
    summaries: list[str]
    steps: list[ExploredStep]
    final_observation: str  # the page after step t
    env_goal: str = ""  # the task's own utterance (MiniWoB++), kept to measure label accuracy

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExplorationDemo":
        d = dict(d)
        d["steps"] = [ExploredStep(**s) for s in d["steps"]]
        return cls(**d)


def read_demos(path: str | Path) -> list[ExplorationDemo]:
    with open(path) as f:
        return [ExplorationDemo.from_dict(json.loads(line)) for line in f if line.strip()]


class DemoStore:
    """Appends each accepted demonstration (and each dropped prefix) to disk the moment it is decided, so a
    later failure loses nothing already stored."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.demos_path = self.dir / "demonstrations.jsonl"
        self.dropped_path = self.dir / "dropped.jsonl"
        self.demos: list[ExplorationDemo] = []
        self.dropped: list[dict[str, Any]] = []

    def add(self, demo: ExplorationDemo) -> None:
        with open(self.demos_path, "a") as f:
            f.write(demo.to_json() + "\n")
        self.demos.append(demo)

    def drop(self, record: dict[str, Any]) -> None:
        with open(self.dropped_path, "a") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.dropped.append(record)
