"""Load a local Qwen3-VL / Qwen2.5-VL HuggingFace checkpoint into (sharded) params, and export back.

Loading reads each tensor lazily (one layer at a time, each device its own shard) with the text decoder's
loader machinery (`hf_io`). Tensor names: Qwen3-VL saves `model.language_model.*` and `model.visual.*`;
Qwen2.5-VL saves the legacy `model.layers.*` / `visual.*` names (transformers maps them on load). Both
spellings are accepted on load; export writes what transformers itself writes for the family. Export also
copies the tokenizer and processor files, naming the standard transformers processor class so the
directory loads anywhere transformers (with torchvision) runs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding

from jaxwebrl.models.hf_io import (
    TOKENIZER_FILES, CheckpointError, TensorFiles, flat_params, hf_layout, host_numpy, load_one, unflat_params,
    write_safetensors,
)
from jaxwebrl.models.vl import Params, logical_axes, param_specs
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.sharding import RULES, check_divisible, logical_to_spec

PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "chat_template.jinja", "chat_template.json")
_STANDARD_PROCESSOR = {"qwen3_vl": "Qwen3VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}

Convert = Callable[[np.ndarray], np.ndarray]


def _prefixes(cfg: VLConfig) -> tuple[tuple[str, str], tuple[str, str]]:
    """(text prefix, vision prefix) as exported, then as the other spelling accepted on load."""
    new = ("model.language_model.", "model.visual.")
    legacy = ("model.", "visual.")
    return (new, legacy) if cfg.architecture == "qwen3_vl" else (legacy, new)


def _layout(cfg: VLConfig, text_prefix: str, vision_prefix: str) -> dict[str, tuple[str, Convert, Convert, int]]:
    """our path -> (HF name with {i}, to_ours, to_hf, stacked count: 0 = a single tensor)."""
    v = cfg.vision
    D, H, hd = v.hidden_size, v.num_heads, v.head_dim
    ident: tuple[Convert, Convert] = (lambda w: w, lambda w: w)
    transpose: tuple[Convert, Convert] = (lambda w: w.T, lambda w: w.T)
    out: dict[str, tuple[str, Convert, Convert, int]] = {}
    for ours, (hf, to_ours, to_hf) in hf_layout(cfg.text).items():
        name = hf if hf.startswith("lm_head") else text_prefix + hf[len("model."):]
        out["text/" + ours] = (name, to_ours, to_hf, cfg.text.num_layers if ours.startswith("layers/") else 0)
    vp, L = vision_prefix, v.depth
    patch_shape = (D, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size)
    out["vision/patch_w"] = (vp + "patch_embed.proj.weight", lambda w: w.reshape(D, -1).T,
                             lambda w: w.T.reshape(patch_shape), 0)
    blk = vp + "blocks.{i}."
    blocks = {
        "norm1": (blk + "norm1.weight", *ident), "norm2": (blk + "norm2.weight", *ident),
        "wqkv": (blk + "attn.qkv.weight", lambda w: w.T.reshape(D, 3, H, hd), lambda w: w.reshape(D, 3 * D).T),
        "bqkv": (blk + "attn.qkv.bias", lambda b: b.reshape(3, H, hd), lambda b: b.reshape(3 * D)),
        "wo": (blk + "attn.proj.weight", lambda w: w.T.reshape(H, hd, D), lambda w: w.reshape(D, D).T),
        "bo": (blk + "attn.proj.bias", *ident),
    }
    if cfg.architecture == "qwen3_vl":
        out["vision/patch_b"] = (vp + "patch_embed.proj.bias", *ident, 0)
        out["vision/pos_embed"] = (vp + "pos_embed.weight", *ident, 0)
        blocks.update({
            "norm1_b": (blk + "norm1.bias", *ident), "norm2_b": (blk + "norm2.bias", *ident),
            "fc1": (blk + "mlp.linear_fc1.weight", *transpose), "fc1_b": (blk + "mlp.linear_fc1.bias", *ident),
            "fc2": (blk + "mlp.linear_fc2.weight", *transpose), "fc2_b": (blk + "mlp.linear_fc2.bias", *ident),
        })
        merger = {"norm": "norm.weight", "norm_b": "norm.bias", "fc1": "linear_fc1.weight",
                  "fc1_b": "linear_fc1.bias", "fc2": "linear_fc2.weight", "fc2_b": "linear_fc2.bias"}
    else:
        for ours, hf in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            blocks[ours] = (blk + f"mlp.{hf}.weight", *transpose)
            blocks["b" + ours[1:]] = (blk + f"mlp.{hf}.bias", *ident)
        merger = {"norm": "ln_q.weight", "fc1": "mlp.0.weight", "fc1_b": "mlp.0.bias", "fc2": "mlp.2.weight",
                  "fc2_b": "mlp.2.bias"}
    for ours, (hf, a, b) in blocks.items():
        out["vision/blocks/" + ours] = (hf, a, b, L)
    for ours, hf in merger.items():
        conv = transpose if ours in ("fc1", "fc2") else ident
        out["vision/merger/" + ours] = (vp + "merger." + hf, *conv, 0)
        if cfg.vision.deepstack_visual_indexes:
            out["vision/deepstack/" + ours] = (vp + "deepstack_merger_list.{i}." + hf, *conv,
                                               len(cfg.vision.deepstack_visual_indexes))
    return out


def _names(hf: str, count: int) -> list[str]:
    return [hf.format(i=i) for i in range(count)] if count else [hf]


def hf_tensor_names(cfg: VLConfig) -> list[str]:
    """Every HF tensor name export writes for this config, in a stable order."""
    (tp, vp), _ = _prefixes(cfg)
    return [n for hf, _, _, count in _layout(cfg, tp, vp).values() for n in _names(hf, count)]


def read_vl_config(path: str | os.PathLike[str], **overrides: Any) -> VLConfig:
    cfg_file = Path(path) / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"{path}: no config.json; is this a HuggingFace model directory?")
    return VLConfig.from_hf(json.loads(cfg_file.read_text()), **overrides)


def load_vl_hf(
    path: str | os.PathLike[str], mesh: Mesh | None = None, rules: dict[str, Any] = RULES, **config_overrides: Any,
) -> tuple[VLConfig, Params]:
    """config.json + safetensors (single or sharded with an index) -> params placed with their logical-axis
    shardings on `mesh` (default device without one). Overrides set numerics (dtype, param_dtype, remat,
    scan_layers). Missing, extra or mis-shaped tensors raise a CheckpointError naming the tensor."""
    path = Path(path)
    cfg = read_vl_config(path, **config_overrides)
    files = TensorFiles(path)
    if cfg.text.tie_word_embeddings:
        files.where.pop("lm_head.weight", None)
    present = set(files.where)
    # Pick the spelling the checkpoint uses (by its embedding tensor), then require every tensor in it.
    spellings = [s for s in _prefixes(cfg) if s[0] + "embed_tokens.weight" in present] or [_prefixes(cfg)[0]]
    layout = _layout(cfg, *spellings[0])
    expected = {n for hf, _, _, count in layout.values() for n in _names(hf, count)}
    missing = sorted(expected - present)
    if missing:
        raise CheckpointError(f"{path}: missing tensor(s) {missing[:5]}{' ...' if len(missing) > 5 else ''} "
                              f"for the {cfg.architecture} config in config.json")
    extra = sorted(n for n in present - expected if not n.endswith("inv_freq"))
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor(s) {extra[:5]} not used by the {cfg.architecture} "
                              "config; check config.json (depth, deepstack_visual_indexes, layers)")
    specs, axes = flat_params(param_specs(cfg)), flat_params(logical_axes(cfg))
    dtype = jnp.dtype(cfg.param_dtype)
    out: dict[str, jax.Array] = {}
    for ours, (hf, to_ours, to_hf, count) in layout.items():
        spec = specs[ours]
        names = _names(hf, count)
        want = tuple(to_hf(np.zeros(spec.shape[1:] if count else spec.shape, np.int8)).shape)
        for n in names:
            if files.shape(n) != want:
                raise CheckpointError(f"{path}: tensor {n!r} has shape {list(files.shape(n))}, expected "
                                      f"{list(want)} from config.json")
        sharding = (NamedSharding(mesh, logical_to_spec(axes[ours], rules)) if mesh is not None
                    else jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))
        if mesh is not None:
            check_divisible(ours, spec.shape, sharding.spec, mesh)
        out[ours] = load_one(files, names, to_ours, bool(count), spec.shape, dtype, sharding)
    return cfg, unflat_params(out)


def iter_vl_hf_tensors(cfg: VLConfig, params: Params, dtype: str | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(HF name, host array) pairs in export spelling, one layer slice at a time."""
    name = dtype or cfg.param_dtype
    out_dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    flat = flat_params(params)
    (tp, vp), _ = _prefixes(cfg)
    for ours, (hf, _, to_hf, count) in _layout(cfg, tp, vp).items():
        value = host_numpy(flat[ours])
        for i, n in enumerate(_names(hf, count)):
            yield n, np.ascontiguousarray(to_hf(value[i] if count else value).astype(out_dtype))


def export_vl_hf(
    cfg: VLConfig, params: Params, out_dir: str | os.PathLike[str], processor_dir: str | os.PathLike[str] | None = None,
    dtype: str | None = None, max_shard_bytes: int = 2 * 1024**3,
) -> Path:
    """Write a HuggingFace VL model directory (config, safetensors, tokenizer and processor files from
    `processor_dir`). Only process 0 writes; all take part in gathering sharded params."""
    out = Path(out_dir)
    if not write_safetensors(out, iter_vl_hf_tensors(cfg, params, dtype), max_shard_bytes):
        return out
    hf_cfg = cfg.to_hf()
    hf_cfg["dtype"] = dtype or cfg.param_dtype
    (out / "config.json").write_text(json.dumps(hf_cfg, indent=2))
    gen: dict[str, Any] = {"do_sample": False}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in hf_cfg["text_config"]:
            gen[key] = hf_cfg["text_config"][key]
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    if processor_dir is not None and Path(processor_dir).resolve() != out.resolve():
        for fname in TOKENIZER_FILES + PROCESSOR_FILES:
            src = Path(processor_dir) / fname
            if src.exists():
                shutil.copy2(src, out / fname)
    for fname in ("preprocessor_config.json", "processor_config.json"):
        if (out / fname).exists():  # name the standard class, not our torchvision-free subclass
            data = json.loads((out / fname).read_text())
            if data.get("processor_class") not in (None, _STANDARD_PROCESSOR[cfg.architecture]):
                data["processor_class"] = _STANDARD_PROCESSOR[cfg.architecture]
                (out / fname).write_text(json.dumps(data, indent=2))
    return out
