"""Behaviour cloning of a vision-language policy built from scratch (the visual local run, `model.vision`).

The main job's stage 1 with pixels: the demonstrations' observations carry screenshots, so the policy's
checkpoint holds a tokenizer with the Qwen vision special tokens and a processor (the transformers Qwen-VL
image processor, with a small pixel budget) trained and built here; the demonstrations are rendered by that
processor (each screenshot expanded into its image placeholders, its PNG, grid and pixel digest recorded on
the turn), and BC trains them one sample per row with their images (`data.vl_batch.VLBatches`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from jaxwebrl.data.records import read_trajectories
from jaxwebrl.data.samples import Sample, build_samples, with_context_loss
from jaxwebrl.data.vl_batch import VLBatches
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint


def init_vl_policy(run: Any, texts: Sequence[str], init_dir: str | Path) -> Any:
    """Tokenizer (trained on `texts`, `bc.vocab_size`), processor and random Qwen3-VL params (`model.shape`
    text decoder + `model.vision` tower, init std 0.02 as the text policy's) saved in `init_dir`, the "random"
    policy of the report. Returns the processor."""
    cfg = run.model.vl_config().replace(text=run.model.model_config().replace(vocab_size=run.bc.vocab_size))
    make_tiny_vl_checkpoint(init_dir, cfg.architecture, seed=run.seed, std=0.02, cfg=cfg, corpus=list(texts))
    return load_processor(init_dir)


def _without_image_targets(sample: Sample, image_token_id: int) -> Sample:
    """The context loss never asks the model to predict an image placeholder (they come from the processor)."""
    keep = sample.tokens != image_token_id
    return dataclasses.replace(sample, loss_mask=(sample.loss_mask * keep).astype(np.int32))


def vl_demonstration_batches(run: Any, trainer: Any, demo_file: str | Path, seq_len: int) -> VLBatches:
    """BC's endless batches of the demonstrations (per-turn samples, page tokens at `bc.context_loss_weight`)."""
    samples = build_samples(read_trajectories(str(demo_file)), per=run.data.per, norm="token_mean")
    image_token = trainer.model_cfg.image_token_id
    samples = [_without_image_targets(with_context_loss(s, run.bc.context_loss_weight), image_token) for s in samples]
    longest = max(len(s) for s in samples)
    if longest > seq_len:
        raise ValueError(f"bc.seq_len={seq_len} is shorter than the longest demonstration sample ({longest} tokens): "
                         f"set bc.seq_len to at least {longest}")
    return VLBatches(trainer.model_cfg, samples, trainer.processor, trainer.rows, seq_len, seed=run.seed)
