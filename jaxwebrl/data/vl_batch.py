"""Fixed-shape training batches of vision-language samples (per-turn samples with screenshots).

A VL sample is one row: its M-RoPE positions depend on where its images sit, so rows are not packed.
`vl_batch` lays `accum * micro_batch` samples out as the train step's arrays:

  per token   [accum, micro_batch, seq_len]        FEATURES + positions + segment_ids (right padding, 0)
  mrope_positions [accum, 3, micro_batch, seq_len] from the images' patch grids (`models.vl.prepare_inputs`)
  vision      [accum, num_patches, ...]            the micro-batch's patches (pixel_values rebuilt from each
                                                   record's PNG by the checkpoint's processor and checked
                                                   against its digest), padded to `num_patches` rows that
                                                   join no image; scatter_to: where each merged patch goes

Static shapes: seq_len and num_patches are the caller's buckets (`patch_bucket` rounds the largest
micro-batch's patch count up to a power of two), so a run compiles one step per (seq_len, num_patches)
pair; a micro-batch without images has only padding patches and the same shapes.
"""

from __future__ import annotations

from typing import Any, Sequence

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


def _pixels(sample: Sample, processor: Any) -> tuple[list[np.ndarray], list[list[int]]]:
    images = sample.images or []
    return [im.pixel_values(processor) for im in images], [list(im.grid_thw) for im in images]


def vl_micro_batch(cfg: VLConfig, samples: Sequence[Sample], processor: Any, micro_batch: int, seq_len: int,
                   num_patches: int) -> dict[str, Any]:
    """One micro-batch [micro_batch, seq_len] (rows past len(samples) are empty padding)."""
    if len(samples) > micro_batch:
        raise ValueError(f"{len(samples)} samples > micro_batch={micro_batch}")
    feats = {k: np.zeros((micro_batch, seq_len), dt) for k, dt in FEATURES.items()}
    mask = np.zeros((micro_batch, seq_len), np.int32)
    pixels: list[np.ndarray] = []
    grids: list[list[int]] = []
    for b, s in enumerate(samples):
        if len(s) > seq_len:
            raise ValueError(f"a sample of {len(s)} tokens does not fit seq_len={seq_len}; raise the bucket "
                             "(a VL row cannot be cut: its image placeholders must stay whole)")
        for k in FEATURES:
            feats[k][b, :len(s)] = getattr(s, k)
        mask[b, :len(s)] = 1
        p, g = _pixels(s, processor)
        pixels += p
        grids += g
    mask[len(samples):, 0] = 1  # an empty row keeps one (untrained) token, so no row is all padding
    n = sum(len(p) for p in pixels)
    if n > num_patches:
        raise ValueError(f"the micro-batch has {n} image patches > num_patches={num_patches}; raise the bucket")
    x = vl.prepare_inputs(cfg, feats["tokens"], mask, np.concatenate(pixels) if pixels else None,
                          np.asarray(grids) if grids else None, num_patches=num_patches if pixels else None)
    vision = x["vision"]
    if vision is None:  # no image in this micro-batch: padding patches only, same shapes as the others
        layout = patch_layout(cfg.vision, np.zeros((0, 3), np.int64), num_patches)
        vision = dict(layout, pixel_values=np.zeros((num_patches, cfg.vision.patch_dim), np.float32),
                      scatter_to=np.full(num_patches // cfg.vision.merge_unit, micro_batch * seq_len, np.int32))
    return {**feats, "positions": x["positions"], "segment_ids": x["segment_ids"],
            "mrope_positions": x["mrope_positions"], "vision": vision}


def vl_batch(cfg: VLConfig, samples: Sequence[Sample], processor: Any, accum: int, micro_batch: int, seq_len: int,
             num_patches: int | None = None) -> dict[str, Any]:
    """`accum` micro-batches stacked on a leading axis (see the module doc); `num_patches` None: the bucket of
    the largest micro-batch."""
    if len(samples) > accum * micro_batch:
        raise ValueError(f"{len(samples)} samples > accum * micro_batch = {accum * micro_batch}")
    groups = [list(samples[i * micro_batch:(i + 1) * micro_batch]) for i in range(accum)]
    if num_patches is None:
        most = max(sum(im.grid_thw[0] * im.grid_thw[1] * im.grid_thw[2] for s in g for im in (s.images or []))
                   for g in groups)
        num_patches = patch_bucket(most, cfg.vision.merge_unit)
    micros = [vl_micro_batch(cfg, g, processor, micro_batch, seq_len, num_patches) for g in groups]

    def stack(*xs: Any) -> Any:
        return np.stack(xs)

    import jax

    return jax.tree.map(stack, *micros)
