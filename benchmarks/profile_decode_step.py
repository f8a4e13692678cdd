#!/usr/bin/env python3
"""Where one JaxEngine decode step spends its time, from a `jax.profiler` trace, beside transformers' own
one-token step on the same rows: the engine's `decode` program (jax_programs.decode) on the sampler's
per-layer params and cache, XLA's CPU ops summed by kind and the costliest single ops with their HLO
shapes. bench_engine.py says how fast the engine is on a workload; this says what a decode step is made of.

    python benchmarks/profile_decode_step.py --checkpoint smollm2 --rows 8 --capacity 512
    python benchmarks/profile_decode_step.py --checkpoint smollm2 --rows 1,8,16 --torch       # rows sweep, both sides
    python benchmarks/profile_decode_step.py --xla-option xla_cpu_experimental_ynn_fusion_type=  # XLA's own matmuls off

Each row decodes at position capacity - 100 (its cache holds that many earlier entries); greedy, fp32. On CPU
`ynn_fusion` is XLA's matmul (YNNPACK, with what it fuses), `dot` the matmuls it leaves to its own emitter.
`--xla-option` compiles the decode program with that XLA option (jax.jit's compiler_options) beside the default
one. The step times are minima and medians over --steps calls alternated by benchmarks/interleave.py, so
the machine's load (printed) moves all sides alike; on a shared machine read the ratios, not the times.
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
from typing import Any, Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_arg import resolve_checkpoint  # noqa: E402
from interleave import alternate, summary, timed  # noqa: E402
from profile_train_step import op_times  # noqa: E402

from jaxwebrl.engines.jax_programs import decode  # noqa: E402
from jaxwebrl.models import load_hf  # noqa: E402
from jaxwebrl.models.decoder import init_layer_cache, unstack_layers  # noqa: E402


def parse_option(text: str) -> dict[str, Any]:
    """"name=value" -> {name: value} for jax.jit's compiler_options (an empty value stays the empty string)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--xla-option {text!r}: expected NAME=VALUE, e.g. xla_cpu_experimental_ynn_fusion_type=")
    return {name: value}


def step_fn(cfg: Any, params: Any, rows: int, capacity: int,
            options: dict[str, Any] | None) -> tuple[Callable[[], jax.Array], str]:
    """One decode step of `rows` rows as a no-argument call that runs it (the cache donated and kept), and
    the compiled program's HLO text."""
    program = jax.jit(lambda p, c, *a: decode(cfg, p, c, *a), donate_argnums=(1,), compiler_options=options)
    per_row = (jnp.ones((rows,), jnp.int32), jnp.full((rows,), capacity - 100, jnp.int32),
               jnp.zeros((rows,), jnp.uint32), jnp.zeros((rows,), jnp.int32), jnp.ones((rows,), jnp.float32),
               jnp.zeros((rows,), jnp.int32), jnp.ones((rows,), jnp.float32), jnp.ones((rows,), bool))
    box = [init_layer_cache(cfg, rows, capacity)]
    compiled = program.lower(params, box[0], *per_row).compile()  # compiled once: timed, traced and shown

    def run() -> jax.Array:
        box[0], tokens, _ = compiled(params, box[0], *per_row)
        return tokens.block_until_ready()

    run()
    return run, compiled.as_text()


def torch_step(checkpoint: str, rows: int, past: int, threads: int) -> Callable[[], Any]:
    """transformers' one-token forward of `rows` rows after `past` cached tokens (the new entry removed after)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        cache = model(torch.ones((rows, past), dtype=torch.long), use_cache=True).past_key_values
    token = torch.ones((rows, 1), dtype=torch.long)

    def run() -> Any:
        with torch.no_grad():
            out = model(token, past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to `past` entries (this transformers takes the count to remove)
        return out.logits

    run()
    return run


def ops_of_one_step(run: Callable[[], Any], program_text: str, steps: int, top: int) -> None:
    """Trace `steps` calls of `run`; print XLA's ops by kind and the `top` costliest single ops."""
    out = tempfile.mkdtemp(prefix="decode_trace_")
    with jax.profiler.trace(out):
        for _ in range(steps):
            run()
    kinds, calls = op_times(out, steps)
    total = sum(kinds.values())
    print(f"  XLA ops {total / 1e3:.1f} ms per step")
    for kind, us in kinds.most_common(6):
        print(f"  {us / 1e3:8.1f} ms  {100 * us / total:5.1f}%  {calls[kind]:4d} calls  {kind}")
    path = glob.glob(os.path.join(out, "**", "*.trace.json.gz"), recursive=True)[0]
    single: collections.Counter[str] = collections.Counter()
    for e in json.load(gzip.open(path))["traceEvents"]:
        if e.get("ph") == "X" and "dur" in e and re.match(r"(dot|(.*_)?fusion)(\.\d+)?$", e["name"]):
            single[e["name"]] += e["dur"] / steps
    print("  costliest single ops (HLO shape, first operand):")
    for name, us in single.most_common(top):
        m = re.search(r"%" + re.escape(name) + r" = (\S+) \w+\((%[^,)]+)", program_text)
        print(f"  {us / 1e3:8.2f} ms  {name}  {m.group(1) + ' <- ' + m.group(2) if m else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default="smollm2", help="a HF checkpoint directory, or a pretrained name")
    ap.add_argument("--rows", default="8", help="decoding rows, comma-separated for a sweep")
    ap.add_argument("--capacity", type=int, default=512, help="cache positions per row (the engine's bucket)")
    ap.add_argument("--steps", type=int, default=8, help="timed calls per side (alternated)")
    ap.add_argument("--top", type=int, default=6, help="single ops listed")
    ap.add_argument("--xla-option", action="append", default=[], help="NAME=VALUE: also profile with this option")
    ap.add_argument("--torch", action="store_true", help="also time transformers' one-token step")
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args()

    path = resolve_checkpoint(args.checkpoint)
    cfg, params = load_hf(path, dtype="float32", param_dtype="float32")
    params = unstack_layers(params)  # the engine's sampler layout
    variants: dict[str, dict[str, Any] | None] = {"default": None, **{t: parse_option(t) for t in args.xla_option}}
    print(f"{cfg.architecture} layers={cfg.num_layers} hidden={cfg.hidden_size} vocab={cfg.vocab_size}, capacity "
          f"{args.capacity}, fp32, CPU x{os.cpu_count()}, loadavg {os.getloadavg()[0]:.1f}")
    for rows in [int(r) for r in args.rows.split(",")]:
        programs = {name: step_fn(cfg, params, rows, args.capacity, opt) for name, opt in variants.items()}
        runs = {name: run for name, (run, _) in programs.items()}
        if args.torch:
            runs["transformers"] = torch_step(str(path), rows, args.capacity - 100, args.torch_threads)
        times = alternate({name: timed(run) for name, run in runs.items()}, rounds=args.steps, steps=1)
        print(f"\nrows {rows}: step time min / median over {args.steps} alternated calls (loadavg "
              f"{os.getloadavg()[0]:.1f}); the ratio is the median of per-call ratios to the default program")
        for name, t in times.items():
            ratio = summary(times, name, "default")["ratio"]
            print(f"  {name:40s} {min(t) * 1e3:8.1f} / {np.median(t) * 1e3:8.1f} ms   default / this {ratio:.2f}x")
        for name, (run, text) in programs.items():
            print(f"\nrows {rows}, {name}: where the step goes")
            ops_of_one_step(run, text, 3, args.top)


if __name__ == "__main__":
    main()
