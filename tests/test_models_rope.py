"""RoPE against transformers: inverse-frequency tables bit for bit for every scaling type we implement, and
logits at long positions (8k, 32k, 100k) within the fp32 tolerance of the other model tests.

An ulp in a frequency is an angle error proportional to the position; with a table computed in float64 and
cast (as before), the logits of the model below differed from transformers by 1.6e-2 at position 100k."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from jaxwebrl.models import ModelConfig, forward, load_hf
from jaxwebrl.models.config import SUPPORTED_ROPE_TYPES
from jaxwebrl.models.rope import attention_scaling, inverse_frequencies

FP32_TOL = 1e-4  # as tests/test_models_hf.py

ROPES = {
    "default": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "yarn_mscale": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8192, "mscale": 0.707,
                    "mscale_all_dim": 1.0, "beta_fast": 16, "truncate": False},
}


def test_every_supported_rope_type_is_tested():
    assert {p["rope_type"] for p in ROPES.values()} == set(SUPPORTED_ROPE_TYPES)


@pytest.mark.parametrize("name", list(ROPES))
def test_inverse_frequencies_equal_transformers_bit_for_bit(name):
    compared = 0
    for theta in (10000.0, 500000.0, 1e6):
        for head_dim in (16, 64, 80, 128):
            hf = transformers.LlamaConfig(
                hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim, intermediate_size=32,
                num_hidden_layers=1, vocab_size=32, max_position_embeddings=131072,
                rope_parameters={**ROPES[name], "rope_theta": theta})
            reference = LlamaRotaryEmbedding(hf)
            d = hf.to_dict()
            d["architectures"] = ["LlamaForCausalLM"]
            cfg = ModelConfig.from_hf(d)
            ours = inverse_frequencies(cfg)
            assert ours.dtype == np.float32
            np.testing.assert_array_equal(ours, reference.inv_freq.numpy(), err_msg=f"{name} theta={theta} head_dim={head_dim}")
            assert attention_scaling(cfg) == reference.attention_scaling
            compared += ours.size
    assert compared == 3 * (8 + 32 + 40 + 64)


# Tiny models with sharp attention (weights of std 0.15), so the angle at a long position matters.
COMMON = dict(vocab_size=320, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=64, max_position_embeddings=131072, initializer_range=0.15)
MODELS = {
    "llama3": lambda: transformers.LlamaConfig(**COMMON, architectures=["LlamaForCausalLM"], rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=8192)),
    "qwen2_default": lambda: transformers.Qwen2Config(**COMMON, architectures=["Qwen2ForCausalLM"],
                                                      rope_parameters=dict(rope_type="default", rope_theta=1e6)),
    "qwen3_yarn": lambda: transformers.Qwen3Config(**COMMON, architectures=["Qwen3ForCausalLM"], rope_parameters=dict(
        rope_type="yarn", rope_theta=1e6, factor=4.0, original_max_position_embeddings=32768)),
}


@pytest.fixture(scope="module", params=list(MODELS))
def long_context_model(request, tmp_path_factory) -> tuple[str, Path, torch.nn.Module]:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(MODELS[request.param]()).float().eval()
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return request.param, path, model


@pytest.mark.parametrize("start", [8192, 32768, 100000])
def test_logits_at_long_positions_match_transformers(long_context_model, start):
    """A 16-token window placed at `start` through position ids (no 100k-token forward needed)."""
    name, path, model = long_context_model
    cfg, params = load_hf(path)
    tokens = np.random.default_rng(0).integers(0, 320, (1, 16))
    positions = np.arange(start, start + 16)[None]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor(tokens), position_ids=torch.tensor(positions)).logits.numpy()
    logits, _ = forward(cfg, params, jnp.asarray(tokens), jnp.asarray(positions))
    assert np.abs(ref).max() > 1.0  # logits of a size where an angle error shows
    diff = float(np.abs(np.asarray(logits) - ref).max())
    assert diff <= FP32_TOL, f"{name} at position {start}: max |diff| {diff}"
