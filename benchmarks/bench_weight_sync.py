#!/usr/bin/env python3
"""Seconds per weight sync into an sglang-jax server: the in-place reload (`engine.weight_sync='disk'`, the
server started as jaxwebrl's sglang_jax_worker.py) vs a server restart (`weight_sync='restart'`, the stock
server; what a run had to do before), same model, same run, same machine load.

Each sync goes through `SGLangEngine.update_weights` with the trainer's params (two random weight sets,
alternated, so every sync changes the weights), and is followed by one greedy request whose tokens must equal
the JaxEngine's with the same params (tiny model only: a check that the new weights are served; the mid-size
model skips the reference, whose compile would dominate the run). Reported per method: the sync (export +
load, or export + restart until healthy), the first request after it, and for the reload the server-side
split (drain / load / flush, from the server's reply) and the export alone (the cost of crossing the process
boundary: the trainer writes safetensors, the server reads them).

  .venv/bin/python benchmarks/bench_weight_sync.py                        # tiny Qwen3 (the test model)
  .venv/bin/python benchmarks/bench_weight_sync.py --model mid --reloads 3 --restarts 1   # 0.29B, bf16
  .venv/bin/python benchmarks/bench_weight_sync.py --export-dir /dev/shm/jaxwebrl_sync   # exports in RAM

Server flags are sglang-jax's defaults plus the CPU limits (precompile on: a restart pays it, as in a run);
`--server-args=--disable-precompile` moves the compile of each shape to its first request instead (the
"first request after it" column then carries it for the restart).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxwebrl.engines import JaxEngine, SamplingParams, SGLangEngine, SGLangServer  # noqa: E402
from jaxwebrl.engines.sglang_server import default_sglang_jax_python  # noqa: E402
from jaxwebrl.models import export_hf, init_params  # noqa: E402
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config  # noqa: E402

MODELS = {
    # The model of tests/test_engine_sglang_reload.py.
    "tiny": dict(head_dim=128, num_heads=2, num_kv_heads=1),
    # Qwen3-0.6B's layer shapes (hidden 1024, 16 q / 8 kv heads of 128, MLP 3072), 16 of its 28 layers and a 32k
    # vocabulary (tied): 0.29B parameters, bf16 -- what this shared 24 GiB machine holds twice (trainer and server)
    # next to other jobs.
    "mid": dict(vocab_size=32768, hidden_size=1024, intermediate_size=3072, num_layers=16, num_heads=16,
                num_kv_heads=8, head_dim=128, tie_word_embeddings=True, max_position_embeddings=2048,
                param_dtype="bfloat16", dtype="bfloat16"),
}
SP = SamplingParams(greedy=True, max_new_tokens=8, ignore_eos=True)


def n_params(params: Any) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))


async def reference(cfg: Any, weights: list[Any], prompt: list[int]) -> list[list[int]]:
    engine = JaxEngine(cfg, weights[0], num_slots=1, max_len=128, buckets=(64, 128))
    out = []
    try:
        for i, w in enumerate(weights):
            if i:
                await engine.update_weights(w, version=i)
            out.append((await engine.generate(prompt, SP)).token_ids)
    finally:
        await engine.close()
    return out


async def run_syncs(engine: SGLangEngine, weights: list[Any], prompt: list[int], n: int, export_only: Path | None,
                    cfg: Any, tokenizer_dir: Path) -> list[dict[str, Any]]:
    """n syncs alternating the weight sets (the server starts on set 0, so the first sync loads set 1)."""
    rows = []
    for i in range(1, n + 1):
        w = weights[i % len(weights)]
        row: dict[str, Any] = {}
        if export_only is not None:  # the export alone: what crossing the process boundary costs the trainer
            t0 = time.perf_counter()
            await asyncio.to_thread(export_hf, cfg, w, export_only, tokenizer_dir)
            row["export_s"] = time.perf_counter() - t0
            shutil.rmtree(export_only, ignore_errors=True)
        t0 = time.perf_counter()
        await engine.update_weights(w, version=i)
        row["sync_s"] = time.perf_counter() - t0
        row["server"] = engine.last_sync
        t0 = time.perf_counter()
        row["tokens"] = (await engine.generate(prompt, SP)).token_ids
        row["first_request_s"] = time.perf_counter() - t0
        row["weights"] = i % len(weights)
        rows.append(row)
        print(f"  sync {i}: {row['sync_s']:.2f}s, first request {row['first_request_s']:.2f}s"
              + (f", export alone {row['export_s']:.2f}s" if "export_s" in row else "")
              + (f", server {row['server'].get('timings')}" if row["server"].get("timings") else ""), flush=True)
    return rows


def bench(method: str, path: Path, cfg: Any, weights: list[Any], prompt: list[int], n: int,
          args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    python = default_sglang_jax_python()
    assert python is not None
    server = SGLangServer(path, device="cpu", python=python, weight_reload=method == "reload",
                          context_length=args.context_length, log_path=workdir / f"{method}.log", startup_timeout=3600,
                          extra_args=args.server_args.split())
    export_dir = Path(args.export_dir or workdir) / f"exports_{method}"
    t0 = time.perf_counter()
    server.start()
    start_s = time.perf_counter() - t0
    pid = server.proc.pid if server.proc else None
    print(f"{method}: server up in {start_s:.1f}s (pid {pid})", flush=True)

    async def main() -> list[dict[str, Any]]:
        engine = SGLangEngine.for_server(server, weight_sync="disk" if method == "reload" else "restart",
                                         model_cfg=cfg, tokenizer_dir=path, export_dir=export_dir,
                                         startup_timeout=3600, keep_exports=1)
        try:
            return await run_syncs(engine, weights, prompt, n, export_dir / "export_only" if method == "reload"
                                   else None, cfg, path)
        finally:
            await engine.close()

    try:
        rows = asyncio.run(main())
        same_pid = method != "reload" or (server.proc is not None and server.proc.pid == pid)
    finally:
        server.stop()
        shutil.rmtree(export_dir, ignore_errors=True)
    return {"start_s": start_s, "rows": rows, "same_pid": same_pid}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument("--reloads", type=int, default=4)
    p.add_argument("--restarts", type=int, default=2)
    p.add_argument("--context-length", type=int, default=1024)
    p.add_argument("--export-dir", default="", help="where exports go (default: a temp dir on disk)")
    p.add_argument("--server-args", default="", help="extra sglang-jax flags for both servers")
    p.add_argument("--json", default="", help="also write the results here")
    args = p.parse_args()
    if default_sglang_jax_python() is None:
        print("no .venv-sglang: run scripts/setup_sglang_env.sh", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench_weight_sync_") as tmp:
        workdir = Path(tmp)
        path = workdir / "model"
        std = 0.3 if args.model == "tiny" else 0.02  # 28 bf16 layers need a small init to stay finite
        cfg, params_a = make_tiny_checkpoint(path, tiny_config("qwen3", **MODELS[args.model]), seed=0, std=std)
        weights = [params_a, init_params(cfg, jax.random.key(11), std=std)]
        size = (path / "model.safetensors").stat().st_size if (path / "model.safetensors").exists() else 0
        print(f"model {args.model}: {n_params(params_a) / 1e6:.1f}M params, checkpoint {size / 2**20:.0f} MiB, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        prompt = list(map(int, np.random.default_rng(0).integers(3, min(cfg.vocab_size, 500), 20)))
        results = {m: bench(m, path, cfg, weights, prompt, n, args, workdir)
                   for m, n in (("reload", args.reloads), ("restart", args.restarts))}
        expected = asyncio.run(reference(cfg, weights, prompt)) if args.model == "tiny" else None
    print(f"\nmodel {args.model}, {n_params(params_a) / 1e6:.1f}M params; machine load now "
          f"{os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores; server args: {args.server_args or 'defaults'}")
    med = {}
    for method, res in results.items():
        rows = res["rows"]
        med[method] = statistics.median(r["sync_s"] for r in rows)
        first = statistics.median(r["first_request_s"] for r in rows)
        print(f"{method:8s} server start {res['start_s']:7.1f}s | sync median {med[method]:7.2f}s "
              f"(n={len(rows)}, min {min(r['sync_s'] for r in rows):.2f}) | first request after it {first:.2f}s"
              + (" | same server process" if method == "reload" and res["same_pid"] else ""))
        if method == "reload":
            exp = statistics.median(r["export_s"] for r in rows)
            load = statistics.median(r["server"]["timings"]["load_s"] for r in rows)
            print(f"         of which: export (trainer writes safetensors) {exp:.2f}s, server load {load:.2f}s")
        if expected is not None:
            ok = sum(r["tokens"] == expected[r["weights"]] for r in rows)
            print(f"         greedy tokens equal to the JaxEngine's with the same weights: {ok}/{len(rows)}")
    print(f"restart / reload: {med['restart'] / med['reload']:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "results": results, "expected": expected},
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
