"""Import a GGUF file (llama.cpp's format) as our params or as a HuggingFace checkpoint directory.

Many models circulate only as GGUF. The `gguf` package (llama.cpp's own Python reader) parses the file and
dequantizes its tensors; this module maps the metadata to a HF config.json (validated by
`ModelConfig.from_hf`, so a GGUF loads as exactly the model that config describes or is refused), the
GGUF tensor names to HF's through gguf's own `TensorNameMap`, and undoes the one layout change llama.cpp's
converter makes: for the `llama` architecture it stores the rows of the Q and K projections permuted
(each head's two RoPE halves interleaved). Qwen2 and Qwen3 are stored unpermuted. The tokenizer and chat
template come from the GGUF metadata through transformers' GGUF tokenizer converter.

What cannot be represented exactly (another architecture, a tensor type outside SUPPORTED_TENSOR_TYPES, a
metadata key that changes the computation) is refused with a CheckpointError naming it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import gguf
import ml_dtypes
import numpy as np
from gguf import GGMLQuantizationType as Q
from jax.sharding import Mesh

from jaxwebrl.models.config import CheckpointError, ModelConfig, UnsupportedModelError
from jaxwebrl.models.decoder import Params
from jaxwebrl.models.hf_io import hf_tensor_names, load_params, write_config_files, write_safetensors
from jaxwebrl.sharding import RULES

# GGUF general.architecture -> the HF architecture it converts to.
SUPPORTED_GGUF_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}
_MODEL_ARCH = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items() if name in SUPPORTED_GGUF_ARCHITECTURES}

# Tensor types we dequantize (each checked against a hand-written decoder of its block format in
# tests/test_models_gguf.py). Q4_K_M and Q5_K_M files mix Q4_K / Q5_K with Q6_K (and some Q8_0 / Q5_0).
SUPPORTED_TENSOR_TYPES: frozenset[Q] = frozenset({
    Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K,
})

# Architecture metadata keys ("{arch}.<key>") we read; any other one is refused, since llama.cpp reads it to
# change the computation (logit or embedding scales, sliding windows, soft-capping, experts, ...).
_READ_KEYS = frozenset({
    "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
    "attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
    "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
    "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
    "rope.scaling.finetuned",  # bookkeeping: whether the model was fine-tuned at the scaled length
    "expert_count", "expert_used_count",  # older converters write 0 for dense models; nonzero is refused
})
_FIX = "convert the model from its original HuggingFace checkpoint instead"


def _open_reader(path: Path) -> gguf.GGUFReader:
    if not path.is_file():
        raise CheckpointError(f"{path}: no such GGUF file")
    try:
        return gguf.GGUFReader(path)
    except (ValueError, OSError) as e:  # bad magic, truncated file, unknown value type
        raise CheckpointError(f"{path}: not a readable GGUF file ({e}); re-download it") from e


def _value(field: Any) -> Any:
    """A metadata value as Python data; float32 numbers as their shortest decimal (1e-05, not 9.99e-06)."""
    value = field.contents()
    if field.types and field.types[-1] == gguf.GGUFValueType.FLOAT32:
        value = [float(str(np.float32(v))) for v in value] if isinstance(value, list) else float(str(np.float32(value)))
    return value


class GGUFCheckpoint:
    """A GGUF file seen as a HF checkpoint: `hf_config` (a config.json dict) and the tensors under their HF
    names (`where`, `shape`, `read`: the `hf_io.TensorSource` that `load_params` reads)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.reader = _open_reader(self.path)
        self.meta = {k: f for k, f in self.reader.fields.items() if not k.startswith("GGUF.")}
        self.arch = self._architecture()
        self.by_gguf_name = {t.name: t for t in self.reader.tensors}
        self._check_tensor_types()
        self.hf_config = self._hf_config()
        self.where = self._hf_names(ModelConfig.from_hf(self.hf_config))

    # ---- metadata -> config.json -----------------------------------------------------------------

    def _get(self, key: str, default: Any = None) -> Any:
        field = self.meta.get(key.format(arch=self.arch))
        return default if field is None else _value(field)

    def _need(self, key: str) -> Any:
        value = self._get(key)
        if value is None:
            raise CheckpointError(f"{self.path}: GGUF metadata lacks {key.format(arch=self.arch)!r}, which a "
                                  f"{self.arch} model needs; the file is incomplete, re-download or re-convert it")
        return value

    def _architecture(self) -> str:
        field = self.meta.get(gguf.Keys.General.ARCHITECTURE)
        arch = None if field is None else _value(field)
        if arch not in SUPPORTED_GGUF_ARCHITECTURES:
            raise UnsupportedModelError(
                f"{self.path}: GGUF general.architecture={arch!r} is not supported; supported: "
                f"{sorted(SUPPORTED_GGUF_ARCHITECTURES)}")
        splits = _value(self.meta[gguf.Keys.Split.LLM_KV_SPLIT_COUNT]) if gguf.Keys.Split.LLM_KV_SPLIT_COUNT in self.meta else 1
        if splits > 1:
            raise CheckpointError(f"{self.path}: one part of a GGUF split into {splits} files; merge the parts first "
                                  f"(llama.cpp: llama-gguf-split --merge FIRST_PART OUT.gguf)")
        return arch

    def _check_tensor_types(self) -> None:
        for t in self.reader.tensors:
            if t.tensor_type not in SUPPORTED_TENSOR_TYPES:
                raise CheckpointError(
                    f"{self.path}: tensor {t.name!r} has GGUF type {t.tensor_type.name}, which is not supported; "
                    f"supported: {sorted(q.name for q in SUPPORTED_TENSOR_TYPES)}. Re-quantize the model to one "
                    f"of these (llama.cpp: llama-quantize --allow-requantize IN OUT Q8_0) or {_FIX}")

    def _hf_config(self) -> dict[str, Any]:
        prefix = f"{self.arch}."
        for key, field in self.meta.items():
            if key.startswith(prefix) and key[len(prefix):] not in _READ_KEYS:
                raise UnsupportedModelError(
                    f"{self.path}: GGUF metadata {key}={_value(field)!r} is not supported (llama.cpp reads it to "
                    f"change how a {self.arch} model computes); {_FIX}")
        for key in (gguf.Keys.LLM.EXPERT_COUNT, gguf.Keys.LLM.EXPERT_USED_COUNT):
            if self._get(key, 0):
                raise UnsupportedModelError(f"{self.path}: GGUF metadata {key.format(arch=self.arch)}="
                                            f"{self._get(key)} (mixture of experts) is not supported; supported: 0 (dense)")
        heads = self._need(gguf.Keys.Attention.HEAD_COUNT)
        kv_heads = self._get(gguf.Keys.Attention.HEAD_COUNT_KV, heads)
        for name, value in (("head_count", heads), ("head_count_kv", kv_heads)):
            if isinstance(value, list):
                raise UnsupportedModelError(f"{self.path}: GGUF metadata {self.arch}.attention.{name}={value} "
                                            f"differs per layer; supported: one number for all layers")
        hidden = self._need(gguf.Keys.LLM.EMBEDDING_LENGTH)
        head_dim = self._get(gguf.Keys.Attention.KEY_LENGTH, hidden // heads)
        value_dim = self._get(gguf.Keys.Attention.VALUE_LENGTH, head_dim)
        if value_dim != head_dim:
            raise UnsupportedModelError(f"{self.path}: GGUF metadata {self.arch}.attention.value_length={value_dim} "
                                        f"differs from key_length={head_dim}; supported: equal key and value head sizes")
        rope_dims = self._get(gguf.Keys.Rope.DIMENSION_COUNT, head_dim)
        if rope_dims != head_dim:
            raise UnsupportedModelError(f"{self.path}: GGUF metadata {self.arch}.rope.dimension_count={rope_dims} is "
                                        f"not the head size {head_dim}; supported: rotary embedding over the whole head")
        embed = self.by_gguf_name.get("token_embd.weight")
        if embed is None:
            raise CheckpointError(f"{self.path}: no token_embd.weight tensor; the file is incomplete, re-download it")
        vocab = int(embed.shape[-1])
        if self._get(gguf.Keys.LLM.VOCAB_SIZE, vocab) != vocab:
            raise CheckpointError(f"{self.path}: GGUF metadata {self.arch}.vocab_size={self._get(gguf.Keys.LLM.VOCAB_SIZE)} "
                                  f"but token_embd.weight has {vocab} rows; the file is inconsistent, re-convert it")
        hf: dict[str, Any] = dict(
            architectures=[SUPPORTED_GGUF_ARCHITECTURES[self.arch]],
            model_type=self.arch,
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=self._need(gguf.Keys.LLM.FEED_FORWARD_LENGTH),
            num_hidden_layers=self._need(gguf.Keys.LLM.BLOCK_COUNT),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=self._need(gguf.Keys.Attention.LAYERNORM_RMS_EPS),
            max_position_embeddings=self._need(gguf.Keys.LLM.CONTEXT_LENGTH),
            rope_parameters={"rope_theta": float(self._get(gguf.Keys.Rope.FREQ_BASE, 10000.0)), **self._rope_scaling()},
            hidden_act="silu",  # llama.cpp's llama, qwen2 and qwen3 graphs use SiLU-gated MLPs
            tie_word_embeddings="output.weight" not in self.by_gguf_name,
            attention_bias="blk.0.attn_q.bias" in self.by_gguf_name,
        )
        if self.arch in ("qwen2", "qwen3"):
            hf["use_sliding_window"] = False
        for hf_key, gguf_key in (("bos_token_id", gguf.Keys.Tokenizer.BOS_ID), ("eos_token_id", gguf.Keys.Tokenizer.EOS_ID),
                                 ("pad_token_id", gguf.Keys.Tokenizer.PAD_ID)):
            if self._get(gguf_key) is not None:
                hf[hf_key] = self._get(gguf_key)
        return hf

    def _rope_scaling(self) -> dict[str, Any]:
        kind = self._get(gguf.Keys.Rope.SCALING_TYPE, "none")
        factor = self._get(gguf.Keys.Rope.SCALING_FACTOR)
        if kind == "none":
            return {"rope_type": "default"}
        if kind == "linear":
            return {"rope_type": "linear", "factor": float(factor)}
        if kind == "yarn":
            original = self._need(gguf.Keys.Rope.SCALING_ORIG_CTX_LEN)
            return {"rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": original}
        raise UnsupportedModelError(f"{self.path}: GGUF metadata {self.arch}.rope.scaling.type={kind!r} is not "
                                    f"supported; supported: ['linear', 'none', 'yarn']")

    def generation_eos(self) -> list[int]:
        """End-of-sequence ids for generation: eos and, where llama.cpp names them, end-of-turn / end-of-message
        (an instruct model's turn ends at eot, e.g. Llama 3's <|eot_id|>, while eos ends the text)."""
        ids = [self._get(k) for k in (gguf.Keys.Tokenizer.EOS_ID, gguf.Keys.Tokenizer.EOT_ID, gguf.Keys.Tokenizer.EOM_ID)]
        return list(dict.fromkeys(i for i in ids if i is not None))

    # ---- tensors under HF names ------------------------------------------------------------------

    def _hf_names(self, cfg: ModelConfig) -> dict[str, Any]:
        """HF tensor name -> GGUF tensor, for every tensor `cfg` needs; GGUF tensors left over are refused."""
        names = gguf.get_tensor_name_map(_MODEL_ARCH[self.arch], cfg.num_layers)
        where: dict[str, Any] = {}
        for hf_name in hf_tensor_names(cfg):
            base, suffix = hf_name.rsplit(".", 1)
            gguf_name = f"{names.get_name(base)}.{suffix}"
            if gguf_name not in self.by_gguf_name:
                raise CheckpointError(f"{self.path}: missing tensor {gguf_name!r} (HF {hf_name!r}) that the metadata's "
                                      f"{self.arch} config needs; the file is incomplete or its metadata is wrong")
            where[hf_name] = self.by_gguf_name[gguf_name]
        used = {t.name for t in where.values()}
        extra = sorted(set(self.by_gguf_name) - used)
        if "rope_freqs.weight" in extra:
            raise UnsupportedModelError(
                f"{self.path}: tensor 'rope_freqs.weight' (llama.cpp's form of Llama 3.1+ RoPE scaling) is not "
                f"supported: its rope_parameters cannot be read back from the frequency factors; {_FIX}")
        if extra:
            raise CheckpointError(f"{self.path}: unexpected tensor(s) {extra[:5]} not used by a {self.arch} model "
                                  f"with this metadata; {_FIX}")
        return where

    def shape(self, name: str) -> tuple[int, ...]:
        """The HF (PyTorch) shape: GGUF lists dimensions innermost first."""
        return tuple(int(d) for d in reversed(self.where[name].shape))

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` dequantized to float32 in HF layout (Q/K rows un-permuted for llama)."""
        t = self.where[name]
        w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(self.shape(name))
        if self.arch == "llama" and ".self_attn.q_proj." in name:
            w = unpermute_rope_rows(w, self.hf_config["num_attention_heads"])
        elif self.arch == "llama" and ".self_attn.k_proj." in name:
            w = unpermute_rope_rows(w, self.hf_config["num_key_value_heads"])
        return np.asarray(w, np.float32)

    def hf_tensors(self, dtype: str = "float32") -> Iterator[tuple[str, np.ndarray]]:
        out = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
        for name in self.where:
            yield name, np.ascontiguousarray(self.read(name).astype(out))


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row order: within each head it interleaves the two halves that HF's rotate_half
    RoPE pairs up (row 2j+c of a GGUF head is row c*hd/2+j of the HF head)."""
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_gguf(
    path: str | os.PathLike[str],
    mesh: Mesh | None = None,
    rules: dict[str, Any] = RULES,
    **config_overrides: Any,
) -> tuple[ModelConfig, Params]:
    """A GGUF file straight into params (dequantized, placed with their shardings on `mesh`), like `load_hf`.
    `config_overrides` set numerics (dtype, param_dtype, remat, scan_layers)."""
    ckpt = GGUFCheckpoint(path)
    cfg = ModelConfig.from_hf(ckpt.hf_config, **config_overrides)
    return cfg, load_params(cfg, ckpt, ckpt.path, mesh, rules, described_by="the GGUF metadata")


def gguf_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The fast tokenizer (with its chat template) that the GGUF metadata describes, built by transformers'
    GGUF tokenizer converter."""
    from transformers import AutoTokenizer

    path = Path(path)
    try:
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:  # the converter raises KeyError/ValueError/NotImplementedError for models it lacks
        reader = _open_reader(path)
        field = reader.fields.get(gguf.Keys.Tokenizer.MODEL)
        model = None if field is None else _value(field)
        raise CheckpointError(f"{path}: transformers cannot build a tokenizer from the GGUF metadata "
                              f"(tokenizer.ggml.model={model!r}): {e}; save the original tokenizer files beside "
                              f"the converted weights instead") from e


def convert_gguf(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    dtype: str = "float32",
    max_shard_bytes: int = 2 * 1024**3,
) -> Path:
    """Write a HF checkpoint directory (config.json, generation_config.json, safetensors, tokenizer files
    with the chat template) from a GGUF file; `load_hf` and transformers load it. Quantized weights are
    dequantized exactly into float32 (`dtype="bfloat16"` rounds them). The directory appears complete or
    not at all: it is written beside `out_dir` and renamed into place. Holds the weights in host memory."""
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype={dtype!r}: use 'float32', 'bfloat16' or 'float16'")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty; remove it or pick another directory")
    ckpt = GGUFCheckpoint(path)
    cfg = ModelConfig.from_hf(ckpt.hf_config)
    tokenizer = gguf_tokenizer(ckpt.path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write_safetensors(tmp, ckpt.hf_tensors(dtype), max_shard_bytes)
        eos = ckpt.generation_eos()
        write_config_files(cfg, tmp, dtype, {"eos_token_id": eos[0] if len(eos) == 1 else eos} if eos else None)
        tokenizer.save_pretrained(str(tmp))
        umask = os.umask(0)
        os.umask(umask)
        for f in [tmp, *tmp.iterdir()]:  # mkdtemp and safetensors make them private; a cache is shared
            f.chmod((0o777 if f.is_dir() else 0o666) & ~umask)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxwebrl.models.gguf_io",
                                 description="Convert a GGUF file (llama, qwen2, qwen3) to a HuggingFace checkpoint directory.")
    ap.add_argument("gguf", help="the .gguf file")
    ap.add_argument("out", help="directory to write (must not exist or be empty)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = ap.parse_args(argv)
    try:
        print(convert_gguf(args.gguf, args.out, args.dtype))
    except (CheckpointError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
