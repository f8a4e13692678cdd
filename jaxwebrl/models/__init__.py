"""Flax decoder family (Llama 3.x, Qwen2/2.5, Qwen3), HuggingFace load/export, GGUF import and tokenizers."""

from typing import Any

from jaxwebrl.models.config import SUPPORTED_ARCHITECTURES, ModelConfig, UnsupportedModelError
from jaxwebrl.models.decoder import (
    Decoder,
    KVCache,
    Params,
    abstract_params,
    forward,
    hidden_states,
    init_cache,
    init_layer_cache,
    init_params,
    lm_head,
    logical_axes,
    positions_from_mask,
)
from jaxwebrl.models.hf_io import CheckpointError, export_hf, load_hf, read_hf_config
from jaxwebrl.models.logprobs import token_logprobs
from jaxwebrl.models.tokenizer import load_tokenizer, train_tokenizer

__all__ = [
    "SUPPORTED_ARCHITECTURES", "ModelConfig", "UnsupportedModelError", "Decoder", "KVCache", "Params",
    "abstract_params", "forward", "hidden_states", "init_cache", "init_layer_cache", "init_params", "lm_head", "logical_axes",
    "positions_from_mask", "CheckpointError", "export_hf", "load_hf", "read_hf_config", "convert_gguf", "load_gguf", "token_logprobs",
    "load_tokenizer", "train_tokenizer",
]


def __getattr__(name: str) -> Any:
    """GGUF import on first use: importing `gguf_io` here would run it twice under `python -m
    jaxwebrl.models.gguf_io` (runpy's warning), and most users never read a GGUF file."""
    if name in ("convert_gguf", "load_gguf"):
        from jaxwebrl.models import gguf_io

        return getattr(gguf_io, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
