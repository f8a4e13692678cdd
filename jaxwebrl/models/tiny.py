"""Tiny random checkpoints for tests, benchmarks and smoke runs: nothing is downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax

from jaxwebrl.models.config import ModelConfig
from jaxwebrl.models.decoder import Params, init_params
from jaxwebrl.models.hf_io import export_hf
from jaxwebrl.models.tokenizer import train_tokenizer

# A small corpus so the tiny tokenizer covers the words the browser observations use.
SAMPLE_TEXT = (
    "click type fill press scroll goto stop do exit answer think the a an button textbox link "
    "search submit login checkbox option select enter tab page url home next previous\n"
    "[12] button \"Submit\" [7] textbox \"Search\" required: False <think> </think> <answer> </answer>"
)


def tiny_config(architecture: str = "qwen3", **overrides: Any) -> ModelConfig:
    """A few-layer config of the given family, small enough for CPU tests."""
    base: dict[str, Any] = dict(
        architecture=architecture, vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=1024,
    )
    if architecture == "qwen2":
        base.update(attention_bias=True)
    if architecture == "qwen3":
        base.update(qk_norm=True)
    if architecture == "llama":
        base.update(rope_scaling=tuple(sorted(dict(
            rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=64).items())), rope_theta=500000.0)
    base.update(overrides)
    return ModelConfig(**base)


def make_tiny_checkpoint(
    out_dir: str | os.PathLike[str], cfg: ModelConfig | None = None, seed: int = 0, std: float = 0.2,
    corpus: list[str] | None = None,
) -> tuple[ModelConfig, Params]:
    """Train a small tokenizer, init random params sized to it, export both as a HF directory."""
    out = Path(out_dir)
    cfg = cfg or tiny_config()
    tok = train_tokenizer(corpus or [SAMPLE_TEXT] * 4, vocab_size=cfg.vocab_size, out_dir=out)
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    cfg = cfg.replace(pad_token_id=ids[0], eos_token_id=ids[1])
    if len(tok) > cfg.vocab_size:
        raise ValueError(f"tokenizer has {len(tok)} tokens > vocab_size {cfg.vocab_size}")
    params = init_params(cfg, jax.random.key(seed), std=std)
    export_hf(cfg, params, out, tokenizer_dir=out)
    return cfg, params
