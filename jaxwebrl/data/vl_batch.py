"""Fixed-shape training batches of vision-language samples (per-turn samples with screenshots).

A VL sample is one row: its M-RoPE positions depend on where its images sit, so rows are not packed. Each
row carries its own images' patches, so the vision encoder's work splits over the devices the rows are
sharded on (data x fsdp), like the text:

  per token       [rows, seq_len]        FEATURES + positions + segment_ids (right padding, 0)
  mrope_positions [rows, 3, seq_len]     from the images' patch grids (`models.vl.prepare_inputs`)
  vision          [rows, patches, ...]   the row's patches (pixel_values rebuilt from each record's PNG by the
                                         checkpoint's processor and checked against its digest), padded to
                                         `patches` that join no image; the layout arrays of
                                         `models.vision.patch_layout`; scatter_to [rows, patches / merge^2]:
                                         the token index in the row each merged patch replaces (seq_len: none)

`vl_batch` stacks `accum` such micro-batches on a leading axis: [accum, micro_batch, ...], the step's layout.

Static shapes: every dimension is a bucket. seq_len is the caller's (powers of two up to train.seq_len);
`patches` is `patch_bucket` of the row with the most patches (a power of two, at least 64), whatever the
number of images: the images of a row are told apart by the layout's segment ids, so image count and grid
sizes never enter a shape. A run compiles one step per (seq_len, patches) pair it meets; a row without
images has only padding patches and the same shapes.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from jaxwebrl.data.samples import FEATURES, Sample
from jaxwebrl.models import vl
from jaxwebrl.models.vision import patch_layout
from jaxwebrl.models.vl_config import VLConfig


def patch_bucket(n: int, unit: int, minimum: int = 64) -> int:
    """The next power of two >= n (at least `minimum`), a multiple of the merge unit."""
    b = minimum
    while b < n:
        b *= 2
    return -(-b // unit) * unit


def sample_patches(sample: Sample) -> int:
    """Image patch rows of a sample (t * h * w summed over its images)."""
    return sum(int(np.prod(im.grid_thw)) for im in (sample.images or []))


def rows_patch_bucket(cfg: VLConfig, samples: Sequence[Sample]) -> int:
    """The patch bucket that holds the sample with the most patches."""
    return patch_bucket(max((sample_patches(s) for s in samples), default=0), cfg.vision.merge_unit)


def vl_row(cfg: VLConfig, sample: Sample | None, processor: Any, seq_len: int, patches: int) -> dict[str, Any]:
    """One row: the sample's tokens padded to `seq_len` and its patches to `patches` (None: an empty row that
    trains nothing: one untrained token, so no row is all padding)."""
    feats = {k: np.zeros(seq_len, dt) for k, dt in FEATURES.items()}
    mask = np.zeros(seq_len, np.int32)
    pixels, grids = [], []
    if sample is None:
        mask[0] = 1
    else:
        if len(sample) > seq_len:
            raise ValueError(f"a sample of {len(sample)} tokens does not fit seq_len={seq_len}; raise the bucket "
                             "(a VL row cannot be cut: its image placeholders must stay whole)")
        for k in FEATURES:
            feats[k][:len(sample)] = getattr(sample, k)
        mask[:len(sample)] = 1
        for im in sample.images or []:
            pixels.append(im.pixel_values(processor))  # rebuilt from the PNG, checked against the digest
            grids.append(list(im.grid_thw))
    n = sum(len(p) for p in pixels)
    if n > patches:
        raise ValueError(f"a sample has {n} image patches > patches={patches}; raise the bucket")
    x = vl.prepare_inputs(cfg, feats["tokens"][None], mask[None], np.concatenate(pixels) if pixels else None,
                          np.asarray(grids) if grids else None, num_patches=patches if pixels else None)
    vision = x["vision"]
    if vision is None:  # no image in this row: padding patches only, same shapes as the others
        layout = patch_layout(cfg.vision, np.zeros((0, 3), np.int64), patches)
        vision = dict(layout, pixel_values=np.zeros((patches, cfg.vision.patch_dim), np.float32),
                      scatter_to=np.full(patches // cfg.vision.merge_unit, seq_len, np.int32))
    return {**feats, "positions": x["positions"][0], "segment_ids": x["segment_ids"][0],
            "mrope_positions": x["mrope_positions"][:, 0], "vision": vision}


def vl_rows(cfg: VLConfig, samples: Sequence[Sample | None], processor: Any, seq_len: int, patches: int) -> dict[str, Any]:
    """Rows [len(samples), ...] (see the module doc); None entries are empty rows."""
    rows = [vl_row(cfg, s, processor, seq_len, patches) for s in samples]
    return jax.tree.map(lambda *xs: np.stack(xs), *rows)


def vl_batch(cfg: VLConfig, samples: Sequence[Sample], processor: Any, accum: int, micro_batch: int, seq_len: int,
             patches: int | None = None) -> dict[str, Any]:
    """`accum` micro-batches of `micro_batch` rows, [accum, micro_batch, ...] (rows past len(samples) empty);
    `patches` None: the bucket of the sample with the most patches."""
    if len(samples) > accum * micro_batch:
        raise ValueError(f"{len(samples)} samples > accum * micro_batch = {accum * micro_batch}")
    patches = patches or rows_patch_bucket(cfg, samples)
    padded: list[Sample | None] = list(samples) + [None] * (accum * micro_batch - len(samples))
    rows = vl_rows(cfg, padded, processor, seq_len, patches)
    return jax.tree.map(lambda a: a.reshape(accum, micro_batch, *a.shape[1:]), rows)


class VLBatches:
    """Endless [rows, ...] VL host batches over a fixed sample set (behaviour cloning): reshuffled every epoch
    (seeded), one sample per row, at one sequence length and one patch bucket for the whole set, so the
    step compiles once. State (saved in checkpoints) is the position; `set_state` resumes there."""

    def __init__(self, cfg: VLConfig, samples: Sequence[Sample], processor: Any, rows: int, seq_len: int,
                 seed: int = 0):
        if not samples:
            raise ValueError("VLBatches got no samples")
        longest = max(len(s) for s in samples)
        if longest > seq_len:
            raise ValueError(f"a sample of {longest} tokens does not fit seq_len={seq_len}; raise it (VL rows are not cut)")
        self.cfg, self.samples, self.processor = cfg, list(samples), processor
        self.rows, self.seq_len, self.seed = rows, seq_len, seed
        self.patches = rows_patch_bucket(cfg, samples)
        self.pos = 0

    def _index(self, k: int) -> int:
        epoch, i = divmod(k, len(self.samples))
        return int(np.random.default_rng((self.seed, epoch)).permutation(len(self.samples))[i])

    def __iter__(self) -> "VLBatches":
        return self

    def __next__(self) -> dict[str, Any]:
        picked = [self.samples[self._index(self.pos + i)] for i in range(self.rows)]
        self.pos += self.rows
        return vl_rows(self.cfg, picked, self.processor, self.seq_len, self.patches)

    def get_state(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def set_state(self, state: dict[str, Any]) -> None:
        self.pos = int(state["pos"])
