"""The GPU proof: checks and times the model, the train step, the attention kernels and the JaxEngine on one
NVIDIA GPU against PyTorch on the same GPU, in one run of under 8 minutes, and writes what it saw.

    python benchmarks/gpu_check.py [--out DIR] [--only parity,attention,...] [--budget 420]
    python benchmarks/gpu_check.py --cpu      # the smoke mode CI runs: tiny shapes, every code path, ~1 min

On a lent device machine (the `device` tool): `PYTHONPATH=. python3 benchmarks/gpu_check.py` (results under
$OUT). Sections, in order (each is timed, recorded ok / fail / skipped, and never stops the others):

- env        versions, the card, its datasheet bf16 peak, and the bf16 matmul rate measured on it
- parity     Flax vs transformers logits (Llama, Qwen2, Qwen3 at published widths, 4 layers, random
             weights): fp32 at highest precision, bound 1e-4 relative L2; bf16 against the fp32 reference,
             bound 2x transformers' own bf16 error (+1e-3)
- cpu_gpu    one GRPO train step (AdamW, clipping, KL) on the GPU equals the same step on the host CPU:
             loss and gradient norm to 1e-5 relative, updated params to 1e-5 relative L2 (fp32, highest)
- attention  the model's XLA blocked attention vs cuDNN flash attention (the `cudnn` backend, and the same
             call without the segment mask), bf16, forward and backward at 4k and 16k tokens: error against
             an fp32 reference, ms and TFLOP/s
- train      fwd+bwd tokens/s and MFU of the Qwen2.5-0.5B and -1.5B shapes, bf16 compute over fp32 master
             weights, vs transformers (SDPA, autocast bf16), interleaved rounds; our full AdamW step too
- engine     JaxEngine vs transformers.generate: 64 concurrent greedy requests, same weights, same prompts
- grpo       the GRPO step of configs/grpo_tpu.py's model (Qwen2.5-3B shape) at 6 of 36 layers, 16k tokens,
             remat, cuDNN attention: tokens/s and MFU
- compile    the 0.5B fwd+bwd against transformers under `torch.compile` (last: its own compile is long;
             the smoke mode uses dynamo's eager backend)

MFU = ModelConfig.flops_per_token(seq) x tokens/s / the card's datasheet dense bf16 peak (the same FLOP count
for both frameworks; it counts full, not causal, attention). The model and train path import without
playwright, grain, miniwob or ml-collections (the device image lacks them); the JSON records which of those
got imported (none may be).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Packages the device image does not have; the paths this script runs must not import them.
NOT_ON_DEVICE = ("grain", "playwright", "miniwob", "ml_collections", "tensorboardX")
# Dense bf16 tensor-core peak by device name (NVIDIA datasheets, without sparsity).
PEAK_BF16 = (("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100", 989.4e12), ("A100", 312.0e12),
             ("L40S", 362.05e12), ("L4", 121.0e12))
SECTIONS = ("env", "parity", "cpu_gpu", "attention", "train", "engine", "grpo", "compile")


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="smoke mode: CPU only, tiny shapes (what CI runs)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_check_out", help="results folder ($OUT if set)")
    ap.add_argument("--only", default="", help=f"comma-separated sections of {SECTIONS}")
    ap.add_argument("--budget", type=float, default=450.0,
                    help="seconds for the whole run: a section that would start too late is skipped and says so")
    return ap.parse_args()


ARGS = _parse()
if ARGS.cpu:
    os.environ["JAX_PLATFORMS"] = "cpu"
else:  # JAX and PyTorch share the card: JAX grows its pool on demand, up to half of the memory
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from jaxwebrl.models import ModelConfig, export_hf, forward, init_params  # noqa: E402
from jaxwebrl.models import attention as attention_backends  # noqa: E402
from jaxwebrl.models.decoder import _attention, attention_mask  # noqa: E402
from jaxwebrl.models.known_shapes import KNOWN_SHAPES  # noqa: E402
from jaxwebrl.models.tiny import tiny_config  # noqa: E402
from jaxwebrl.sharding import make_mesh  # noqa: E402
from jaxwebrl.train.losses import LossConfig  # noqa: E402
from jaxwebrl.train.optim import OptimConfig, make_optimizer  # noqa: E402
from jaxwebrl.train.step import (  # noqa: E402
    BATCH_KEYS, REF_KEY, StepConfig, batch_shardings, grads_and_metrics, init_state, make_train_step,
)

sys.path.insert(0, str(ROOT / "benchmarks"))
from interleave import alternate, summary, timed  # noqa: E402

GPU = not ARGS.cpu
TORCH_DEVICE = "cuda" if GPU else "cpu"
MESH_1 = {"data": 1, "fsdp": 1, "tensor": 1}


# ---- recording ---------------------------------------------------------------------------------------


class Report:
    """Sections' results as one JSON (rewritten after every section, so a run cut short keeps what it did)
    and one line of summary per finding."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.t0 = time.perf_counter()
        self.budget = budget
        self.data: dict[str, Any] = {"mode": "cpu-smoke" if ARGS.cpu else "gpu", "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                     "sections": {}}
        self.lines: list[str] = []

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.t0)

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.lines.append(line)

    def run(self, name: str, fn: Callable[["Report"], dict[str, Any]], needs: float) -> None:
        """Run one section if `needs` seconds (its expected length) are left; record and print the outcome."""
        if self.left() < needs:
            self.data["sections"][name] = {"status": "skipped", "why": f"{self.left():.0f} s of the budget left, "
                                           f"the section takes about {needs:.0f} s"}
            self.say(f"[{name}] SKIPPED: {self.data['sections'][name]['why']}")
            self.write()
            return
        self.say(f"[{name}] start ({self.left():.0f} s of the budget left)")
        t = time.perf_counter()
        try:
            result = fn(self)
            status = "ok" if result.pop("passed", True) else "fail"
        except Exception as e:  # noqa: BLE001 - a broken section is a finding, the others still run
            result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
            status = "error"
        result.update(status=status, seconds=round(time.perf_counter() - t, 1))
        self.data["sections"][name] = result
        self.say(f"[{name}] {status.upper()} in {result['seconds']} s" + (f": {result['error']}" if "error" in result else ""))
        _free()
        self.write()

    def write(self) -> None:
        self.data["seconds"] = round(time.perf_counter() - self.t0, 1)
        self.data["not_on_device_imported"] = sorted(m for m in NOT_ON_DEVICE if m in sys.modules)
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1, default=_jsonable))
        (self.out / "gpu_check.txt").write_text("\n".join(self.lines) + "\n")


def _jsonable(x: Any) -> Any:
    if isinstance(x, (np.generic,)):
        return x.item()
    return str(x)


def _free() -> None:
    gc.collect()
    if GPU:
        torch.cuda.empty_cache()


def sync_jax(x: Any) -> Any:
    return jax.block_until_ready(x)


def sync_torch() -> None:
    if GPU:
        torch.cuda.synchronize()


def median_time(fn: Callable[[], Any], reps: int, warm: int = 1) -> float:
    """Median seconds of `fn` (which must block until its work is done) after `warm` untimed calls."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def rel_l2(a: Any, b: Any) -> float:
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30))


def peak_bf16(name: str) -> float | None:
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def device_name() -> str:
    return torch.cuda.get_device_name(0) if GPU else platform.processor() or platform.machine()


def shape(name: str, **changes: Any) -> ModelConfig:
    """A published model shape (known_shapes), or in smoke mode a tiny one of the same family."""
    if ARGS.cpu:
        base = KNOWN_SHAPES[name]
        return tiny_config(base["architecture"], **changes)
    return ModelConfig(**{**KNOWN_SHAPES[name], **changes})


def jax_memory() -> dict[str, float]:
    stats = jax.local_devices()[0].memory_stats() or {}
    return {k: round(v / 2**30, 2) for k, v in stats.items() if k in ("peak_bytes_in_use", "bytes_limit")}


# ---- sections ----------------------------------------------------------------------------------------


def section_env(r: Report) -> dict[str, Any]:
    import flax
    import optax
    import transformers

    name = device_name()
    out: dict[str, Any] = {
        "python": platform.python_version(), "jax": jax.__version__, "flax": flax.__version__,
        "optax": optax.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
        "jax_devices": [str(d) for d in jax.devices()], "device": name, "peak_bf16_flops": peak_bf16(name),
    }
    if GPU:
        out["cudnn"] = torch.backends.cudnn.version()
        out["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    n = 8192 if GPU else 512
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.bfloat16)
    mm = jax.jit(lambda x, y: x @ y)
    out["jax_matmul_tflops"] = round(2 * n**3 / median_time(lambda: sync_jax(mm(a, b)), 10, 3) / 1e12, 1)
    ta = torch.randn(n, n, device=TORCH_DEVICE, dtype=torch.bfloat16)
    tb = torch.randn(n, n, device=TORCH_DEVICE, dtype=torch.bfloat16)

    def tmm() -> None:
        ta @ tb
        sync_torch()

    out["torch_matmul_tflops"] = round(2 * n**3 / median_time(tmm, 10, 3) / 1e12, 1)
    r.say(f"  device {name}; jax {jax.__version__}, torch {torch.__version__}; bf16 {n}^3 matmul: jax "
          f"{out['jax_matmul_tflops']} TFLOP/s, torch {out['torch_matmul_tflops']} TFLOP/s; datasheet peak "
          f"{(out['peak_bf16_flops'] or 0) / 1e12:.0f}")
    return out


def _torch_model(cfg: ModelConfig, params: Any | None, dtype: torch.dtype, workdir: str | None = None) -> Any:
    """transformers' model of `cfg` on the torch device: our params exported and loaded (the same weights), or
    transformers' own random init when `params` is None."""
    import transformers

    if params is not None:
        assert workdir is not None
        export_hf(cfg, params, workdir)
        model = transformers.AutoModelForCausalLM.from_pretrained(workdir, dtype=dtype, attn_implementation="sdpa")
    else:
        hf = cfg.to_hf()
        hf_cfg = transformers.AutoConfig.for_model(**{k: v for k, v in hf.items() if k not in ("architectures",)})
        hf_cfg._attn_implementation = "sdpa"
        with torch.device(TORCH_DEVICE):
            model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=dtype)
    return model.to(TORCH_DEVICE)


def section_parity(r: Report) -> dict[str, Any]:
    out: dict[str, Any] = {"passed": True}
    rng = np.random.default_rng(0)
    B, T = (2, 128) if GPU else (1, 16)
    for arch, name in (("llama", "Llama-3.2-1B"), ("qwen2", "Qwen2.5-1.5B"), ("qwen3", "Qwen3-1.7B")):
        t0 = time.perf_counter()
        cfg = shape(name, num_layers=4, scan_layers=True)
        params = init_params(cfg, jax.random.key(1))
        tokens = rng.integers(0, cfg.vocab_size, (B, T))
        pos = np.broadcast_to(np.arange(T), (B, T))
        fwd = jax.jit(lambda p, t, q, c=cfg: forward(c, p, t, q)[0])
        with jax.default_matmul_precision("highest"):
            ours32 = np.asarray(fwd(params, tokens, pos), np.float32)
        ours_default = np.asarray(fwd(params, tokens, pos), np.float32)  # JAX's default precision on this card
        cfg16 = cfg.replace(dtype="bfloat16", param_dtype="bfloat16")
        p16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
        ours16 = np.asarray(jax.jit(lambda p, t, q: forward(cfg16, p, t, q)[0])(p16, tokens, pos), np.float32)
        t_jax = time.perf_counter() - t0
        with tempfile.TemporaryDirectory() as d:
            model = _torch_model(cfg, params, torch.float32, d)
        t_load = time.perf_counter() - t0 - t_jax
        tt = torch.tensor(tokens, dtype=torch.long, device=TORCH_DEVICE)
        with torch.no_grad():
            ref32 = model(input_ids=tt).logits.float().cpu().numpy()
            model = model.to(torch.bfloat16)
            ref16 = model(input_ids=tt).logits.float().cpu().numpy()
        del model
        _free()
        e32, e16_ours, e16_torch = rel_l2(ours32, ref32), rel_l2(ours16, ref32), rel_l2(ref16, ref32)
        bound16 = 2 * e16_torch + 1e-3
        ok = e32 <= 1e-4 and e16_ours <= bound16
        out[arch] = {"shape": f"{name} widths, 4 layers", "fp32_rel_l2": e32, "fp32_max_abs": float(np.abs(ours32 - ref32).max()),
                     "fp32_argmax_agree": float((ours32.argmax(-1) == ref32.argmax(-1)).mean()),
                     "jax_default_precision_rel_l2": rel_l2(ours_default, ref32),
                     "bf16_rel_l2_ours": e16_ours, "bf16_rel_l2_transformers": e16_torch, "bf16_bound": bound16,
                     "bf16_ours_vs_transformers_bf16": rel_l2(ours16, ref16), "passed": ok,
                     "seconds": {"jax_init_and_3_forwards": t_jax, "export_and_transformers_load": t_load,
                                 "all": time.perf_counter() - t0}}
        out["passed"] &= ok
        r.say(f"  {arch:6s} fp32 rel L2 {e32:.2e} (<= 1e-4; default precision {out[arch]['jax_default_precision_rel_l2']:.1e}); "
              f"bf16 vs fp32 ref: ours {e16_ours:.2e}, transformers {e16_torch:.2e} (bound {bound16:.2e}) "
              f"{'ok' if ok else 'FAIL'}")
    return out


def _batch(cfg: ModelConfig, accum: int, rows: int, T: int, seed: int, with_ref: bool) -> dict[str, np.ndarray]:
    """A GRPO-shaped batch, [accum, rows, T]: a 1/4-length prompt (mask 0), then the response (mask 1)."""
    rng = np.random.default_rng(seed)
    shp = (accum, rows, T)
    mask = np.zeros(shp, np.int32)
    mask[..., T // 4:] = 1
    adv = np.repeat(rng.choice([-1.0, 1.0], (accum, rows, 1)), T, -1).astype(np.float32)
    b = {"tokens": rng.integers(0, cfg.vocab_size, shp).astype(np.int32),
         "positions": np.broadcast_to(np.arange(T, dtype=np.int32), shp).copy(),
         "segment_ids": np.ones(shp, np.int32), "loss_mask": mask, "advantages": adv * mask,
         # about what a random-weight policy gives its own samples, so ratios stay near 1
         "old_logprobs": (-np.log(cfg.vocab_size) + rng.normal(0, 0.1, shp)).astype(np.float32) * mask,
         "norm_weight": mask.astype(np.float32), "norm_denom": np.zeros(shp, np.float32)}
    b["norm_denom"][..., 0, 0] = mask.sum() / accum  # token mean over the whole batch, split over micro-batches
    if with_ref:
        b[REF_KEY] = b["old_logprobs"] - 0.05 * mask
    assert set(b) - {REF_KEY} == set(BATCH_KEYS)
    return b


def _place(batch: dict[str, np.ndarray], cfg: ModelConfig, mesh: Any) -> dict[str, jax.Array]:
    sh = batch_shardings(cfg, mesh)
    return {k: jax.device_put(v, sh) for k, v in batch.items()}


def _one_step(cfg: ModelConfig, params: Any, batch: dict[str, np.ndarray], devices: list[Any]) -> dict[str, Any]:
    loss = LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28, beta=0.01)
    step_cfg = StepConfig(cfg, loss, logits_chunk=0)
    tx, sched = make_optimizer(OptimConfig(lr=1e-3, max_grad_norm=1.0, weight_decay=0.01), 10)
    mesh = make_mesh(MESH_1, devices)
    with jax.set_mesh(mesh), jax.default_matmul_precision("highest"):
        state = init_state(jax.device_put(params, devices[0]), tx, mesh, cfg)
        step = make_train_step(step_cfg, tx, mesh, sched)
        state, metrics = step(state, _place(batch, cfg, mesh))
        return {"metrics": {k: float(v) for k, v in metrics.items()},
                "params": jax.tree.map(lambda x: np.asarray(x), state["params"])}


def section_cpu_gpu(r: Report) -> dict[str, Any]:
    cfg = shape("Qwen3-1.7B", num_layers=2, hidden_size=512, intermediate_size=1536, num_heads=8, num_kv_heads=4,
                head_dim=64, vocab_size=8192) if GPU else shape("Qwen3-1.7B", num_layers=2)
    params = jax.tree.map(np.asarray, init_params(cfg, jax.random.key(2)))
    batch = _batch(cfg, 2, 2, 256 if GPU else 32, seed=3, with_ref=True)
    here = _one_step(cfg, params, batch, jax.devices()[:1])
    host = _one_step(cfg, params, batch, jax.devices("cpu")[:1])
    loss_rel = abs(here["metrics"]["loss"] - host["metrics"]["loss"]) / abs(host["metrics"]["loss"])
    gn_rel = abs(here["metrics"]["grad_norm"] - host["metrics"]["grad_norm"]) / host["metrics"]["grad_norm"]
    p_rel = rel_l2(np.concatenate([x.ravel() for x in jax.tree.leaves(here["params"])]),
                   np.concatenate([x.ravel() for x in jax.tree.leaves(host["params"])]))
    moved = rel_l2(np.concatenate([x.ravel() for x in jax.tree.leaves(host["params"])]),
                   np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(params)]))
    ok = loss_rel <= 1e-5 and gn_rel <= 1e-5 and p_rel <= 1e-5 and moved > 1e-3
    r.say(f"  {jax.devices()[0].platform} vs cpu: loss {here['metrics']['loss']:.6f} vs {host['metrics']['loss']:.6f} "
          f"(rel {loss_rel:.1e}), grad norm rel {gn_rel:.1e}, updated params rel L2 {p_rel:.1e} (the update moved them "
          f"{moved:.1e}) {'ok' if ok else 'FAIL'}")
    return {"model": "qwen3 2 layers, hidden 512" if GPU else "tiny qwen3", "loss": here["metrics"]["loss"],
            "loss_cpu": host["metrics"]["loss"], "loss_rel": loss_rel, "grad_norm_rel": gn_rel, "params_rel_l2": p_rel,
            "update_rel_l2": moved, "bound": 1e-5, "passed": ok}


def _reference_attention(q: jax.Array, k: jax.Array, v: jax.Array, dout: jax.Array) -> tuple[np.ndarray, list[np.ndarray]]:
    """Causal GQA attention and its q/k/v gradients in fp32 at highest precision, one kv-head group at a time
    (dense XLA attention of one group: 1/K of the full scores' memory, one compiled program)."""
    K = k.shape[2]
    G = q.shape[2] // K

    def f(a: jax.Array, b: jax.Array, c: jax.Array, d: jax.Array) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        def loss(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
            return (jax.nn.dot_product_attention(a, b, c, is_causal=True, implementation="xla") * d).sum()
        return jax.nn.dot_product_attention(a, b, c, is_causal=True, implementation="xla"), jax.grad(loss, (0, 1, 2))(a, b, c)

    fj = jax.jit(f)
    outs, gq, gk, gv = [], [], [], []
    with jax.default_matmul_precision("highest"):
        for g in range(K):
            qs, ds = q[:, :, g * G:(g + 1) * G], dout[:, :, g * G:(g + 1) * G]
            o, (a, b, c) = fj(qs.astype(jnp.float32), k[:, :, g:g + 1].astype(jnp.float32),
                              v[:, :, g:g + 1].astype(jnp.float32), ds)
            outs.append(np.asarray(o))
            gq.append(np.asarray(a))
            gk.append(np.asarray(b))
            gv.append(np.asarray(c))
    return np.concatenate(outs, 2), [np.concatenate(gq, 2), np.concatenate(gk, 2), np.concatenate(gv, 2)]


def section_attention(r: Report) -> dict[str, Any]:
    """cuDNN first (the goal), then the model's XLA blocked attention, each only while the budget allows: on an
    H200 (2026-11-27) the XLA variant's programs at 4k did not finish compiling in 250 s."""
    H, K, hd = (16, 8, 128) if GPU else (4, 2, 16)
    lengths = ((4096, 4), (16384, 1)) if GPU else ((128, 1), (256, 1))
    impl = "cudnn" if GPU else "xla"  # the smoke mode runs the same call through XLA's implementation
    attention_backends.CUDNN_IMPLEMENTATION = impl
    kcfg = ModelConfig(num_heads=H, num_kv_heads=K, head_dim=hd, dtype="bfloat16", attention="cudnn")

    def xla(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        T = q.shape[1]
        pos = jnp.broadcast_to(jnp.arange(T), q.shape[:2])
        return _attention(q, k, v, attention_mask(pos, None, None), K)

    variants: dict[str, Callable[..., jax.Array]] = {
        "cudnn_no_mask": lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl),
        "cudnn": lambda q, k, v: attention_backends.kernel_attention(kcfg, q, k, v, None),
        "xla": xla,
    }
    needs = {"cudnn_no_mask": 20, "cudnn": 20, "xla": 150}  # seconds a variant may take, compile included
    out: dict[str, Any] = {"heads": H, "kv_heads": K, "head_dim": hd, "implementation": impl, "passed": True}
    for T, B in lengths:
        key = jax.random.split(jax.random.key(T), 4)
        q, k, v = (jax.random.normal(key[i], (B, T, n, hd), jnp.float32).astype(jnp.bfloat16)
                   for i, n in ((0, H), (1, K), (2, K)))
        dout = jax.random.normal(key[3], (B, T, H, hd), jnp.float32)
        t = time.perf_counter()
        ref_o, ref_g = _reference_attention(q, k, v, dout)
        flops_fwd = 4 * B * H * T * T * hd / 2  # causal: half of QK^T and PV
        row: dict[str, Any] = {"batch": B, "reference_s": round(time.perf_counter() - t, 1)}
        bound = 1e-2  # bf16 operands against an fp32 reference (METHOD.md: 1e-3 to 1e-2)
        for name, f in variants.items():
            if r.left() < needs[name]:
                row[name] = {"skipped": f"{r.left():.0f} s of the budget left"}
                r.say(f"  T={T} {name}: skipped, {r.left():.0f} s of the budget left")
                continue
            try:
                fj = jax.jit(f)
                gj = jax.jit(jax.grad(lambda a, b, c, f=f: (f(a, b, c).astype(jnp.float32) * dout).sum(), argnums=(0, 1, 2)))
                t = time.perf_counter()
                o = np.asarray(fj(q, k, v), np.float32)
                g = [np.asarray(x, np.float32) for x in gj(q, k, v)]
                first = time.perf_counter() - t
                t_f = median_time(lambda: sync_jax(fj(q, k, v)), 10 if GPU else 2)
                t_b = median_time(lambda: sync_jax(gj(q, k, v)), 10 if GPU else 2)
            except Exception as e:  # noqa: BLE001 - one variant failing is a finding; the others still run
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
                out["passed"] = False
                r.say(f"  T={T} {name}: ERROR {row[name]['error'][:200]}")
                continue
            err = max(rel_l2(o, ref_o), *(rel_l2(a, b) for a, b in zip(g, ref_g)))
            row[name] = {"out_rel_l2": rel_l2(o, ref_o), "grad_rel_l2": max(rel_l2(a, b) for a, b in zip(g, ref_g)),
                         "first_call_s": first, "fwd_ms": t_f * 1e3, "fwd_bwd_ms": t_b * 1e3,
                         "fwd_tflops": flops_fwd / t_f / 1e12, "fwd_bwd_tflops": 3.5 * flops_fwd / t_b / 1e12,
                         "passed": err <= bound}
            out["passed"] &= row[name]["passed"]
            r.say(f"  T={T} B={B} {name}: fwd {t_f * 1e3:.2f} ms ({row[name]['fwd_tflops']:.0f} TFLOP/s), fwd+bwd "
                  f"{t_b * 1e3:.2f} ms ({row[name]['fwd_bwd_tflops']:.0f} TFLOP/s), error vs fp32 {err:.1e} "
                  f"(<= {bound:.0e}), first call (compile) {first:.1f} s")
        for name in ("cudnn", "cudnn_no_mask"):
            if "fwd_ms" in row.get(name, {}) and "fwd_ms" in row.get("xla", {}):
                row[name]["speedup_fwd_vs_xla"] = row["xla"]["fwd_ms"] / row[name]["fwd_ms"]
                row[name]["speedup_fwd_bwd_vs_xla"] = row["xla"]["fwd_bwd_ms"] / row[name]["fwd_bwd_ms"]
                r.say(f"  T={T} {name} vs xla: fwd {row[name]['speedup_fwd_vs_xla']:.2f}x, fwd+bwd "
                      f"{row[name]['speedup_fwd_bwd_vs_xla']:.2f}x")
        row["bound"] = bound
        out[f"T{T}"] = row
        del q, k, v, dout
        _free()
    attention_backends.CUDNN_IMPLEMENTATION = "cudnn"
    return out


def _ours_fwd_bwd(cfg: ModelConfig, batch: dict[str, np.ndarray]) -> tuple[Callable[[], Any], float]:
    """Our jitted fwd+bwd (grads_and_metrics, SFT loss) on one device, and its loss."""
    mesh = make_mesh(MESH_1, jax.devices()[:1])
    step_cfg = StepConfig(cfg, LossConfig(kind="sft"), logits_chunk=1024 if GPU else 0, with_entropy=False)
    with jax.set_mesh(mesh):
        params = init_params(cfg, jax.random.key(4))
        dev = _place(batch, cfg, mesh)
        grads = jax.jit(lambda p, b: grads_and_metrics(step_cfg, p, b))
        loss = float(sync_jax(grads(params, dev))[1]["loss"])

    def fwd_bwd() -> None:
        with jax.set_mesh(mesh):
            sync_jax(grads(params, dev))

    return fwd_bwd, loss


def _ours_full_step(cfg: ModelConfig, batch: dict[str, np.ndarray], reps: int) -> float:
    """Median seconds of our whole train step (fwd+bwd, clipping, AdamW update; state donated)."""
    mesh = make_mesh(MESH_1, jax.devices()[:1])
    step_cfg = StepConfig(cfg, LossConfig(kind="sft"), logits_chunk=1024 if GPU else 0, with_entropy=False)
    tx, sched = make_optimizer(OptimConfig(lr=1e-5), 100)
    with jax.set_mesh(mesh):
        state = {"s": init_state(init_params(cfg, jax.random.key(4)), tx, mesh, cfg)}
        dev = _place(batch, cfg, mesh)
        step = make_train_step(step_cfg, tx, mesh, sched)

    def full() -> None:
        with jax.set_mesh(mesh):
            state["s"], m = step(state["s"], dev)
            sync_jax(m)

    return median_time(full, reps, warm=1)


def _torch_fwd_bwd(cfg: ModelConfig, tokens: np.ndarray, compile_it: bool) -> tuple[Callable[[], Any], float]:
    model = _torch_model(cfg, None, torch.float32)
    model.train()
    run = torch.compile(model, backend="inductor" if GPU else "eager") if compile_it else model
    tt = torch.tensor(tokens, dtype=torch.long, device=TORCH_DEVICE)
    amp = torch.autocast(TORCH_DEVICE, dtype=torch.bfloat16) if GPU else contextlib.nullcontext()

    def step() -> float:
        model.zero_grad(set_to_none=True)
        with amp:
            loss = run(input_ids=tt, labels=tt).loss
        loss.backward()
        sync_torch()
        return float(loss.detach())

    loss = step()
    return step, loss


def section_train(r: Report) -> dict[str, Any]:
    out: dict[str, Any] = {}
    peak = peak_bf16(device_name()) if GPU else None
    runs = (("Qwen2.5-1.5B", 4, 2048), ("Qwen2.5-0.5B", 8, 2048)) if GPU else (("Qwen2.5-0.5B", 2, 64),)
    for name, B, T in runs:
        try:
            out[name] = _train_one(r, name, B, T, peak)
        except Exception as e:  # noqa: BLE001 - e.g. out of memory on a smaller card: the other size still runs
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
            out["passed"] = False
            r.say(f"  {name}: ERROR {out[name]['error'][:200]}")
        _free()
    return out


def _train_one(r: Report, name: str, B: int, T: int, peak: float | None) -> dict[str, Any]:
    cfg = shape(name, dtype="bfloat16" if GPU else "float32", param_dtype="float32", scan_layers=True,
                remat=False, attention="cudnn" if GPU else "xla")
    batch = _batch(cfg, 1, B, T, seed=5, with_ref=False)
    batch["loss_mask"][:] = 1
    batch["advantages"][:] = 1.0
    batch["norm_weight"][:] = 1.0
    batch["norm_denom"][:] = 0.0
    batch["norm_denom"][..., 0, 0] = B * (T - 1)
    t0 = time.perf_counter()
    ours, loss = _ours_fwd_bwd(cfg, batch)
    r.say(f"  {name}: ours compiled and ran once in {time.perf_counter() - t0:.0f} s")
    sides: dict[str, Callable[[int], float]] = {"jaxwebrl": timed(ours)}
    losses = {"jaxwebrl": loss}
    t_step, t_loss = _torch_fwd_bwd(cfg, batch["tokens"][0], compile_it=False)
    sides["torch"], losses["torch"] = timed(t_step), t_loss
    rounds, steps = (5, 3) if GPU else (2, 1)
    times = alternate(sides, rounds, steps)
    s = summary(times, "jaxwebrl", "torch")
    tokens = B * T
    fpt = cfg.flops_per_token(T)
    row = {"batch": B, "seq": T, "params_b": cfg.num_params() / 1e9, "flops_per_token": fpt, "losses": losses,
           **s, "jaxwebrl_tokens_s": tokens / s["jaxwebrl_step_s"], "torch_tokens_s": tokens / s["torch_step_s"]}
    del sides, ours, t_step
    _free()
    if peak:
        row["jaxwebrl_mfu"] = fpt * row["jaxwebrl_tokens_s"] / peak
        row["torch_mfu"] = fpt * row["torch_tokens_s"] / peak
    r.say(f"  {name}: fwd+bwd ours {row['jaxwebrl_tokens_s']:.0f} tok/s, torch {row['torch_tokens_s']:.0f} tok/s, "
          f"ratio {s['ratio']:.2f}x")
    if r.left() > 90:  # our whole step (AdamW) is one more compile
        row["full_step_s"] = _ours_full_step(cfg, batch, 2 if GPU else 1)
        if peak:
            row["full_step_mfu"] = fpt * tokens / row["full_step_s"] / peak
    row["memory_gib"] = jax_memory() if GPU else {}
    _free()
    mfu = (f"; MFU ours {row['jaxwebrl_mfu']:.1%}, torch {row['torch_mfu']:.1%}" if peak else "") + (
        f", ours full step {row['full_step_mfu']:.1%}" if "full_step_mfu" in row else "")
    r.say(f"  {name} {B}x{T}: fwd+bwd ours {row['jaxwebrl_tokens_s']:.0f} tok/s, torch {row['torch_tokens_s']:.0f} "
          f"tok/s, ratio {s['ratio']:.2f}x (rounds {s['ratio_min']:.2f}-{s['ratio_max']:.2f}){mfu}; "
          f"losses {losses['jaxwebrl']:.3f} / {losses['torch']:.3f}")
    return row


def section_compile(r: Report) -> dict[str, Any]:
    """transformers under torch.compile against our step, Qwen2.5-0.5B shape (last: its compile is long)."""
    B, T = (8, 2048) if GPU else (2, 64)
    cfg = shape("Qwen2.5-0.5B", dtype="bfloat16" if GPU else "float32", param_dtype="float32", scan_layers=True,
                remat=False, attention="cudnn" if GPU else "xla")
    batch = _batch(cfg, 1, B, T, seed=5, with_ref=False)
    ours, _ = _ours_fwd_bwd(cfg, batch)
    eager, _ = _torch_fwd_bwd(cfg, batch["tokens"][0], compile_it=False)
    t = time.perf_counter()
    compiled, _ = _torch_fwd_bwd(cfg, batch["tokens"][0], compile_it=True)
    compile_s = time.perf_counter() - t
    times = alternate({"jaxwebrl": timed(ours), "torch_compile": timed(compiled), "torch": timed(eager)},
                      3 if GPU else 1, 3 if GPU else 1)
    s = summary(times, "jaxwebrl", "torch_compile")
    out = {"batch": B, "seq": T, "torch_compile_first_step_s": compile_s, **s,
           "torch_eager_step_s": statistics.median(times["torch"]),
           "jaxwebrl_tokens_s": B * T / s["jaxwebrl_step_s"], "torch_compile_tokens_s": B * T / s["torch_compile_step_s"]}
    r.say(f"  Qwen2.5-0.5B {B}x{T}: ours {out['jaxwebrl_tokens_s']:.0f} tok/s, torch.compile "
          f"{out['torch_compile_tokens_s']:.0f} tok/s (its first step {compile_s:.0f} s), ratio {s['ratio']:.2f}x")
    return out


def section_grpo(r: Report) -> dict[str, Any]:
    if GPU:
        cfg = ModelConfig(**{**KNOWN_SHAPES["Qwen2.5-3B"], "num_layers": 6, "dtype": "bfloat16", "param_dtype": "float32",
                             "remat": True, "scan_layers": True, "attention": "cudnn"})
        accum, rows, T = 2, 1, 16384
    else:
        cfg = shape("Qwen2.5-3B", num_layers=2)
        accum, rows, T = 2, 1, 64
    loss = LossConfig(kind="grpo", eps_low=0.2, eps_high=0.2, beta=0.001, kl_estimator="k3")
    step_cfg = StepConfig(cfg, loss, logits_chunk=1024 if GPU else 0)
    tx, sched = make_optimizer(OptimConfig(lr=1e-6, b2=0.99, max_grad_norm=0.01), 1000)
    mesh = make_mesh(MESH_1, jax.devices()[:1])
    batch = _batch(cfg, accum, rows, T, seed=6, with_ref=True)
    with jax.set_mesh(mesh):
        state = {"s": init_state(init_params(cfg, jax.random.key(7)), tx, mesh, cfg)}
        dev = _place(batch, cfg, mesh)
        step = make_train_step(step_cfg, tx, mesh, sched)
        t = time.perf_counter()
        state["s"], m = step(state["s"], dev)
        first = {k: float(v) for k, v in sync_jax(m).items()}
        compile_s = time.perf_counter() - t

    def one() -> None:
        with jax.set_mesh(mesh):
            state["s"], m = step(state["s"], dev)
            sync_jax(m)

    sec = median_time(one, 3 if GPU else 1, warm=0)
    tokens = accum * rows * T
    out = {"model": "Qwen2.5-3B shape, 6 of 36 layers" if GPU else "tiny", "tokens_per_step": tokens, "step_s": sec,
           "tokens_s": tokens / sec, "first_step_s_with_compile": compile_s, "loss": first["loss"],
           "grad_norm": first["grad_norm"], "memory_gib": jax_memory() if GPU else {}}
    peak = peak_bf16(device_name()) if GPU else None
    if peak:
        out["mfu"] = cfg.flops_per_token(T) * out["tokens_s"] / peak
    out["passed"] = bool(np.isfinite(first["loss"]) and np.isfinite(first["grad_norm"]))
    r.say(f"  GRPO step {accum}x{rows}x{T}: {sec:.2f} s, {out['tokens_s']:.0f} tok/s"
          + (f", MFU {out['mfu']:.1%} (with remat's recompute not counted)" if peak else "") + f", loss {first['loss']:.4f}")
    return out


def section_engine(r: Report) -> dict[str, Any]:
    import asyncio

    import transformers

    from jaxwebrl.engines.base import SamplingParams
    from jaxwebrl.engines.jax_engine import JaxEngine

    n_req, new, lo, hi, max_len = (64, 128, 128, 512, 1024) if GPU else (4, 8, 8, 24, 64)
    cfg = shape("Qwen2.5-0.5B", dtype="bfloat16", param_dtype="bfloat16", scan_layers=True) if GPU else \
        shape("Qwen2.5-0.5B", scan_layers=True)
    params = init_params(cfg, jax.random.key(8))
    rng = np.random.default_rng(9)

    def load() -> list[list[int]]:
        return [rng.integers(3, cfg.vocab_size, int(n)).tolist() for n in rng.integers(lo, hi + 1, n_req)]

    warm, timed = load(), load()  # different lengths and tokens: the timed round is not the warm-up replayed
    sp = SamplingParams(greedy=True, max_new_tokens=new, ignore_eos=True)
    buckets = (256, 512, 1024) if GPU else None
    engine = JaxEngine(cfg, params, num_slots=n_req, max_len=max_len, buckets=buckets,
                       prefill_chunk=2048 if GPU else 32)

    async def run(prompts: list[list[int]]) -> tuple[float, int, int]:
        before = sum(engine.compile_counts().values())
        t = time.perf_counter()
        gens = await asyncio.gather(*(engine.generate(p, sp) for p in prompts))
        sec = time.perf_counter() - t
        return sec, sum(len(g.token_ids) for g in gens), sum(engine.compile_counts().values()) - before

    async def both() -> tuple[tuple[float, int, int], tuple[float, int, int]]:
        try:
            return await run(warm), await run(timed)
        finally:
            await engine.close()

    (w_s, _, w_c), (j_s, j_tok, j_c) = asyncio.run(both())
    del engine
    _free()
    with tempfile.TemporaryDirectory() as d:
        model = _torch_model(cfg, params, torch.bfloat16 if GPU else torch.float32, d)
    del params
    model.eval()

    def hf(prompts: list[list[int]]) -> tuple[float, int]:
        width = max(map(len, prompts))
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding, as batched generation wants
            ids[i, width - len(p):] = torch.tensor(p)
            att[i, width - len(p):] = 1
        t = time.perf_counter()
        with torch.no_grad():
            gen = model.generate(input_ids=ids.to(TORCH_DEVICE), attention_mask=att.to(TORCH_DEVICE), do_sample=False,
                                 max_new_tokens=new, min_new_tokens=new, pad_token_id=0)
        sync_torch()
        return time.perf_counter() - t, int((gen.shape[1] - width) * len(prompts))

    hf(warm)
    h_s, h_tok = hf(timed)
    del model
    out = {"requests": n_req, "new_tokens": new, "prompt_lengths": [lo, hi], "jax_s": j_s, "jax_tokens": j_tok,
           "jax_tokens_s": j_tok / j_s, "jax_warmup_s": w_s, "jax_compiles_warmup": w_c, "jax_compiles_timed": j_c,
           "hf_s": h_s, "hf_tokens": h_tok, "hf_tokens_s": h_tok / h_s, "ratio": (j_tok / j_s) / (h_tok / h_s),
           "passed": j_tok == h_tok == n_req * new}
    r.say(f"  {n_req} requests x {new} new tokens, prompts {lo}-{hi}: JaxEngine {out['jax_tokens_s']:.0f} tok/s "
          f"({j_c} programs compiled in the timed round, {w_c} in the warm-up), transformers.generate "
          f"{out['hf_tokens_s']:.0f} tok/s, ratio {out['ratio']:.2f}x")
    return out


# Expected seconds of each section on an H100/H200 (the budget check) and in smoke mode.
NEEDS = {"env": (15, 5), "parity": (60, 15), "cpu_gpu": (30, 10), "attention": (50, 10), "train": (150, 20),
         "engine": (90, 15), "grpo": (50, 10), "compile": (120, 20)}
FUNCS = {"env": section_env, "parity": section_parity, "cpu_gpu": section_cpu_gpu, "attention": section_attention,
         "train": section_train, "engine": section_engine, "grpo": section_grpo, "compile": section_compile}


def main() -> int:
    only = [s for s in ARGS.only.split(",") if s] or list(SECTIONS)
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"--only: unknown sections {unknown}; choose from {SECTIONS}")
    if GPU and jax.default_backend() != "gpu":
        raise SystemExit(f"no GPU for JAX (backend {jax.default_backend()!r}, devices {jax.devices()}); "
                         "install jax with its CUDA plugin, or run --cpu for the smoke mode")
    report = Report(Path(ARGS.out), ARGS.budget)
    report.say(f"gpu_check ({report.data['mode']}) sections {only}, budget {ARGS.budget:.0f} s, out {ARGS.out}")
    for name in only:
        report.run(name, FUNCS[name], NEEDS[name][0 if GPU else 1] * (0 if name == "env" else 1))
    statuses = {n: s["status"] for n, s in report.data["sections"].items()}
    report.say(f"done in {time.perf_counter() - report.t0:.0f} s: {statuses}; imported of {NOT_ON_DEVICE}: "
               f"{report.data['not_on_device_imported'] or 'none'}")
    report.write()
    return 0 if all(s in ("ok", "skipped") for s in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
