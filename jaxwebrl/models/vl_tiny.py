"""Tiny random Qwen3-VL / Qwen2.5-VL checkpoints (model + tokenizer + processor) for tests, benchmarks
and smoke runs: nothing is downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax

from jaxwebrl.models.config import ModelConfig
from jaxwebrl.models.processor import tiny_processor, train_vl_tokenizer, vision_token_ids
from jaxwebrl.models.tiny import SAMPLE_TEXT
from jaxwebrl.models.vl import Params, init_params
from jaxwebrl.models.vl_config import VisionConfig, VLConfig
from jaxwebrl.models.vl_hf_io import export_vl_hf


def tiny_vl_config(architecture: str = "qwen3_vl", vocab_size: int = 320, **text_overrides: Any) -> VLConfig:
    """Hidden 64, 2 text layers, a 2-block ViT of width 32: the shapes of shared/notes/qwen_vl.md."""
    qwen3 = architecture == "qwen3_vl"
    text = ModelConfig(
        architecture="qwen3" if qwen3 else "qwen2", vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
        num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=5e6 if qwen3 else 1e6,
        rms_norm_eps=1e-6, qk_norm=qwen3, attention_bias=not qwen3, max_position_embeddings=4096,
        pad_token_id=0, eos_token_id=2,
    ).replace(**text_overrides)
    if qwen3:
        vision = VisionConfig(family="qwen3_vl", depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                              patch_size=16, out_hidden_size=64, hidden_act="gelu_pytorch_tanh",
                              num_position_embeddings=64, deepstack_visual_indexes=(0, 1))
        section = (4, 2, 2)
    else:
        vision = VisionConfig(family="qwen2_5_vl", depth=2, hidden_size=32, intermediate_size=64, num_heads=2,
                              patch_size=14, out_hidden_size=64, hidden_act="silu", window_size=112,
                              fullatt_block_indexes=(1,), tokens_per_second=2)
        section = (2, 3, 3)
    return VLConfig(architecture=architecture, text=text, vision=vision, mrope_section=section)


def make_tiny_vl_checkpoint(
    out_dir: str | os.PathLike[str], architecture: str = "qwen3_vl", seed: int = 0, std: float = 0.1,
    cfg: VLConfig | None = None, corpus: list[str] | None = None,
) -> tuple[VLConfig, Params, Any]:
    """Train a tokenizer with the vision special tokens, build a processor, init random params; save all
    three as one HF directory. Returns (config, params, processor)."""
    out = Path(out_dir)
    cfg = cfg or tiny_vl_config(architecture)
    tok = train_vl_tokenizer(corpus or [SAMPLE_TEXT] * 4, vocab_size=cfg.text.vocab_size)
    if len(tok) > cfg.text.vocab_size:
        raise ValueError(f"tokenizer has {len(tok)} tokens > vocab_size {cfg.text.vocab_size}")
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    cfg = cfg.replace(text=cfg.text.replace(pad_token_id=ids[0], eos_token_id=ids[1]), **vision_token_ids(tok))
    proc = tiny_processor(cfg.architecture, tok, cfg.vision.patch_size, cfg.vision.spatial_merge_size,
                          cfg.vision.temporal_patch_size)
    params = init_params(cfg, jax.random.key(seed), std=std)
    out.mkdir(parents=True, exist_ok=True)
    proc.save_pretrained(str(out))
    export_vl_hf(cfg, params, out, processor_dir=out)
    return cfg, params, proc
