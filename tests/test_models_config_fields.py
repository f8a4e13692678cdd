"""Every HF config field of our families is implemented, refused at values we do not implement, or listed
as not changing the computation; each refusal is a CheckpointError naming the field, the value and what is
supported."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
import torch
import transformers
from transformers.activations import ACT2FN

from jaxwebrl.models import CheckpointError, ModelConfig, UnsupportedModelError, load_hf
from jaxwebrl.models.activations import ACTIVATIONS
from jaxwebrl.models.config import IMPLEMENTED_FIELDS, NON_COMPUTATIONAL_FIELDS, REFUSED_FIELDS
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

FAMILY_CONFIGS = (transformers.LlamaConfig, transformers.Qwen2Config, transformers.Qwen3Config)


def _fields(config_class: type) -> set[str]:
    """Public attributes of a default instance, its dataclass fields and its serialised keys."""
    instance = config_class()
    names = {k for k in vars(instance) if not k.startswith("_")}
    if dataclasses.is_dataclass(instance):
        names |= {f.name for f in dataclasses.fields(instance) if not f.name.startswith("_")}
    names |= {k for k in instance.to_dict() if not k.startswith("_")}
    return names


def test_field_lists_are_disjoint():
    lists = (IMPLEMENTED_FIELDS, set(REFUSED_FIELDS), NON_COMPUTATIONAL_FIELDS)
    assert all(not (a & b) for i, a in enumerate(lists) for b in lists[i + 1:])


@pytest.mark.parametrize("config_class", FAMILY_CONFIGS, ids=lambda c: c.__name__)
def test_every_family_config_field_is_implemented_refused_or_judged_inert(config_class):
    fields = _fields(config_class)
    assert len(fields) > 25  # the walk saw the config
    unaccounted = sorted(fields - IMPLEMENTED_FIELDS - set(REFUSED_FIELDS) - NON_COMPUTATIONAL_FIELDS)
    assert not unaccounted, (
        f"{config_class.__name__} has field(s) {unaccounted} that jaxwebrl neither implements nor refuses: decide "
        "in jaxwebrl/models/config.py (IMPLEMENTED_FIELDS, REFUSED_FIELDS or NON_COMPUTATIONAL_FIELDS)")


def _hf_dict(architecture: str = "qwen2", **changes) -> dict:
    d = tiny_config(architecture).to_hf()
    d.update(changes)
    return d


# One value per refused field that describes a model we do not implement.
BAD_VALUES = {
    "mlp_bias": True,
    "attention_dropout": 0.1,
    "partial_rotary_factor": 0.5,
    "layer_types": ["full_attention", "sliding_attention"],
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "query_pre_attn_scalar": 256,
    "logits_scaling": 8.0,
    "embedding_multiplier": 12.0,
    "residual_multiplier": 0.22,
    "attention_multiplier": 0.0078125,
    "clip_qkv": 8.0,
    "use_qk_norm": True,
    "attention_chunk_size": 8192,
    "no_rope_layers": [1, 0],
    "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128},
}


def test_every_refused_field_has_a_refusal_test():
    assert set(BAD_VALUES) == set(REFUSED_FIELDS)


@pytest.mark.parametrize("architecture", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("field", sorted(BAD_VALUES))
def test_refused_field_names_field_value_and_supported(field, architecture):
    value = BAD_VALUES[field]
    with pytest.raises(CheckpointError, match=rf"{field}={re.escape(repr(value)) if not isinstance(value, dict) else ''}.*supported"):
        ModelConfig.from_hf(_hf_dict(architecture, **{field: value}))
    ModelConfig.from_hf(_hf_dict(architecture))  # the unmodified config loads


@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_sliding_window_derived_by_transformers_is_refused(architecture):
    # use_sliding_window with max_window_layers=1: transformers makes layer 1 a sliding-window layer.
    cfg = _hf_dict(architecture, use_sliding_window=True, sliding_window=64, max_window_layers=1)
    with pytest.raises(UnsupportedModelError, match=r"layer_types=\['full_attention', 'sliding_attention'\].*use_sliding_window=false"):
        ModelConfig.from_hf(cfg)
    # use_sliding_window without any sliding layer (max_window_layers >= layers) is full attention: loads.
    ModelConfig.from_hf(_hf_dict(architecture, use_sliding_window=True, sliding_window=64, max_window_layers=2))


@pytest.mark.parametrize("rope, message", [
    ({"rope_type": "dynamic", "factor": 2.0}, r"rope_type='dynamic' is not supported; supported: \['default', 'linear', 'llama3', 'yarn'\]"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8,
      "original_max_position_embeddings": 512}, r"rope_type='longrope' is not supported"),
    ({"rope_type": "default", "mrope_section": [2, 3, 3]}, r"rope_parameters\.mrope_section=\[2, 3, 3\] is not supported for rope_type='default'"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "partial_rotary_factor": 0.25},
     r"partial_rotary_factor=0\.25 is not supported; supported: 1\.0"),
], ids=["dynamic", "longrope", "mrope_section", "partial_rotary_in_rope"])
def test_unsupported_rope_is_refused(rope, message):
    with pytest.raises(UnsupportedModelError, match=message):
        ModelConfig.from_hf(_hf_dict("qwen3", rope_scaling=None, rope_parameters={**rope, "rope_theta": 1e6}))


def test_unsupported_activation_is_refused_and_lists_supported():
    with pytest.raises(UnsupportedModelError, match=r"hidden_act='mish' is not implemented; supported: \[.*'gelu'.*'silu'"):
        ModelConfig.from_hf(_hf_dict("llama", hidden_act="mish"))


def test_refusal_through_load_hf(tmp_path):
    make_tiny_checkpoint(tmp_path, tiny_config("qwen3"))
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["final_logit_softcapping"] = 30.0
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"final_logit_softcapping=30\.0 is not supported; supported: null"):
        load_hf(tmp_path)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_equal_transformers(name):
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    ours = np.asarray(ACTIVATIONS[name](x))
    ref = ACT2FN[name](torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_family_defaults_are_transformers_defaults():
    """A config.json that omits fields gets the family's transformers defaults (Qwen3: head_dim 128)."""
    d = {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 64, "hidden_size": 64, "intermediate_size": 32,
         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}
    cfg = ModelConfig.from_hf(d)
    assert (cfg.head_dim, cfg.hidden_act, cfg.rms_norm_eps, cfg.rope_theta) == (128, "silu", 1e-6, 10000.0)
    assert not cfg.attention_bias and not cfg.o_bias and cfg.qk_norm
    q3 = ModelConfig.from_hf({**d, "attention_bias": True, "head_dim": 32})
    assert q3.attention_bias and q3.o_bias  # Qwen3's attention_bias puts a bias on o_proj as well
    q2 = ModelConfig.from_hf({**d, "architectures": ["Qwen2ForCausalLM"], "attention_bias": False})
    assert q2.attention_bias and not q2.o_bias  # Qwen2 always has q/k/v bias, as transformers builds it


# config.json of released checkpoints (as published on the Hub), which must load without a refusal.
RELEASED = {
    "Llama-3.2-1B-Instruct": {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256},
    "Qwen2.5-3B-Instruct": {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
        "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 11008,
        "max_position_embeddings": 32768, "max_window_layers": 70, "model_type": "qwen2", "num_attention_heads": 16,
        "num_hidden_layers": 36, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
        "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936},
    "Qwen3-4B (with the YaRN block its model card suggests)": {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2560, "initializer_range": 0.02,
        "intermediate_size": 9728, "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
        "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936},
}


@pytest.mark.parametrize("name", list(RELEASED))
def test_released_configs_load_and_export_the_same_computation(name):
    cfg = ModelConfig.from_hf(RELEASED[name])
    again = ModelConfig.from_hf(cfg.to_hf())
    assert again.replace(hf_extra=()) == cfg.replace(hf_extra=())
    assert cfg.num_params() > 1e9
