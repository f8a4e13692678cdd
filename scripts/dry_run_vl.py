#!/usr/bin/env python3
"""Ahead-of-time compile of the vision-language train step at the papers' shapes on fake CPU devices;
prints per-device memory. Nothing is allocated (abstract params and batch).

  XLA_FLAGS=--xla_force_host_platform_device_count=8 .venv/bin/python scripts/dry_run_vl.py \
      --model qwen3_vl_4b --seq-len 32768 --micro-batch 8 --patches-per-row 3520

OpenWebRL: Qwen3-VL-4B, 32,768 context, one 1280x720 screenshot per turn sample (the release processor
makes it a 44 x 80 patch grid = 3,520 patches, 880 image tokens). WebGym: Qwen3-VL-8B, same per-turn
shape (its context is memory + the current screenshot). The model configs below are the public
config.json values of Qwen/Qwen3-VL-4B-Instruct and -8B-Instruct.
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
import optax  # noqa: E402

from jaxwebrl.data.vl_batch import patch_bucket  # noqa: E402
from jaxwebrl.models.vl_config import VLConfig  # noqa: E402
from jaxwebrl.sharding import make_mesh  # noqa: E402
from jaxwebrl.train.losses import LossConfig  # noqa: E402
from jaxwebrl.train.step import StepConfig, lower_train_step  # noqa: E402

_TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)
_ROPE = {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}


def _hf(hidden: int, inter: int, tie: bool, v_depth: int, v_hidden: int, v_inter: int, deepstack: list[int]) -> dict:
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": tie,
        **_TOKENS,
        "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": hidden, "intermediate_size": inter,
                        "max_position_embeddings": 262144, "num_attention_heads": 32, "num_hidden_layers": 36,
                        "num_key_value_heads": 8, "rms_norm_eps": 1e-6, "rope_scaling": _ROPE, "rope_theta": 5000000,
                        "tie_word_embeddings": tie, "vocab_size": 151936, "bos_token_id": 151643,
                        "eos_token_id": 151645},
        "vision_config": {"deepstack_visual_indexes": deepstack, "depth": v_depth, "hidden_act": "gelu_pytorch_tanh",
                          "hidden_size": v_hidden, "in_channels": 3, "intermediate_size": v_inter, "num_heads": 16,
                          "num_position_embeddings": 2304, "out_hidden_size": hidden, "patch_size": 16,
                          "spatial_merge_size": 2, "temporal_patch_size": 2},
    }


MODELS = {
    "qwen3_vl_4b": _hf(2560, 9728, True, 24, 1024, 4096, [5, 11, 17]),
    "qwen3_vl_8b": _hf(4096, 12288, False, 27, 1152, 4304, [8, 16, 24]),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3_vl_4b", choices=sorted(MODELS))
    ap.add_argument("--seq-len", type=int, default=32768)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--patches-per-row", type=int, default=3520, help="image patches per sample (1280x720: 3520)")
    ap.add_argument("--mesh", default="data=1,fsdp=8,tensor=1")
    ap.add_argument("--freeze-vision", action="store_true")
    args = ap.parse_args()
    sizes = {k: int(v) for k, v in (kv.split("=") for kv in args.mesh.split(","))}
    mesh = make_mesh(sizes)
    cfg = VLConfig.from_hf(MODELS[args.model]).replace(dtype="bfloat16", param_dtype="float32", remat=True,
                                                      scan_layers=True)
    patches = patch_bucket(args.patches_per_row * args.micro_batch, cfg.vision.merge_unit)
    tx = optax.adamw(1e-6, b1=0.9, b2=0.98, weight_decay=0.1)  # OpenWebRL's optimizer
    step_cfg = StepConfig(cfg, LossConfig(kind="grpo", eps_low=0.2, eps_high=0.28), logits_chunk=1024,
                          freeze_vision=args.freeze_vision)
    t0 = time.perf_counter()
    compiled = lower_train_step(step_cfg, tx, mesh, args.accum, args.micro_batch, args.seq_len, num_patches=patches)
    secs = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    from jaxwebrl.models import vl

    n = sum(int(a.size) for a in jax.tree.leaves(vl.abstract_params(cfg)))
    peak = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
    print(f"VL dry run: {args.model} ({n / 1e9:.2f}B params, fp32 master, bf16 compute, remat), batch [accum, micro, T] "
          f"= [{args.accum}, {args.micro_batch}, {args.seq_len}], {patches} patch rows per micro-batch "
          f"({args.patches_per_row} per sample), freeze_vision={args.freeze_vision}")
    print(f"  devices {len(jax.devices())} x {jax.devices()[0].device_kind}, mesh {sizes}; compiled in {secs:.0f} s")
    print(f"  per device: arguments {gib(mem.argument_size_in_bytes)}, outputs {gib(mem.output_size_in_bytes)} "
          f"(aliased {gib(mem.alias_size_in_bytes)}), temporaries {gib(mem.temp_size_in_bytes)}, peak ~{gib(peak)}")


if __name__ == "__main__":
    main()
