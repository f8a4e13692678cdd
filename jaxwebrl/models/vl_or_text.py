"""One face for text and vision-language checkpoints: load, export and the tokenizer-or-processor, picked by
config.json (a `vision_config` section means Qwen3-VL / Qwen2.5-VL), so trainers, engines and the main job
handle both without asking which."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from jaxwebrl.models.config import ModelConfig
from jaxwebrl.models.hf_io import export_hf, load_hf
from jaxwebrl.models.tokenizer import load_tokenizer
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_hf_io import export_vl_hf, load_vl_hf


def is_vl_checkpoint(path: str | os.PathLike[str]) -> bool:
    """config.json names a vision-language model (Qwen3-VL / Qwen2.5-VL)."""
    cfg = Path(path) / "config.json"
    return cfg.exists() and "vision_config" in json.loads(cfg.read_text())


def load_policy_hf(path: str | os.PathLike[str], mesh: Any = None, **overrides: Any) -> tuple[ModelConfig | VLConfig, Any]:
    """(config, params) of a text or VL checkpoint; `overrides` are numerics (dtype, remat, attention, ...)."""
    return load_vl_hf(path, mesh, **overrides) if is_vl_checkpoint(path) else load_hf(path, mesh=mesh, **overrides)


def export_policy_hf(cfg: ModelConfig | VLConfig, params: Any, out_dir: str | os.PathLike[str],
                     tokenizer_dir: str | os.PathLike[str] | None = None, dtype: str | None = None) -> Path:
    """A HF directory transformers loads; a VL model gets its processor files from `tokenizer_dir` too."""
    if isinstance(cfg, VLConfig):
        return export_vl_hf(cfg, params, out_dir, processor_dir=tokenizer_dir, dtype=dtype)
    return export_hf(cfg, params, out_dir, tokenizer_dir=tokenizer_dir, dtype=dtype)


def load_tokenizer_or_processor(path: str | os.PathLike[str]) -> Any:
    """What the agent renders prompts with: a VL checkpoint's processor (it renders images and expands their
    placeholders), else the fast tokenizer."""
    if is_vl_checkpoint(path):
        from jaxwebrl.models.processor import load_processor

        return load_processor(path)
    return load_tokenizer(path)
