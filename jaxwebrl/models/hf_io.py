"""Load a local HuggingFace checkpoint straight into sharded device arrays, and export params back.

Loading reads each tensor lazily with `safetensors.safe_open(...).get_slice` inside
`jax.make_array_from_callback`, so every device (on every host) reads only its own shard: the whole model
is never materialised on one device. Export writes config.json, generation_config.json, safetensors
(sharded with an index above `max_shard_bytes`) and the tokenizer files, which `transformers` and SGLang
load.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, NamedSharding
from safetensors import safe_open
from safetensors.numpy import save_file

from jaxwebrl.models.config import CheckpointError, ModelConfig
from jaxwebrl.models.decoder import Params, logical_axes, param_specs
from jaxwebrl.sharding import logical_to_spec, check_divisible, RULES

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
)


# ---- names ---------------------------------------------------------------------------------------
# Each entry: our path -> (HF name with {i} for the layer, to_ours, to_hf). Matrices are transposed and
# split into heads; layer tensors are stacked on axis 0.

def hf_layout(cfg: ModelConfig) -> dict[str, tuple[str, Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]]:
    D, H, K, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    ident = (lambda w: w, lambda w: w)

    def heads_in(n: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        return (lambda w: w.T.reshape(D, n, hd), lambda w: w.reshape(D, n * hd).T)

    def bias(n: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        return (lambda b: b.reshape(n, hd), lambda b: b.reshape(n * hd))

    transpose = (lambda w: w.T, lambda w: w.T)
    pre = "model.layers.{i}."
    layout = {
        "embed": ("model.embed_tokens.weight", *ident),
        "final_norm": ("model.norm.weight", *ident),
        "layers/attn_norm": (pre + "input_layernorm.weight", *ident),
        "layers/mlp_norm": (pre + "post_attention_layernorm.weight", *ident),
        "layers/wq": (pre + "self_attn.q_proj.weight", *heads_in(H)),
        "layers/wk": (pre + "self_attn.k_proj.weight", *heads_in(K)),
        "layers/wv": (pre + "self_attn.v_proj.weight", *heads_in(K)),
        "layers/wo": (pre + "self_attn.o_proj.weight", lambda w: w.T.reshape(H, hd, D), lambda w: w.reshape(H * hd, D).T),
        "layers/w_gate": (pre + "mlp.gate_proj.weight", *transpose),
        "layers/w_up": (pre + "mlp.up_proj.weight", *transpose),
        "layers/w_down": (pre + "mlp.down_proj.weight", *transpose),
        "layers/bq": (pre + "self_attn.q_proj.bias", *bias(H)),
        "layers/bk": (pre + "self_attn.k_proj.bias", *bias(K)),
        "layers/bv": (pre + "self_attn.v_proj.bias", *bias(K)),
        "layers/bo": (pre + "self_attn.o_proj.bias", *ident),
        "layers/q_norm": (pre + "self_attn.q_norm.weight", *ident),
        "layers/k_norm": (pre + "self_attn.k_norm.weight", *ident),
        "lm_head": ("lm_head.weight", *transpose),
    }
    present = set(flat_params(param_specs(cfg)))
    return {k: v for k, v in layout.items() if k in present}


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested params dict as {"a/b/c": leaf} (the paths the HF layouts name)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flat_params(v, f"{prefix}{k}/"))
        else:
            out[prefix + k] = v
    return out


def unflat_params(flat: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `flat_params`."""
    out: dict[str, Any] = {}
    for path, v in flat.items():
        node = out
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return out


def hf_tensor_names(cfg: ModelConfig) -> list[str]:
    """Every HF tensor name this config expects, in a stable order."""
    names = []
    for ours, (hf, _, _) in hf_layout(cfg).items():
        if ours.startswith("layers/"):
            names += [hf.format(i=i) for i in range(cfg.num_layers)]
        else:
            names.append(hf)
    return names


# ---- loading -------------------------------------------------------------------------------------

class TensorFiles:
    """Maps HF tensor names to the safetensors file holding them (single file or sharded with index)."""

    def __init__(self, path: Path):
        index = path / "model.safetensors.index.json"
        if index.exists():
            self.where = _checked_index(path, index)
        else:
            files = sorted(path.glob("*.safetensors"))
            if not files:
                raise CheckpointError(f"{path}: no *.safetensors files and no model.safetensors.index.json")
            self.where = {}
            for f in files:
                with safe_open(f, framework="numpy") as h:
                    for name in h.keys():
                        self.where[name] = f
        self._handles: dict[Path, Any] = {}

    def handle(self, name: str) -> Any:
        f = self.where[name]
        if f not in self._handles:
            self._handles[f] = safe_open(f, framework="numpy")
        return self._handles[f]

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.handle(name).get_slice(name).get_shape())

    def read(self, name: str) -> np.ndarray:
        return self.handle(name).get_tensor(name)


def _checked_index(path: Path, index: Path) -> dict[str, Path]:
    """The index's tensor -> file map, after checking every shard exists and holds the tensors listed for it
    (only the shard headers are read). A mismatch is a CheckpointError naming the file or tensor."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index}: not a safetensors index (needs a 'weight_map' object): {e}; re-export the checkpoint") from e
    by_file: dict[str, list[str]] = {}
    for name, fname in weight_map.items():
        by_file.setdefault(fname, []).append(name)
    for fname, names in sorted(by_file.items()):
        shard = path / fname
        if not shard.is_file():
            raise CheckpointError(
                f"{index.name} maps {len(names)} tensor(s) (e.g. {names[0]!r}) to shard {fname!r}, which is missing "
                f"from {path}; copy the missing shard or re-download the checkpoint"
            )
        try:
            with safe_open(shard, framework="numpy") as h:
                stored = set(h.keys())
        except Exception as e:  # safetensors raises its own SafetensorError for a damaged header
            raise CheckpointError(f"{shard}: not a readable safetensors file ({e}); re-download this shard") from e
        absent = sorted(set(names) - stored)
        if absent:
            raise CheckpointError(
                f"{index.name} lists tensor(s) {absent[:5]}{' ...' if len(absent) > 5 else ''} in shard {fname!r}, "
                f"which does not contain them; the index and the shards are from different checkpoints: "
                f"re-download or re-export them together"
            )
    return {name: path / f for name, f in weight_map.items()}


def read_hf_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"{path}: no config.json; is this a HuggingFace model directory?")
    return json.loads(cfg_file.read_text())


def load_hf(
    path: str | os.PathLike[str],
    mesh: Mesh | None = None,
    rules: dict[str, Any] = RULES,
    **config_overrides: Any,
) -> tuple[ModelConfig, Params]:
    """Read config.json + safetensors into params placed with their logical-axis shardings on `mesh`.

    Without a mesh the params land on the default device. `config_overrides` set numerics (dtype,
    param_dtype, remat, scan_layers). Missing, extra or mis-shaped tensors raise a CheckpointError
    naming the tensor.
    """
    path = Path(path)
    cfg = ModelConfig.from_hf(read_hf_config(path), **config_overrides)
    return cfg, load_params(cfg, TensorFiles(path), path, mesh, rules)


class TensorSource(Protocol):
    """Where `load_params` reads HF-named tensors from: safetensors files (`TensorFiles`) or a GGUF file
    (`models.gguf_io`). `where` maps each stored HF tensor name to its location."""

    where: dict[str, Any]

    def shape(self, name: str) -> tuple[int, ...]: ...

    def read(self, name: str) -> np.ndarray: ...


def load_params(
    cfg: ModelConfig,
    files: TensorSource,
    origin: str | os.PathLike[str],
    mesh: Mesh | None = None,
    rules: dict[str, Any] = RULES,
    described_by: str = "config.json",
) -> Params:
    """The params of `cfg` read from HF-named tensors, each placed with its logical-axis sharding on `mesh`
    (the default device without one). Missing, extra or mis-shaped tensors raise a CheckpointError naming
    the tensor, `origin` (the checkpoint's path) and `described_by` (where `cfg` came from)."""
    path = origin
    layout = hf_layout(cfg)
    expected = set(hf_tensor_names(cfg))
    if cfg.tie_word_embeddings:
        files.where.pop("lm_head.weight", None)  # some tied checkpoints still store a copy
    missing = sorted(expected - set(files.where))
    if missing:
        raise CheckpointError(f"{path}: missing tensor(s) {missing[:5]}{' ...' if len(missing) > 5 else ''} for {cfg.architecture} config")
    extra = sorted(n for n in set(files.where) - expected if not n.endswith("rotary_emb.inv_freq"))
    if extra:
        raise CheckpointError(f"{path}: unexpected tensor(s) {extra[:5]} not used by a {cfg.architecture} config; check {described_by}")

    specs = flat_params(param_specs(cfg))
    axes = flat_params(logical_axes(cfg))
    dtype = jnp.dtype(cfg.param_dtype)
    out: dict[str, jax.Array] = {}
    for ours, (hf, to_ours, _) in layout.items():
        spec = specs[ours]
        is_layer = ours.startswith("layers/")
        names = [hf.format(i=i) for i in range(cfg.num_layers)] if is_layer else [hf]
        per_shape = spec.shape[1:] if is_layer else spec.shape
        for n in names:  # validate shapes before reading anything
            got = files.shape(n)
            want = to_hf_shape(per_shape, ours, cfg)
            if got != want:
                raise CheckpointError(f"{path}: tensor {n!r} has shape {list(got)}, expected {list(want)} from {described_by}")
        sharding = (
            NamedSharding(mesh, logical_to_spec(axes[ours], rules)) if mesh is not None
            else jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        )
        if mesh is not None:
            check_divisible(ours, spec.shape, sharding.spec, mesh)
        out[ours] = load_one(files, names, to_ours, is_layer, spec.shape, dtype, sharding)
    return unflat_params(out)


def to_hf_shape(ours_shape: tuple[int, ...], ours: str, cfg: ModelConfig) -> tuple[int, ...]:
    """The HF tensor shape that converts to one layer's slice of `ours`."""
    probe = np.zeros(ours_shape, np.int8)
    return tuple(hf_layout(cfg)[ours][2](probe).shape)


def load_one(
    files: TensorSource,
    names: list[str],
    to_ours: Callable[[np.ndarray], np.ndarray],
    is_layer: bool,
    shape: tuple[int, ...],
    dtype: Any,
    sharding: jax.sharding.Sharding,
) -> jax.Array:
    """One param, each device shard read on demand (one layer at a time, converted, sliced)."""
    cache: dict[int, np.ndarray] = {}

    def layer(i: int) -> np.ndarray:
        if i not in cache:
            cache.clear()  # keep one converted layer in host memory at a time
            cache[i] = np.asarray(to_ours(files.read(names[i]))).astype(dtype)
        return cache[i]

    def shard(index: tuple[slice, ...]) -> np.ndarray:
        if not is_layer:
            return layer(0)[index]
        rows = range(*index[0].indices(shape[0]))
        return np.stack([layer(i)[index[1:]] for i in rows])

    return jax.make_array_from_callback(shape, sharding, shard)


# ---- export --------------------------------------------------------------------------------------

def host_numpy(x: jax.Array) -> np.ndarray:
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        x = multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x)


def iter_hf_tensors(cfg: ModelConfig, params: Params, dtype: str | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(HF name, host array) pairs, one layer slice at a time."""
    out_dtype = np.dtype(ml_dtypes.bfloat16) if (dtype or cfg.param_dtype) == "bfloat16" else np.dtype(dtype or cfg.param_dtype)
    flat = flat_params(params)
    for ours, (hf, _, to_hf) in hf_layout(cfg).items():
        value = host_numpy(flat[ours])
        if ours.startswith("layers/"):
            for i in range(cfg.num_layers):
                yield hf.format(i=i), np.ascontiguousarray(to_hf(value[i]).astype(out_dtype))
        else:
            yield hf, np.ascontiguousarray(to_hf(value).astype(out_dtype))


def write_safetensors(out: Path, tensors: Iterator[tuple[str, np.ndarray]], max_shard_bytes: int) -> bool:
    """Write (name, array) pairs as model.safetensors, or as numbered shards with an index past
    `max_shard_bytes`, replacing any weights already in `out`. Every process iterates (the arrays are gathered
    collectively); only process 0 writes. Returns whether this process wrote."""
    writer = jax.process_index() == 0
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, arr in tensors:
        if size and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    if not writer:
        return False
    out.mkdir(parents=True, exist_ok=True)
    for stale in list(out.glob("model*.safetensors")) + list(out.glob("model.safetensors.index.json")):
        stale.unlink()
    meta = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata=meta)
        return True
    weight_map, total = {}, 0
    for k, shard in enumerate(shards, 1):
        fname = f"model-{k:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata=meta)
        for name, arr in shard.items():
            weight_map[name] = fname
            total += arr.nbytes
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return True


def write_config_files(cfg: ModelConfig, out: Path, dtype: str, generation_config: dict[str, Any] | None = None) -> None:
    """config.json (weights stored as `dtype`) and generation_config.json (greedy by default, the config's
    token ids, then `generation_config` on top)."""
    hf_cfg = cfg.to_hf()
    hf_cfg["torch_dtype"] = hf_cfg["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(hf_cfg, indent=2))
    gen: dict[str, Any] = {"do_sample": False}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key in hf_cfg:
            gen[key] = hf_cfg[key]
    gen.update(generation_config or {})
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))


def export_hf(
    cfg: ModelConfig,
    params: Params,
    out_dir: str | os.PathLike[str],
    tokenizer_dir: str | os.PathLike[str] | None = None,
    dtype: str | None = None,
    max_shard_bytes: int = 2 * 1024**3,
    generation_config: dict[str, Any] | None = None,
) -> Path:
    """Write a HuggingFace model directory from params. Only process 0 writes (all take part in gathers)."""
    out = Path(out_dir)
    if not write_safetensors(out, iter_hf_tensors(cfg, params, dtype), max_shard_bytes):
        return out
    write_config_files(cfg, out, dtype or cfg.param_dtype, generation_config)
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != out.resolve():
        for fname in TOKENIZER_FILES:
            src = Path(tokenizer_dir) / fname
            if src.exists():
                shutil.copy2(src, out / fname)
    return out
