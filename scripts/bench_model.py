"""Forward+backward tokens/s: our Flax decoder (jitted) vs transformers on PyTorch, same config, same CPU.

    python scripts/bench_model.py [--layers 8 --hidden 512 --seq 512 --batch 4 --steps 5]

Both sides compute the mean next-token NLL over the batch and its gradient w.r.t. all parameters, in
fp32, from the same weights (ours are exported and loaded by transformers). Prints both and the ratio.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from jaxwebrl.models import export_hf, forward, init_params, token_logprobs
from jaxwebrl.models.config import ModelConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--arch", default="qwen3", choices=["llama", "qwen2", "qwen3"])
    args = ap.parse_args()

    heads = args.hidden // 64
    cfg = ModelConfig(architecture=args.arch, vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.hidden * 3, num_layers=args.layers, num_heads=heads,
                      num_kv_heads=max(1, heads // 2), head_dim=64, qk_norm=args.arch == "qwen3",
                      attention_bias=args.arch == "qwen2", max_position_embeddings=args.seq)
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
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss, grads = step(params, tokens)
        jax.block_until_ready(grads)
    jax_time = (time.perf_counter() - t0) / args.steps

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
    t0 = time.perf_counter()
    for _ in range(args.steps):
        torch_step()
    torch_time = (time.perf_counter() - t0) / args.steps

    jax_tps, torch_tps = tokens_count / jax_time, tokens_count / torch_time
    print(f"config: {args.arch} layers={args.layers} hidden={args.hidden} seq={args.seq} batch={args.batch} "
          f"vocab={args.vocab} params={cfg.num_params()/1e6:.1f}M fp32, CPU x{os.cpu_count()}, torch threads={torch.get_num_threads()}")
    print(f"loss check: jax {float(loss):.5f}  torch {torch_loss:.5f}")
    print(f"jaxwebrl (Flax, jit)      : {jax_time*1e3:9.1f} ms/step  {jax_tps:9.1f} tokens/s")
    print(f"transformers (PyTorch CPU): {torch_time*1e3:9.1f} ms/step  {torch_tps:9.1f} tokens/s")
    print(f"ratio jaxwebrl / transformers: {jax_tps / torch_tps:.2f}x")


if __name__ == "__main__":
    main()
