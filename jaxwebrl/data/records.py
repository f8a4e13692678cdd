"""Trajectory records: what a rollout (or a demonstration set) hands to training.

A `Trajectory` is one episode of one task: alternating observations (never trained) and model responses
(trained). Following DESIGN.md principle 1 the response token ids are exactly what the engine sampled and
`response_logprobs` are the engine's; we never decode and re-encode them.

Schema (JSONL: one `Trajectory.to_dict()` per line; ArrayRecord: the same JSON, utf-8, one per record):

Trajectory
  task_id            str    the task (all trajectories of a GRPO group share it)
  group_id           str    the rollout group (task_id + round); advantages are normalised within it
  turns              list[Turn]
  reward             float  trajectory reward (binary success, or OpenWebRL's +1/0/-1)
  termination        str    why the episode ended (see TERMINATIONS for the known values; free-form allowed)
  policy_version     int    the trainer step whose weights produced the oldest response token (staleness, lag)
  advantage          float | None   filled by `train.advantages.assign_group_advantages`
  metadata           dict   free-form (instruction text, difficulty, judge output, ...)
Turn
  prompt_ids         list[int]  the exact context the engine saw at this turn (per-turn samples use it)
  response_ids       list[int]  the sampled tokens (trained)
  response_logprobs  list[float] | None  engine logprobs of response_ids (None: recompute in the trainer)
  policy_version     int | None  the weights version that sampled the response's first token (the oldest in it:
                                 an update landing mid-response only makes later tokens newer); None: unknown
  response_mask      list[int] | None   per response token 0/1 (None = all 1); 0 marks tokens hit by a
                                        judge timeout / infrastructure failure, or dropped by a filter
  history_ids        list[int] | None   the tokens this turn adds *before its response* to the trajectory-
                                        level sequence (WebAgent-R1: the compressed "** Simplified html **"
                                        form of this turn's observation as later turns saw it). None: derived
                                        from append-only prompts (prompt_j = prompt_{j-1} + response_{j-1} + new)
  observation        str    observation text (or a caption / hash for screenshots)
  action             str    the parsed action text
  observation_digest str | None  sha1 of the observation text (+ of its screenshot when taken); WebGym's repetition filter
                                 compares consecutive digests (falls back to `observation`)
  format_ok          bool   the response parsed (OpenWebRL format gate, BrowserAgent malformed filter)
  images             list[TurnImage] | None  the images in prompt_ids, in order (vision-language policies);
                                 prompt_ids hold their placeholders as the processor expanded them
TurnImage
  png_b64            str        the image as the engine got it (PNG, base64)
  grid_thw           list[int]  the processor's (t, h, w) patch grid: t*h*w / merge^2 placeholders in prompt_ids
  pixels_sha256      str        sha256 of the processor's float32 pixel_values for it; `pixel_values(processor)`
                                rebuilds them from the PNG and refuses a rebuild that differs
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

TERMINATIONS = (
    "done", "max_steps", "context_overflow", "format_errors", "env_error", "generation_length", "format_error",
    "env_step_error", "sandbox_failure",
    "init_failure", "judge_error", "timeout", "agent_timeout", "other",
)


@dataclass
class TurnImage:
    """One image the engine saw at a turn: its PNG and what the processor made of it (see the module doc)."""

    png_b64: str
    grid_thw: list[int]
    pixels_sha256: str

    @classmethod
    def of(cls, png: bytes, grid_thw: Any, pixel_values: Any) -> "TurnImage":
        import numpy as np

        digest = hashlib.sha256(np.ascontiguousarray(np.asarray(pixel_values, np.float32)).tobytes()).hexdigest()
        return cls(base64.b64encode(png).decode(), [int(v) for v in grid_thw], digest)

    @property
    def png(self) -> bytes:
        return base64.b64decode(self.png_b64)

    def pixel_values(self, processor: Any) -> Any:
        """float32 [t*h*w, patch_dim] rebuilt by `processor` (the checkpoint's, as at rollout) from the PNG;
        a ValueError when the grid or the pixels differ from what the engine saw."""
        import io

        import numpy as np
        from PIL import Image

        with Image.open(io.BytesIO(self.png)) as im:
            out = processor.image_processor(images=[im.convert("RGB")], return_tensors="np")
        pixels = np.ascontiguousarray(np.asarray(out["pixel_values"], np.float32))
        grid = [int(v) for v in np.asarray(out["image_grid_thw"]).reshape(-1)]
        if grid != list(self.grid_thw) or hashlib.sha256(pixels.tobytes()).hexdigest() != self.pixels_sha256:
            raise ValueError(f"the processor rebuilds grid {grid} / other pixels than the rollout's {self.grid_thw}; "
                             "train with the processor (preprocessor_config.json) the rollout used")
        return pixels


@dataclass
class Turn:
    """One model call: its context, its sampled response and what the environment made of it."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None = None
    response_mask: list[int] | None = None
    history_ids: list[int] | None = None
    observation: str = ""
    action: str = ""
    observation_digest: str | None = None
    format_ok: bool = True
    images: list[TurnImage] | None = None
    policy_version: int | None = None

    def __post_init__(self) -> None:
        if self.images is not None:  # from JSON: dicts
            self.images = [im if isinstance(im, TurnImage) else TurnImage(**im) for im in self.images]
        n = len(self.response_ids)
        if self.response_logprobs is not None and len(self.response_logprobs) != n:
            raise ValueError(f"response_logprobs has {len(self.response_logprobs)} entries for {n} response tokens")
        if self.response_mask is not None and len(self.response_mask) != n:
            raise ValueError(f"response_mask has {len(self.response_mask)} entries for {n} response tokens")

    @property
    def mask(self) -> list[int]:
        return list(self.response_mask) if self.response_mask is not None else [1] * len(self.response_ids)

    @property
    def num_trained(self) -> int:
        return int(sum(self.mask))


@dataclass
class Trajectory:
    """One episode; see the module docstring for every field."""

    task_id: str
    turns: list[Turn]
    reward: float = 0.0
    group_id: str = ""
    termination: str = "done"
    policy_version: int = 0
    advantage: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.group_id:
            self.group_id = self.task_id

    @property
    def num_trained_turns(self) -> int:
        return sum(1 for t in self.turns if t.num_trained > 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Trajectory":
        d = dict(d)
        d["turns"] = [Turn(**t) for t in d.get("turns", [])]
        return cls(**d)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str | bytes) -> "Trajectory":
        return cls.from_dict(json.loads(line))


# ---- files ----------------------------------------------------------------------------------------


def write_jsonl(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> int:
    """Write one JSON trajectory per line; returns the count."""
    n = 0
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for t in trajectories:
            f.write(t.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    with open(path) as f:
        for line in f:
            if line.strip():
                yield Trajectory.from_json(line)


def write_array_record(path: str | os.PathLike[str], records: Iterable[Trajectory | dict[str, Any]]) -> int:
    """ArrayRecord file of JSON records (for sets too large to load at once; Grain reads it lazily)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    writer = ArrayRecordWriter(str(path), "group_size:1")
    n = 0
    for r in records:
        payload = r.to_json() if isinstance(r, Trajectory) else json.dumps(r, separators=(",", ":"))
        writer.write(payload.encode())
        n += 1
    writer.close()
    return n


def read_array_record(path: str | os.PathLike[str]) -> Iterator[Trajectory]:
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(path))
    try:
        for i in range(reader.num_records()):
            yield Trajectory.from_json(reader.read([i])[0])
    finally:
        reader.close()


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read a .jsonl or .array_record file by extension."""
    p = str(path)
    if p.endswith(".jsonl") or p.endswith(".json"):
        return list(read_jsonl(p))
    if "array_record" in p or p.endswith(".arrayrecord"):
        return list(read_array_record(p))
    raise ValueError(f"{p}: unknown record format; use .jsonl or .array_record")
