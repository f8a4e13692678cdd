#!/usr/bin/env python3
"""Ahead-of-time compile of the vision-language train step at the papers' shapes on fake CPU devices;
prints per-device memory. Nothing is allocated (abstract params and batch).

  XLA_FLAGS=--xla_force_host_platform_device_count=8 .venv/bin/python studies/dry_run_vl.py \
      --model Qwen3-VL-4B-Instruct --seq-len 32768 --micro-batch 8 --attention splash

OpenWebRL: Qwen3-VL-4B, 32,768 context, one 1280x720 screenshot per turn sample (the release processor
makes it a 44 x 80 patch grid = 3,520 patches, 880 image tokens; bucket 4,096). WebGym: Qwen3-VL-8B, same
per-turn shape (its context is memory + the current screenshot). The model shapes are the public
config.json values (`jaxwebrl.models.vl_known_shapes`). The paper configs themselves dry-run with
`scripts/train.py --config configs/grpo_openwebrl.py --dry_run` (same step, shapes from the config).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from jaxwebrl.data.vl_batch import patch_bucket  # noqa: E402
from jaxwebrl.models.vl_known_shapes import VL_KNOWN_SHAPES, known_vl_config, screenshot_grid  # noqa: E402
from jaxwebrl.sharding import make_mesh  # noqa: E402
from jaxwebrl.train.losses import LossConfig  # noqa: E402
from jaxwebrl.train.step import StepConfig, lower_train_step  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen3-VL-4B-Instruct", choices=sorted(VL_KNOWN_SHAPES))
    ap.add_argument("--seq-len", type=int, default=32768)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--patches-per-row", type=int, default=0, help="image patches per sample (0: one 1280x720 screenshot)")
    ap.add_argument("--attention", default="splash", choices=("xla", "splash"), help="the text decoder's attention")
    ap.add_argument("--lower-only", action="store_true", help="lower (trace and shard) without compiling")
    ap.add_argument("--mesh", default="data=1,fsdp=8,tensor=1")
    ap.add_argument("--freeze-vision", action="store_true")
    args = ap.parse_args()
    sizes = {k: int(v) for k, v in (kv.split("=") for kv in args.mesh.split(","))}
    mesh = make_mesh(sizes)
    cfg = known_vl_config(args.model, dtype="bfloat16", param_dtype="float32", remat=True, scan_layers=True,
                          attention=args.attention)
    per_row = args.patches_per_row or int(np.prod(screenshot_grid(cfg, args.model, 720, 1280)))
    patches = patch_bucket(per_row, cfg.vision.merge_unit)
    tx = optax.adamw(1e-6, b1=0.9, b2=0.98, weight_decay=0.1)  # OpenWebRL's optimizer
    step_cfg = StepConfig(cfg, LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28), logits_chunk=1024,
                          freeze_vision=args.freeze_vision)
    t0 = time.perf_counter()
    compiled = lower_train_step(step_cfg, tx, mesh, args.accum, args.micro_batch, args.seq_len, patches=patches,
                                compile=not args.lower_only)
    secs = time.perf_counter() - t0
    if args.lower_only:
        print(f"VL dry run: {args.model} lowered in {secs:.0f} s ({len(compiled.as_text())} chars of StableHLO)")
        return
    mem = compiled.memory_analysis()
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    from jaxwebrl.models import vl

    n = sum(int(a.size) for a in jax.tree.leaves(vl.abstract_params(cfg)))
    peak = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
    print(f"VL dry run: {args.model} ({n / 1e9:.2f}B params, fp32 master, bf16 compute, remat), batch [accum, micro, T] "
          f"= [{args.accum}, {args.micro_batch}, {args.seq_len}], text attention {args.attention}, {patches} patch rows "
          f"per row ({per_row} per sample), freeze_vision={args.freeze_vision}")
    print(f"  devices {len(jax.devices())} x {jax.devices()[0].device_kind}, mesh {sizes}; compiled in {secs:.0f} s")
    print(f"  per device: arguments {gib(mem.argument_size_in_bytes)}, outputs {gib(mem.output_size_in_bytes)} "
          f"(aliased {gib(mem.alias_size_in_bytes)}), temporaries {gib(mem.temp_size_in_bytes)}, peak ~{gib(peak)}")


if __name__ == "__main__":
    main()
