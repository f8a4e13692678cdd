"""Viewer episodes: a `Trajectory` plus its labels (policy, iteration), flattened to what the page shows.

Size bounds (a run with thousands of episodes must still give a page a browser opens quickly):
- each text field (observation, prompt, model output, feedback) is cut at `max_chars` characters, with a
  note saying how much was cut;
- the decoded full prompt is only kept when a tokenizer is passed (`tokenizer=`), cut the same way;
- `sample_trajectories` keeps `k` episodes of a training iteration, spread over (task, success) so both
  solved and failed episodes of every task show up;
- `write_viewer` keeps at most `max_episodes` (spread the same way over policy, iteration, task and success)
  and at most `max_screenshots` screenshots; the page says how many were left out.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import io
import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.viewer.capture import TURN_INFO_KEY, png_size

MAX_CHARS = 20_000
THUMB_WIDTH = 640
_PNG_URI = "data:image/png;base64,"


def clip(text: str | None, max_chars: int = MAX_CHARS) -> str:
    """`text` cut at `max_chars`, saying how much was cut."""
    text = text or ""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [{len(text) - max_chars} more characters cut by the viewer]"


def thumbnail(uri: str | None, width: int = THUMB_WIDTH) -> str | None:
    """A PNG data URI shrunk by a whole factor to at most `width` px wide (PNG again: web pages are mostly
    flat colour and text, where PNG beats JPEG). None for anything that is not a readable PNG data URI."""
    if not isinstance(uri, str) or not uri.startswith(_PNG_URI):
        return None
    from PIL import Image

    try:
        png = base64.b64decode(uri[len(_PNG_URI):], validate=True)
        size = png_size(png)
        if size is not None and (width <= 0 or size[0] <= width):
            return uri  # small enough already: no decoding
        img = Image.open(io.BytesIO(png))
        img.load()
    except Exception:
        return None
    factor = -(-img.width // width)
    if factor <= 1:
        return uri
    buf = io.BytesIO()
    img.reduce(factor).save(buf, format="PNG")
    return _PNG_URI + base64.b64encode(buf.getvalue()).decode("ascii")


@dataclasses.dataclass
class ViewerEpisode:
    """One episode as the viewer shows it; `steps` are dicts (see `episode_from_trajectory`)."""

    key: str
    task: str
    policy: str
    iteration: int | None
    seed: Any
    success: bool
    reward: float
    termination: str
    goal: str = ""
    error: str = ""
    advantage: float | None = None
    policy_version: int = 0
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ViewerEpisode":
        return cls(**d)


def _logprob_stats(logprobs: Sequence[float] | None) -> tuple[float | None, float | None]:
    if not logprobs:
        return None, None
    total = float(sum(logprobs))
    return total, total / len(logprobs)


def episode_from_trajectory(
    traj: Trajectory,
    policy: str,
    iteration: int | None = None,
    *,
    tokenizer: Any = None,
    max_chars: int = MAX_CHARS,
    thumb_width: int = 0,
) -> ViewerEpisode:
    """Flatten one trajectory. Per step: the observation as the prompt showed it (the agent loop's
    `turn_info`; the raw observation text for records without it), the prompt's token count, the model's
    output, the parsed action, the environment's feedback, the element hit, the screenshot (if recorded),
    the reward (sparse: the episode's reward on the last step, 0 before) and the sum/mean of the response's
    sampled logprobs. `tokenizer` adds the whole decoded prompt. Screenshots are shrunk to `thumb_width`
    px (0: kept as recorded; `write_viewer` shrinks the ones it keeps)."""
    meta = traj.metadata or {}
    infos = meta.get(TURN_INFO_KEY) or []
    steps = []
    last = len(traj.turns) - 1
    for i, turn in enumerate(traj.turns):
        info = infos[i] if i < len(infos) and isinstance(infos[i], dict) else {}
        lp_sum, lp_mean = _logprob_stats(turn.response_logprobs)
        step = {
            "index": i,
            "prompt_tokens": len(turn.prompt_ids),
            "response_tokens": len(turn.response_ids),
            "trained_tokens": turn.num_trained,
            "observation": clip(info.get("observation", turn.observation), max_chars),
            "output": clip(turn.action, max_chars),
            "parsed_action": clip(info.get("parsed_action", ""), max_chars),
            "feedback": clip(info.get("feedback", ""), max_chars),
            "element": info.get("element"),
            "format_ok": bool(turn.format_ok),
            "reward": float(traj.reward) if i == last else 0.0,
            "logprob_sum": lp_sum,
            "logprob_mean": lp_mean,
            "screenshot": thumbnail(info.get("screenshot"), thumb_width) if info.get("screenshot") else None,
            "env_termination": info.get("env_termination"),
            "screenshot_size": info.get("screenshot_size"),  # page pixels, for drawing the element's bbox
        }
        if tokenizer is not None:
            step["prompt"] = clip(tokenizer.decode(turn.prompt_ids, skip_special_tokens=False), max_chars)
        steps.append(step)
    error = meta.get("error")
    return ViewerEpisode(
        key=str(meta.get("episode_id") or f"{traj.group_id}/{meta.get('seed', '')}"),
        task=traj.task_id, policy=policy, iteration=iteration, seed=meta.get("seed"),
        success=bool(meta.get("success", traj.reward > 0)), reward=float(traj.reward), termination=traj.termination,
        goal=clip(str(meta.get("goal", "")), max_chars), error=clip(str(error), max_chars) if error else "",
        advantage=traj.advantage, policy_version=int(traj.policy_version), steps=steps,
    )


def episodes_from_trajectories(
    trajs: Iterable[Trajectory], policy: str, iteration: int | None = None, *, tokenizer: Any = None,
    max_chars: int = MAX_CHARS, thumb_width: int = 0,
) -> list[ViewerEpisode]:
    return [episode_from_trajectory(t, policy, iteration, tokenizer=tokenizer, max_chars=max_chars,
                                    thumb_width=thumb_width) for t in trajs]


def episodes_from_reports(
    reports: Mapping[str, Any], iteration: int | None = None, *, tokenizer: Any = None, max_chars: int = MAX_CHARS,
) -> list[ViewerEpisode]:
    """Every evaluated episode of `reports` (policy name -> `evaluation.evaluate.EvalReport`), labelled with
    its policy name."""
    return [e for name, report in reports.items()
            for e in episodes_from_trajectories(report.trajectories, name, iteration, tokenizer=tokenizer,
                                                max_chars=max_chars)]


def _spread(items: Sequence[Any], k: int, stratum: Callable[[Any], Any], seed: int) -> list[Any]:
    """`k` of `items`, taken round-robin over strata (each shuffled with `seed`), in their original order."""
    if k >= len(items):
        return list(items)
    rng = random.Random(seed)
    groups: dict[Any, list[int]] = collections.defaultdict(list)
    for i, item in enumerate(items):
        groups[stratum(item)].append(i)
    queues = [rng.sample(idx, len(idx)) for _, idx in sorted(groups.items(), key=lambda kv: repr(kv[0]))]
    picked: list[int] = []
    while len(picked) < k:
        for q in queues:
            if q and len(picked) < k:
                picked.append(q.pop())
    return [items[i] for i in sorted(picked)]


def sample_trajectories(trajs: Sequence[Trajectory], k: int, seed: int = 0) -> list[Trajectory]:
    """`k` trajectories of one training iteration, spread over (task, success)."""
    return _spread(trajs, k, lambda t: (t.task_id, bool(t.metadata.get("success", t.reward > 0))), seed)


def select_episodes(episodes: Sequence[ViewerEpisode], max_episodes: int, seed: int = 0) -> list[ViewerEpisode]:
    """At most `max_episodes`, spread over (policy, iteration, task, success)."""
    return _spread(episodes, max_episodes, lambda e: (e.policy, e.iteration, e.task, e.success), seed)


class ViewerLog:
    """Viewer episodes of a run kept in a JSONL file, so a resumed run keeps the earlier iterations'
    episodes. Adding episodes of a (policy, iteration) replaces those already stored for it (an iteration
    that ran again after a resume)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def read(self) -> list[ViewerEpisode]:
        if not self.path.exists():
            return []
        with self.path.open() as f:
            return [ViewerEpisode.from_dict(json.loads(line)) for line in f if line.strip()]

    def add(self, episodes: Sequence[ViewerEpisode]) -> int:
        """Store `episodes`; returns how many the log holds."""
        labels = {(e.policy, e.iteration) for e in episodes}
        kept = [e for e in self.read() if (e.policy, e.iteration) not in labels] + list(episodes)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with tmp.open("w") as f:
            for e in kept:
                f.write(json.dumps(e.to_dict(), separators=(",", ":")) + "\n")
        tmp.replace(self.path)
        return len(kept)

    def add_trajectories(
        self, trajs: Sequence[Trajectory], policy: str, iteration: int | None, k: int, *, seed: int = 0,
        tokenizer: Any = None, max_chars: int = MAX_CHARS,
    ) -> int:
        """Keep `k` of one iteration's trajectories (spread over task and success; see
        `sample_trajectories`), screenshots shrunk to `THUMB_WIDTH`; returns how many episodes the log holds.
        k = 0 keeps none. Shrinking costs ~50-100 ms per screenshot: call it off the event loop
        (`asyncio.to_thread`) when screenshots are on."""
        if k <= 0:
            return len(self.read())
        picked = sample_trajectories(trajs, k, seed)
        return self.add(episodes_from_trajectories(picked, policy, iteration, tokenizer=tokenizer, max_chars=max_chars,
                                                   thumb_width=THUMB_WIDTH))
