"""Grain pipeline: samples -> seeded shuffle -> pack (or pad) into fixed [rows, T] arrays -> device batch.

Sources: an in-memory list of `Sample`s (online RL), JSONL trajectory files (built into samples up front:
SFT sets fit in memory) or ArrayRecord files of *sample* records (read lazily, one sample per record).
Everything after the source is a Grain `MapDataset`/`IterDataset` chain, so the iterator state
(`get_state()`: a small JSON dict) is saved in checkpoints and `set_state` resumes at the exact element.

Packing uses Grain's first-fit packer with one bin per output row; the packer's own segment ids (1.., 0 =
padding) and per-segment positions become the model's `segment_ids` / `positions`. A sample longer than
T is truncated to its first T tokens. `mode="pad"` puts one sample per row instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator, Sequence

import grain
import jax
import numpy as np
from grain import experimental as grain_exp
from jax.sharding import Mesh

from jaxwebrl.data.records import read_trajectories
from jaxwebrl.sharding import batch_spec_sharding
from jaxwebrl.data.samples import FEATURES, Sample, build_samples, with_context_loss

Batch = dict[str, np.ndarray]
BATCH_FIELDS = tuple(FEATURES) + ("segment_ids", "positions")
PACK_MODES = ("pack", "pad")  # pack: first-fit packing of samples into rows | pad: one sample per row


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    seq_len: int
    rows: int  # rows per emitted batch (= accum_steps * micro_batch of one optimizer step, per host)
    seed: int = 0
    shuffle: bool = True
    num_epochs: int | None = None  # None: repeat forever (each epoch reshuffled)
    mode: str = "pack"  # pack | pad
    shard_index: int = 0  # this host's slice of the data (multi-host)
    shard_count: int = 1


# ---- sources --------------------------------------------------------------------------------------


def _features(sample: Sample, seq_len: int) -> dict[str, np.ndarray]:
    return sample.truncated(seq_len).features()


def samples_dataset(samples: Sequence[Sample]) -> grain.MapDataset:
    return grain.MapDataset.source(list(samples))


def trajectory_files_dataset(paths: Sequence[str], per: str, norm: str, context_weight: float = 0.0) -> grain.MapDataset:
    """JSONL / ArrayRecord trajectory files -> samples, built up front (SFT sets; G = 1 per trajectory
    unless the records share group ids). `context_weight` > 0 also trains the prompt tokens
    (`samples.with_context_loss`)."""
    trajs = [t for p in paths for t in read_trajectories(p)]
    return samples_dataset([with_context_loss(s, context_weight) for s in build_samples(trajs, per=per, norm=norm)])


def write_samples_array_record(path: str | os.PathLike[str], samples: Sequence[Sample]) -> int:
    """ArrayRecord of sample records (JSON), for large prepared sets read lazily."""
    from jaxwebrl.data.records import write_array_record

    return write_array_record(path, (s.to_dict() for s in samples))


def sample_records_dataset(paths: Sequence[str]) -> grain.MapDataset:
    """Lazy ArrayRecord source of sample records."""
    src = grain.sources.ArrayRecordDataSource([str(p) for p in paths])
    return grain.MapDataset.source(src).map(lambda b: Sample.from_dict(json.loads(b)))


# ---- batching -------------------------------------------------------------------------------------


def _rename_packed(x: dict[str, np.ndarray]) -> Batch:
    out = {k: x[k] for k in FEATURES}
    out["segment_ids"] = x["tokens_segment_ids"].astype(np.int32)
    out["positions"] = x["tokens_positions"].astype(np.int32)
    return out


def _pad_one(f: dict[str, np.ndarray], seq_len: int) -> Batch:
    n = len(f["tokens"])
    out = {k: np.pad(v, (0, seq_len - n)) for k, v in f.items()}
    out["segment_ids"] = np.pad(np.ones(n, np.int32), (0, seq_len - n))
    out["positions"] = np.pad(np.arange(n, dtype=np.int32), (0, seq_len - n))
    return out


def make_dataset(source: grain.MapDataset, cfg: PipelineConfig, drop_remainder: bool = True) -> grain.IterDataset:
    """The deterministic chain source -> shard -> shuffle -> repeat -> pack/pad -> batch [rows, T]."""
    ds = source
    if cfg.shard_count > 1:
        ds = ds[cfg.shard_index :: cfg.shard_count]
    if cfg.shuffle:
        ds = ds.shuffle(seed=cfg.seed)
    if cfg.num_epochs != 1:
        ds = ds.repeat(cfg.num_epochs)  # the shuffle below it sees the epoch and reshuffles with seed + epoch
    ds = ds.map(lambda s: _features(s, cfg.seq_len))
    if cfg.mode == "pack":
        it = grain_exp.FirstFitPackIterDataset(
            ds.to_iter_dataset(), length_struct={k: cfg.seq_len for k in FEATURES},
            num_packing_bins=cfg.rows, seed=cfg.seed, shuffle_bins=False,
        ).map(_rename_packed)
    elif cfg.mode == "pad":
        it = ds.map(lambda f: _pad_one(f, cfg.seq_len)).to_iter_dataset()
    else:
        raise ValueError(f"pipeline mode {cfg.mode!r}: use 'pack' or 'pad'")
    return it.batch(cfg.rows, drop_remainder=drop_remainder)


def empty_rows(n: int, seq_len: int) -> Batch:
    """Rows that contribute nothing (segment 0, mask 0, denominator 0)."""
    return {k: np.zeros((n, seq_len), np.float32 if k in ("advantages", "old_logprobs", "norm_weight", "norm_denom") else np.int32)
            for k in BATCH_FIELDS}


def pad_rows(batch: Batch, rows: int) -> Batch:
    n = len(batch["tokens"])
    if n == rows:
        return batch
    fill = empty_rows(rows - n, batch["tokens"].shape[1])
    return {k: np.concatenate([batch[k].astype(fill[k].dtype), fill[k]]) for k in BATCH_FIELDS}


def pack_samples(samples: Sequence[Sample], seq_len: int, rows: int, seed: int = 0, shuffle: bool = True,
                 mode: str = "pack") -> list[Batch]:
    """An online-RL rollout batch -> a list of [rows, T] batches (the last padded with empty rows)."""
    cfg = PipelineConfig(seq_len=seq_len, rows=rows, seed=seed, shuffle=shuffle, num_epochs=1, mode=mode)
    return [pad_rows(b, rows) for b in make_dataset(samples_dataset(samples), cfg, drop_remainder=False)]


def bucket_length(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= n (static shapes: a handful of compiled programs, DESIGN principle 4)."""
    for b in sorted(buckets):
        if b >= n:
            return b
    return max(buckets)


def power_of_two_buckets(max_len: int, min_len: int = 128) -> list[int]:
    out, b = [], min_len
    while b < max_len:
        out.append(b)
        b *= 2
    return out + [max_len]


# ---- iterator with state and device placement ------------------------------------------------------


class DataIterator:
    """A Grain iterator whose state is a JSON dict (saved in checkpoints); yields host batches."""

    def __init__(self, dataset: grain.IterDataset):
        self._it = iter(dataset)

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        return next(self._it)

    def get_state(self) -> dict[str, Any]:
        return self._it.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._it.set_state(state)


def to_device(batch: Batch, mesh: Mesh, accum: int, extra: dict[str, np.ndarray] | None = None) -> dict[str, jax.Array]:
    """[rows, ...] host arrays -> [accum, rows/accum, ...] global arrays with the step's batch sharding (rows
    over data x fsdp). Nested dicts (a VL batch's `vision`, `data.vl_batch`) are placed leaf by leaf.

    Multi-host: each host passes its own rows (`make_array_from_process_local_data`)."""
    sh = batch_spec_sharding(mesh)

    def place(v: Any) -> jax.Array:
        v = np.asarray(v)
        rows = v.shape[0]
        if rows % accum:
            raise ValueError(f"batch of {rows} rows is not divisible by accum_steps={accum}")
        return jax.make_array_from_process_local_data(sh, v.reshape(accum, rows // accum, *v.shape[1:]))

    return jax.tree.map(place, {**batch, **(extra or {})})
