"""The one training loop: SFT from files, GRPO/RFT from saved rollouts and online RL are its sources.

A `Source` hands the loop one round of work at a time: a packed host batch (SFT: one optimizer step), or a
rollout batch of `Sample`s (a PPO-style update of `train.epochs` passes), together with its own metrics
(e.g. rollout statistics). After the update the source is told (`after_update`: the online loop syncs the
engine's weights and evaluates there). The loop logs, checkpoints and exports on the same schedule for
every source, shows progress, and resumes where the source says the run stood (`done`).

The loop is async so an online source can keep its browsers and engine running on the event loop while the
update runs in a worker thread; offline sources are plain objects whose methods return at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any, Iterator, Protocol, Sequence

from tqdm.auto import tqdm

from jaxwebrl.data.pipeline import Batch
from jaxwebrl.data.records import Trajectory
from jaxwebrl.data.samples import Sample
from jaxwebrl.train.advantages import group_by


@dataclasses.dataclass
class Round:
    """One unit of work: a host batch (one optimizer step) or a rollout batch of samples."""

    batch: Batch | None = None
    samples: Sequence[Sample] | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)


class Source(Protocol):
    name: str  # progress-bar label and the run_meta key of the rounds done
    log_prefix: str  # prefix of the training metrics ('' = the names as they are)
    checkpoint_each_round: bool  # save after every round (rollouts are expensive to redo)

    def done(self, trainer: Any) -> int:
        """Rounds already in the trainer's (restored) state."""

    def next_round(self, index: int) -> Round | Any:
        """The work of round `index` (may be a coroutine)."""

    def after_update(self, index: int, trainer: Any, metrics: dict[str, float]) -> Any:
        """Called after round `index` trained (may be a coroutine); may add to `metrics`."""


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def fit(trainer: Any, source: Source, rounds: int, *, progress: bool = True, log_every: int = 1,
              save_every: int = 0, export_every: int = 0) -> dict[str, float]:
    """Run rounds `source.done(trainer)` .. `rounds - 1`; returns the last round's metrics.

    `save_every` / `export_every` (in rounds; 0 = off) add checkpoints / HF exports between rounds; a source
    with `checkpoint_each_round` saves after every round, recording the rounds done as
    `trainer.run_meta["rounds"]` (what its `done` reads back on resume).
    The final state is always saved."""
    start = source.done(trainer)
    bar = tqdm(range(start, rounds), initial=start, total=rounds, desc=source.name, disable=not progress)
    metrics: dict[str, float] = {}
    for i in bar:
        work = await _maybe_await(source.next_round(i))
        metrics = dict(work.metrics)
        if work.batch is not None:
            metrics.update(_prefixed(await asyncio.to_thread(trainer.train_on_batch, work.batch), source.log_prefix))
        elif work.samples or (work.samples is not None and getattr(trainer, "hosts", 1) > 1):
            # multi-host: a host whose samples were all filtered still joins the agreed, collective update
            metrics.update(_prefixed(await asyncio.to_thread(trainer.train_on_samples, work.samples), "train"))
        elif work.samples is not None:  # everything was filtered out: the record says no update ran
            metrics["train/optimizer_steps"] = 0.0
        await _maybe_await(source.after_update(i, trainer, metrics))
        if metrics and log_every and (i + 1) % log_every == 0:
            trainer.log(metrics, prefix="")
        bar.set_postfix({k.split("/")[-1]: f"{v:.4g}" for k, v in metrics.items() if k in _SHOWN})
        if source.checkpoint_each_round:
            trainer.run_meta["rounds"] = i + 1
            trainer.save(force=True)
        elif save_every and (i + 1) % save_every == 0 and (i + 1) < rounds:
            trainer.save()
        if export_every and (i + 1) % export_every == 0 and (i + 1) < rounds:
            trainer.export()
    trainer.save(force=True)
    return metrics


def run_fit(trainer: Any, source: Source, rounds: int, **kwargs: Any) -> dict[str, float]:
    """`fit` for callers outside an event loop."""
    return asyncio.run(fit(trainer, source, rounds, **kwargs))


_SHOWN = {"loss", "train/loss", "bc/loss", "rollout/success_rate"}


def _prefixed(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {f"{prefix}/{k}" if prefix else k: v for k, v in metrics.items()}


# ---- offline sources ---------------------------------------------------------------------------------


class BatchSource:
    """Packed host batches from a (resumable) Grain iterator: one optimizer step per round (SFT)."""

    checkpoint_each_round = False

    def __init__(self, iterator: Any, name: str = "sft", log_prefix: str = "train"):
        self.iterator, self.name, self.log_prefix = iterator, name, log_prefix

    def done(self, trainer: Any) -> int:
        return trainer.step

    def next_round(self, index: int) -> Round:
        return Round(batch=next(self.iterator))

    def after_update(self, index: int, trainer: Any, metrics: dict[str, float]) -> None:
        return None


class GroupBatches:
    """Cycles over record groups, `groups_per_step` at a time; state = position (saved in checkpoints)."""

    def __init__(self, trajectories: Sequence[Trajectory], groups_per_step: int):
        self.groups = list(group_by(trajectories).values())
        self.n = groups_per_step
        self.pos = 0

    def __iter__(self) -> Iterator[list[Trajectory]]:
        return self

    def __next__(self) -> list[Trajectory]:
        out = [self.groups[(self.pos + i) % len(self.groups)] for i in range(self.n)]
        self.pos += self.n
        return [t for g in out for t in g]

    def get_state(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def set_state(self, state: dict[str, Any]) -> None:
        self.pos = int(state["pos"])


class RecordSource:
    """Saved rollouts in batches of whole groups (a resumable position): one PPO-style update per round.
    `to_samples(trajectories)` applies the recipe (filters, advantages, sample cut)."""

    checkpoint_each_round = False
    log_prefix = "train"

    def __init__(self, groups: Any, to_samples: Any, name: str = "records"):
        self.groups, self.to_samples, self.name = groups, to_samples, name

    def done(self, trainer: Any) -> int:
        return self.groups.pos // self.groups.n

    def next_round(self, index: int) -> Round:
        return Round(samples=self.to_samples(next(self.groups)))

    def after_update(self, index: int, trainer: Any, metrics: dict[str, float]) -> None:
        return None
