#!/usr/bin/env python3
"""How far the logprobs an sglang-jax server returns are from ours, on a long prompt (issue 24, item 6).

What the trainer sees: a rollout's sampled tokens come with the server's logprobs, and the loss recomputes them
with our forward; the difference is what importance ratios measure when the policy has not changed. Measured
on one random Qwen3 (default 8 layers, hidden 512, head_dim 128, rope_theta 1e6, float32) written as a HF
checkpoint, greedy, for a short and a long prompt (default 256 and 4096 random tokens, 32 new tokens):

  sglang-jax vs trainer     the server's logprobs vs `jaxwebrl.models.forward` on prompt + the server's tokens
  sglang-jax vs transformers the same tokens through transformers (PyTorch, float32): an independent reference
  trainer vs transformers   our forward vs transformers on those tokens
  JaxEngine vs trainer      our sampler's logprobs vs our forward on its own tokens
  sglang-jax vs trainer with sglang-jax's RoPE table   the first row again, our forward given the
                            inverse-frequency table sglang-jax computes (numpy float32 pow, taken from its venv)
                            instead of transformers' (torch pow): what is left once RoPE tables agree
and how many greedy tokens the server and the JaxEngine agree on. Max and mean |delta logprob| over the
generated tokens.

  .venv/bin/python studies/sglang_logprob_parity.py                       # 256 and 4096-token prompts
  .venv/bin/python studies/sglang_logprob_parity.py --lengths 4096 --dtype bfloat16
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
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxwebrl.engines import JaxEngine, SamplingParams, SGLangEngine, SGLangServer  # noqa: E402
from jaxwebrl.engines.sglang_server import default_sglang_jax_python  # noqa: E402
from jaxwebrl.models import forward, token_logprobs  # noqa: E402
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config  # noqa: E402


def trainer_logprobs(cfg: Any, params: Any, prompt: list[int], tokens: list[int],
                     inv_freq: np.ndarray | None = None) -> np.ndarray:
    """Our forward's logprobs of `tokens` after `prompt`; `inv_freq` replaces the RoPE table (a diagnostic)."""
    from jaxwebrl.models import decoder

    seq = jnp.asarray([prompt + tokens])
    original = decoder.inverse_frequencies
    if inv_freq is not None:
        decoder.inverse_frequencies = lambda _cfg: inv_freq
    try:
        logits, _ = jax.jit(lambda s: forward(cfg, params, s, jnp.arange(s.shape[1])[None]))(seq)
    finally:
        decoder.inverse_frequencies = original
    n = len(prompt)
    return np.asarray(token_logprobs(logits[0, n - 1 : -1], jnp.asarray(tokens), 1.0))


def sglang_jax_inv_freq(python: str, theta: float, dim: int) -> np.ndarray:
    """The RoPE table sglang-jax's RotaryEmbedding builds, computed by its own interpreter and numpy."""
    import subprocess

    code = (f"import numpy as np; t = 1.0 / ({theta!r} ** (np.arange(0, {dim}, 2, dtype=np.float32) / {dim})); "
            "print(t.dtype.name, ' '.join(float(x).hex() for x in t))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert out[0] == "float32", out[0]
    return np.asarray([float.fromhex(x) for x in out[1:]], np.float32)


def transformers_logprobs(path: Path, prompt: list[int], tokens: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits, -1)[torch.arange(len(tokens)), torch.tensor(tokens)]
    return lp.numpy()


def stats(a: Any, b: Any) -> dict[str, float]:
    d = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
    return {"max": float(d.max()), "mean": float(d.mean())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 4096])
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--rope-theta", type=float, default=1e6)
    p.add_argument("--std", type=float, default=0.05)
    p.add_argument("--dtype", default="float32", help="param and activation dtype of the checkpoint")
    p.add_argument("--no-transformers", action="store_true")
    p.add_argument("--server-log", default=None, help="sglang-jax's log (default: a temp file that is kept)")
    p.add_argument("--served-json", default="", help="reuse the server's answers saved by an earlier --json run")
    p.add_argument("--json", default="")
    args = p.parse_args()
    python = default_sglang_jax_python()
    if python is None:
        print("no .venv-sglang: run scripts/setup_sglang_env.sh", file=sys.stderr)
        return 2
    longest = max(args.lengths) + args.new_tokens
    ctx = 1 << longest.bit_length()  # the model's and the JaxEngine's length: a power of two >= prompt + new tokens
    # sglang-jax on CPU: room for the longest request and no more (its pool size sets the cost of each step).
    server_ctx = longest + 16
    cfg = tiny_config("qwen3", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                      num_kv_heads=args.kv_heads, head_dim=128, intermediate_size=args.intermediate,
                      vocab_size=args.vocab, rope_theta=args.rope_theta, max_position_embeddings=ctx,
                      dtype=args.dtype, param_dtype=args.dtype)
    rng = np.random.default_rng(0)
    sp = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)
    results: dict[str, Any] = {"config": vars(args), "load_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="logprob_parity_") as tmp:
        path = Path(tmp) / "model"
        cfg, params = make_tiny_checkpoint(path, cfg, seed=0, std=args.std)
        prompts = {n: list(map(int, rng.integers(3, min(cfg.vocab_size, 400), n))) for n in args.lengths}
        if not args.served_json:
            server = SGLangServer(path, device="cpu", python=python, context_length=server_ctx,
                                  max_total_tokens=server_ctx + 64, max_running_requests=1, log_path=args.server_log,
                                  startup_timeout=3600, extra_args=["--disable-precompile"])
            t0 = time.perf_counter()
            server.start()
            print(f"sglang-jax up in {time.perf_counter() - t0:.0f}s (context {server_ctx}, log {server.log_path})",
                  flush=True)

        async def serve() -> dict[int, Any]:
            client = SGLangEngine(server.url, request_timeout=3600)
            try:
                return {n: await client.generate(pr, sp) for n, pr in prompts.items()}
            finally:
                await client.close()

        async def local() -> dict[int, Any]:
            engine = JaxEngine(cfg, params, num_slots=1, max_len=ctx)
            try:
                return {n: await engine.generate(pr, sp) for n, pr in prompts.items()}
            finally:
                await engine.close()

        if args.served_json:  # the server's answers from an earlier run with the same arguments
            earlier = json.loads(Path(args.served_json).read_text())
            served = {n: SimpleNamespace(token_ids=earlier[str(n)]["served"]["tokens"],
                                         logprobs=earlier[str(n)]["served"]["logprobs"]) for n in prompts}
        else:
            try:
                served = asyncio.run(serve())
            finally:
                server.stop()
        ours = asyncio.run(local())
        from jaxwebrl.models.rope import inverse_frequencies

        sgl_table = sglang_jax_inv_freq(python, cfg.rope_theta, cfg.head_dim)
        differ = int((sgl_table != inverse_frequencies(cfg)).sum())
        results["rope_table_entries_differing_from_transformers"] = differ
        print(f"RoPE inverse frequencies: sglang-jax's differ from transformers' (= ours) in {differ} of "
              f"{len(sgl_table)} entries, max relative {np.max(np.abs(sgl_table / inverse_frequencies(cfg) - 1)):.1e}")
        for n, prompt in prompts.items():
            s, j = served[n], ours[n]
            agree = next((i for i, (a, b) in enumerate(zip(s.token_ids, j.token_ids)) if a != b), len(s.token_ids))
            tr_s = trainer_logprobs(cfg, params, prompt, s.token_ids)
            tr_j = trainer_logprobs(cfg, params, prompt, j.token_ids)
            tr_sgl_rope = trainer_logprobs(cfg, params, prompt, s.token_ids, sgl_table)
            row: dict[str, Any] = {
                "tokens_generated": len(s.token_ids), "greedy_tokens_equal_before_first_difference": agree,
                "mean_logprob": float(np.mean(s.logprobs)),
                "sglang_vs_trainer": stats(s.logprobs, tr_s), "jaxengine_vs_trainer": stats(j.logprobs, tr_j),
                "sglang_vs_jaxengine_common_prefix": stats(s.logprobs[:agree], j.logprobs[:agree]) if agree else None,
                "sglang_vs_trainer_with_sglang_rope_table": stats(s.logprobs, tr_sgl_rope),
                "served": {"tokens": s.token_ids, "logprobs": s.logprobs},
                "jaxengine": {"tokens": j.token_ids, "logprobs": j.logprobs},
            }
            if not args.no_transformers:
                hf = transformers_logprobs(path, prompt, s.token_ids)
                row["sglang_vs_transformers"] = stats(s.logprobs, hf)
                row["trainer_vs_transformers"] = stats(tr_s, hf)
            results[str(n)] = row
            print(f"\nprompt {n} tokens, {len(s.token_ids)} generated (greedy), mean logprob {row['mean_logprob']:.3f}; "
                  f"greedy tokens equal (sglang-jax vs JaxEngine): {agree}/{len(s.token_ids)}")
            for key, value in row.items():
                if isinstance(value, dict) and "max" in value:
                    print(f"  {key:36s} max |d logprob| {value['max']:.2e}  mean {value['mean']:.2e}")
    results["load_end"] = os.getloadavg()[0]
    print(f"\nmachine load {results['load_start']:.1f} -> {results['load_end']:.1f}, {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
