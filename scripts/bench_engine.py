#!/usr/bin/env python3
"""Generated tokens/s of JaxEngine vs batched `transformers.generate` vs an sglang-jax server, same model,
same load: N concurrent requests with prompts of random length and a fixed number of new tokens, EOS
disabled everywhere so every request generates exactly that many tokens.

The model is a random Qwen3 (default 8 layers, hidden 512, 4 heads of head_dim 128 -- sglang-jax needs
head_dim 128) written as a HF checkpoint that all three load. Each engine runs the workload once to warm up
(XLA compiles, torch allocations) and once timed; the timed run is what the ratios use.

  .venv/bin/python scripts/bench_engine.py                  # all three (sglang needs .venv-sglang)
  .venv/bin/python scripts/bench_engine.py --skip-sglang --requests 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from jaxwebrl.engines import JaxEngine, SamplingParams, SGLangEngine, SGLangServer  # noqa: E402
from jaxwebrl.engines.sglang_server import default_sglang_jax_python  # noqa: E402
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config  # noqa: E402


Workload = tuple[list[list[int]], list[list[int]]]


def workload(args: argparse.Namespace, vocab: int) -> Workload:
    """(warm-up prompts, timed prompts): same lengths, different tokens, so SGLang's prefix cache cannot
    skip the timed run's prefill (JaxEngine and transformers have no prefix cache)."""
    rng = np.random.default_rng(args.seed)
    lengths = rng.integers(args.min_prompt, args.max_prompt + 1, args.requests)
    return tuple([list(map(int, rng.integers(3, vocab, n))) for n in lengths] for _ in range(2))  # type: ignore[return-value]


async def _engine_run(engine: Any, prompts: list[list[int]], sp: SamplingParams) -> tuple[float, int]:
    t0 = time.perf_counter()
    gens = await asyncio.gather(*(engine.generate(p, sp) for p in prompts))
    return time.perf_counter() - t0, sum(len(g.token_ids) for g in gens)


def bench_jax(path: Path, prompts: Workload, args: argparse.Namespace) -> dict[str, float]:
    max_len = args.max_prompt + args.new_tokens
    engine = JaxEngine.from_checkpoint(path, num_slots=args.slots or args.requests, max_len=max_len)
    sp = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)

    async def main() -> dict[str, float]:
        try:
            cold, _ = await _engine_run(engine, prompts[0], sp)
            warm, tokens = await _engine_run(engine, prompts[1], sp)
            return {"cold_s": cold, "warm_s": warm, "tokens": tokens, "tok_s": tokens / warm,
                    "compiles": sum(engine.compile_counts().values())}
        finally:
            await engine.close()

    return asyncio.run(main())


def bench_transformers(path: Path, prompts: Workload, args: argparse.Namespace) -> dict[str, float]:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    pad = 0

    def run(batch: list[list[int]]) -> tuple[float, int]:
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(batch):  # left padding, as decoder-only generate expects
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=args.new_tokens,
                                 min_new_tokens=args.new_tokens, pad_token_id=pad)
        return time.perf_counter() - t0, int((out.shape[1] - width) * out.shape[0])

    cold, _ = run(prompts[0])
    warm, tokens = run(prompts[1])
    return {"cold_s": cold, "warm_s": warm, "tokens": tokens, "tok_s": tokens / warm}


def bench_sglang(path: Path, prompts: Workload, args: argparse.Namespace) -> dict[str, float] | str:
    python = default_sglang_jax_python()
    if python is None:
        return "skipped: no .venv-sglang (run scripts/setup_sglang_env.sh)"
    ctx = 1 << (args.max_prompt + args.new_tokens).bit_length()
    server = SGLangServer(path, device="cpu", python=python, context_length=ctx,
                          max_running_requests=args.slots or args.requests,
                          max_total_tokens=max(8192, args.requests * ctx))
    t0 = time.perf_counter()
    server.start()
    startup = time.perf_counter() - t0
    sp = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)

    async def main() -> dict[str, float]:
        engine = SGLangEngine(server.url)
        try:
            cold, _ = await _engine_run(engine, prompts[0], sp)
            warm, tokens = await _engine_run(engine, prompts[1], sp)
            return {"startup_s": startup, "cold_s": cold, "warm_s": warm, "tokens": tokens, "tok_s": tokens / warm}
        finally:
            await engine.close()

    try:
        return asyncio.run(main())
    finally:
        server.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--slots", type=int, default=0, help="engine slots / server max running requests (0: = requests)")
    p.add_argument("--min-prompt", type=int, default=64)
    p.add_argument("--max-prompt", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-sglang", action="store_true")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()

    cfg = tiny_config("qwen3", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                      num_kv_heads=args.kv_heads, head_dim=args.head_dim, intermediate_size=args.intermediate,
                      vocab_size=args.vocab, max_position_embeddings=2048)
    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        path = Path(tmp) / "model"
        cfg, _ = make_tiny_checkpoint(path, cfg, seed=0, std=0.05)
        prompts = workload(args, cfg.vocab_size)
        print(f"model: qwen3 L={cfg.num_layers} D={cfg.hidden_size} H={cfg.num_heads}x{cfg.head_dim} "
              f"KV={cfg.num_kv_heads} F={cfg.intermediate_size} V={cfg.vocab_size} params={cfg.num_params() / 1e6:.1f}M")
        print(f"load: {args.requests} concurrent requests, prompts {args.min_prompt}-{args.max_prompt} tokens "
              f"(sum {sum(map(len, prompts[1]))}), {args.new_tokens} new tokens each, EOS disabled, fp32, "
              f"{os.cpu_count()} CPU cores, loadavg {os.getloadavg()[0]:.1f}", flush=True)
        results: dict[str, Any] = {}
        results["jax"] = bench_jax(path, prompts, args)
        print(f"JaxEngine:              {results['jax']}", flush=True)
        if not args.skip_transformers:
            results["transformers"] = bench_transformers(path, prompts, args)
            print(f"transformers.generate:  {results['transformers']}", flush=True)
        if not args.skip_sglang:
            results["sglang_jax"] = bench_sglang(path, prompts, args)
            print(f"sglang-jax server:      {results['sglang_jax']}", flush=True)

    print("\ngenerated tokens/s (warm run):")
    for name, r in results.items():
        if isinstance(r, dict):
            print(f"  {name:14s} {r['tok_s']:8.1f} tok/s   ({r['tokens']} tokens in {r['warm_s']:.2f}s; "
                  f"cold run {r['cold_s']:.2f}s)")
        else:
            print(f"  {name:14s} {r}")
    jax_rate = results["jax"]["tok_s"]
    for name in ("transformers", "sglang_jax"):
        if isinstance(results.get(name), dict):
            print(f"  ratio JaxEngine / {name}: {jax_rate / results[name]['tok_s']:.2f}x")
    print(f"  loadavg after: {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
