#!/usr/bin/env python3
"""Where the jitted fwd+bwd step spends its time, from a `jax.profiler` trace: XLA's CPU ops summed by kind
(the op name without its number), per step. bench_model.py says how fast the step is beside transformers;
this says why.

    python benchmarks/profile_train_step.py --checkpoint smollm2 --seq 256 --batch 2
    python benchmarks/profile_train_step.py --checkpoint smollm2 --top 20 --out /tmp/step_trace  # keep the trace

The step is bench_model.py's (mean next-token NLL of random tokens and its gradient w.r.t. every parameter,
fp32, layers unrolled or `--scan_layers`). On CPU `ynn_fusion` is XLA's matmul (with what it fuses), `dot` the
matmuls it leaves to its own emitter; the rest are elementwise and copy fusions. The trace (Perfetto format)
stays in --out for a closer look.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_arg import resolve_checkpoint  # noqa: E402

from jaxwebrl.models import forward, load_hf, token_logprobs  # noqa: E402


def op_times(trace_dir: str, steps: int) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Microseconds per step and calls per step of each XLA op kind in the trace under `trace_dir`."""
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    events = json.load(gzip.open(path))["traceEvents"]
    time, calls = collections.Counter(), collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or "dur" not in e or name.startswith("$") or "ThunkExecutor" in name:
            continue
        kind = re.sub(r"\.\d+$", "", name)
        time[kind] += e["dur"] / steps
        calls[kind] += 1
    return time, collections.Counter({k: v // steps for k, v in calls.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="smollm2", help="a HF checkpoint directory, or a pretrained name")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="profiled steps (after one warm-up step)")
    ap.add_argument("--scan_layers", action="store_true")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", default=None, help="keep the trace here (default: a temporary directory)")
    args = ap.parse_args()

    cfg, params = load_hf(resolve_checkpoint(args.checkpoint), scan_layers=args.scan_layers, remat=False,
                          dtype="float32", param_dtype="float32")
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (args.batch, args.seq))
    mask = np.ones_like(tokens, np.int32)

    def loss_fn(p: object, tokens: jax.Array, mask: jax.Array) -> jax.Array:
        pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        logits, _ = forward(cfg, p, tokens, pos, segment_ids=mask)
        weight = mask[:, 1:].astype(jnp.float32)
        return -(token_logprobs(logits[:, :-1], tokens[:, 1:]) * weight).sum() / weight.sum()

    step = jax.jit(jax.value_and_grad(loss_fn))
    jax.block_until_ready(step(params, tokens, mask))
    out = args.out or tempfile.mkdtemp(prefix="step_trace_")
    with jax.profiler.trace(out):
        for _ in range(args.steps):
            jax.block_until_ready(step(params, tokens, mask))
    time, calls = op_times(out, args.steps)
    total = sum(time.values())
    print(f"{cfg.architecture} layers={cfg.num_layers} hidden={cfg.hidden_size} batch {args.batch} x {args.seq}, fp32, "
          f"CPU x{os.cpu_count()}, loadavg {os.getloadavg()[0]:.1f}: XLA ops {total / 1e3:.0f} ms per step")
    for kind, us in time.most_common(args.top):
        print(f"  {us / 1e3:8.0f} ms  {100 * us / total:5.1f}%  {calls[kind]:5d} calls  {kind}")
    print(f"trace: {out}")


if __name__ == "__main__":
    main()
