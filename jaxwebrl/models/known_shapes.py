"""Architectures of the checkpoints the paper configs name, for dry runs where the checkpoint is absent.

A dry run compiles the full-size train step against abstract params: it needs the model's shape, not its
weights. When `model.source='hf'` points at a directory without config.json, the checkpoint's name (the
directory's basename) is looked up here. Values are those of the published config.json files (Qwen2.5,
Qwen3 and Llama-3.1 model cards on HuggingFace); a real run reads the checkpoint's own config.json instead.
"""

from __future__ import annotations

import os
from typing import Any

_QWEN25 = dict(architecture="qwen2", vocab_size=151936, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6,
               attention_bias=True, max_position_embeddings=32768, eos_token_id=151645, pad_token_id=151643)
_QWEN3 = dict(architecture="qwen3", vocab_size=151936, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6,
              qk_norm=True, max_position_embeddings=40960, eos_token_id=151645, pad_token_id=151643)

KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen2.5-0.5B": dict(_QWEN25, hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
                         num_kv_heads=2, head_dim=64, tie_word_embeddings=True),
    "Qwen2.5-1.5B": dict(_QWEN25, hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12,
                         num_kv_heads=2, tie_word_embeddings=True),
    "Qwen2.5-3B": dict(_QWEN25, hidden_size=2048, intermediate_size=11008, num_layers=36, num_heads=16,
                       num_kv_heads=2, tie_word_embeddings=True),
    "Qwen2.5-7B": dict(_QWEN25, vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                       num_heads=28, num_kv_heads=4, tie_word_embeddings=False),
    "Qwen3-1.7B": dict(_QWEN3, hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16, num_kv_heads=8,
                       tie_word_embeddings=True),
    "Qwen3-4B": dict(_QWEN3, hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32, num_kv_heads=8,
                     tie_word_embeddings=True),
    "Qwen3-8B": dict(_QWEN3, hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32, num_kv_heads=8,
                     tie_word_embeddings=False),
}
KNOWN_SHAPES["Llama-3.1-8B"] = dict(
    architecture="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32, num_heads=32,
    num_kv_heads=8, head_dim=128, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
    max_position_embeddings=131072, eos_token_id=128009, bos_token_id=128000,
    rope_scaling=(("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                  ("original_max_position_embeddings", 8192), ("rope_type", "llama3")))
KNOWN_SHAPES["Llama-3.2-1B"] = dict(
    architecture="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_layers=16, num_heads=32,
    num_kv_heads=8, head_dim=64, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
    max_position_embeddings=131072, eos_token_id=128001, bos_token_id=128000,
    rope_scaling=(("factor", 32.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                  ("original_max_position_embeddings", 8192), ("rope_type", "llama3")))
# Names the configs use for checkpoints they produce or fine-tune, by the model they start from.
ALIASES = {
    "Qwen2.5-3B-Instruct": "Qwen2.5-3B",
    "Qwen2.5-7B-Instruct": "Qwen2.5-7B",
    "browseragent-sft": "Qwen2.5-7B",  # BrowserAgent's stage-1 SFT of Qwen2.5-7B-Instruct (sft_browseragent.py)
    "Llama-3.1-8B-Instruct": "Llama-3.1-8B",  # NNetNav's explorer and SFT model (sft_nnetnav.py)
}


def known_shape(path: str) -> dict[str, Any] | None:
    """ModelConfig fields of the checkpoint named by `path`'s basename, or None when it is not listed."""
    name = os.path.basename(os.path.normpath(path))
    name = ALIASES.get(name, name)
    return dict(KNOWN_SHAPES[name]) if name in KNOWN_SHAPES else None
