"""Forward+backward tokens/s: our Flax decoder (jitted) vs transformers on PyTorch, same config, same CPU.

    python benchmarks/bench_model.py [--layers 8 --hidden 512 --seq 512 --batch 4 --steps 2 --rounds 5] [--scan_layers]

Both sides compute the mean next-token NLL over the batch and its gradient w.r.t. all parameters, in
fp32, from the same weights (ours are exported and loaded by transformers). Ours runs with layers unrolled
(the main job's setting for small models, jaxwebrl/recipes/local.py; `--scan_layers` for jax.lax.scan over
layers as the large-model configs use). Both sides are set up and warmed up, then take turns (`--rounds`
rounds of `--steps` steps, order reversed every round; benchmarks/interleave.py) so load from other jobs
hits both alike. Prints the median step time of each and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from jaxwebrl.models import export_hf, forward, init_params, token_logprobs
from jaxwebrl.models.config import ModelConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from interleave import alternate, summary, timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=2, help="steps per side per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scan_layers", action="store_true", help="ours with the layers under jax.lax.scan")
    ap.add_argument("--arch", default="qwen3", choices=["llama", "qwen2", "qwen3"])
    args = ap.parse_args()

    heads = args.hidden // 64
    cfg = ModelConfig(architecture=args.arch, vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.hidden * 3, num_layers=args.layers, num_heads=heads,
                      num_kv_heads=max(1, heads // 2), head_dim=64, qk_norm=args.arch == "qwen3",
                      attention_bias=args.arch == "qwen2", max_position_embeddings=args.seq,
                      scan_layers=args.scan_layers, remat=False)
    params = init_params(cfg, jax.random.key(0))
    rng = np.random.default_rng(0)
    tokens_np = rng.integers(0, args.vocab, (args.batch, args.seq))
    tokens_count = args.batch * (args.seq - 1)

    def loss_fn(p, tokens):
        pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        logits, _ = forward(cfg, p, tokens, pos)
        return -token_logprobs(logits[:, :-1], tokens[:, 1:]).mean()

    step = jax.jit(jax.value_and_grad(loss_fn))
    tokens = jnp.asarray(tokens_np)
    loss, grads = step(params, tokens)
    jax.block_until_ready(grads)  # compile

    def jax_step() -> None:
        jax.block_until_ready(step(params, tokens))

    with tempfile.TemporaryDirectory() as d:
        export_hf(cfg, params, d)
        model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    tt = torch.tensor(tokens_np)

    def torch_step() -> float:
        model.zero_grad(set_to_none=True)
        out = model(input_ids=tt).logits
        l = torch.nn.functional.cross_entropy(out[:, :-1].reshape(-1, args.vocab), tt[:, 1:].reshape(-1))
        l.backward()
        return l.item()

    torch_loss = torch_step()  # warm-up
    times = alternate({"jaxwebrl": timed(jax_step), "torch": timed(torch_step)}, args.rounds, args.steps)
    s = summary(times, "jaxwebrl", "torch")
    jax_time, torch_time = s["jaxwebrl_step_s"], s["torch_step_s"]
    print(f"config: {args.arch} layers={args.layers} hidden={args.hidden} seq={args.seq} batch={args.batch} "
          f"vocab={args.vocab} params={cfg.num_params()/1e6:.1f}M fp32, CPU x{os.cpu_count()}, torch threads={torch.get_num_threads()}, "
          f"jaxwebrl layers {'scanned' if args.scan_layers else 'unrolled'}")
    print(f"loss check: jax {float(loss):.5f}  torch {torch_loss:.5f}")
    print(f"interleaved: {args.rounds} rounds x {args.steps} steps per side, order alternating")
    for name, t, label in (("jaxwebrl", jax_time, "jaxwebrl (Flax, jit)      "), ("torch", torch_time, "transformers (PyTorch CPU)")):
        per = ", ".join(f"{x * 1e3:.0f}" for x in times[name])
        print(f"{label}: {t*1e3:9.1f} ms/step  {tokens_count / t:9.1f} tokens/s (median; rounds: {per} ms)")
    print(f"ratio jaxwebrl / transformers (median of per-round ratios): {s['ratio']:.2f}x "
          f"(rounds {s['ratio_min']:.2f}-{s['ratio_max']:.2f}x)")


if __name__ == "__main__":
    main()
