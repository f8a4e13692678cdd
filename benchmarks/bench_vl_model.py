"""Forward+backward tokens/s of the Flax VL model (jitted) vs transformers on PyTorch, one image per sample.

    python benchmarks/bench_vl_model.py [--arch qwen3_vl|qwen2_5_vl --batch 4 --steps 10 --image 210x160 --threads=1]

Same tiny random checkpoint on both sides (ours exported, transformers loads it), same processor outputs
(the checkpoint's own image processor and placeholder expansion), fp32. Both compute the mean next-token
NLL over the real tokens and its gradient w.r.t. all parameters (vision encoder included). Tokens counted
= all real input tokens, image placeholders included. Prints both and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "--threads=1" in sys.argv:  # must precede the jax import: one intra-op thread for XLA as for torch
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                               "intra_op_parallelism_threads=1").strip()

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

from jaxwebrl.models import token_logprobs, vl
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint

from interleave import per_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen3_vl", choices=["qwen3_vl", "qwen2_5_vl"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--image", default="210x160", help="HxW of each sample's image (MiniWoB screenshots: 210x160)")
    ap.add_argument("--threads", type=int, choices=[1], default=None,
                    help="--threads=1: one compute thread on both sides (fair on a loaded machine, where torch's "
                         "default pool spin-waits); default: each library's own threading")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    h, w = (int(v) for v in args.image.split("x"))

    with tempfile.TemporaryDirectory() as d:
        cfg, params, _ = make_tiny_vl_checkpoint(d, args.arch)
        proc = load_processor(d)
        model = transformers.AutoModelForImageTextToText.from_pretrained(d, dtype=torch.float32)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(args.batch)]
    texts = [proc.apply_chat_template([{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "click the submit button " * (1 + i % 2)}]}],
        tokenize=False, add_generation_prompt=True) for i in range(args.batch)]
    inp = proc(text=texts, images=images, padding=True, return_tensors="pt")
    mask = inp["attention_mask"].numpy()
    tokens_count = int(mask.sum())

    x = jax.tree.map(jnp.asarray, vl.prepare_inputs(cfg, inp["input_ids"], inp["attention_mask"], inp["pixel_values"],
                                                    inp["image_grid_thw"], inp["mm_token_type_ids"]))
    targets = jnp.asarray(inp["input_ids"].numpy()[:, 1:])
    weights = jnp.asarray((mask[:, 1:] * mask[:, :-1]).astype(np.float32))

    def loss_fn(p, inputs):
        logits, _ = vl.forward(cfg, p, inputs)
        return -(token_logprobs(logits[:, :-1], targets) * weights).sum() / weights.sum()

    step = jax.jit(jax.value_and_grad(loss_fn))

    def jax_step() -> tuple[jax.Array, Any]:
        return jax.block_until_ready(step(params, x))

    loss, _ = jax_step()  # compile
    jax_time = per_step(jax_step, args.steps, warmup=0)

    model.train()
    tmask = torch.tensor(mask[:, 1:] * mask[:, :-1], dtype=torch.float32)

    def torch_step() -> float:
        model.zero_grad(set_to_none=True)
        logits = model(**inp).logits[:, :-1]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                inp["input_ids"][:, 1:].reshape(-1), reduction="none")
        loss_t = (nll * tmask.reshape(-1)).sum() / tmask.sum()
        loss_t.backward()
        return loss_t.item()

    torch_loss = torch_step()  # warm-up
    torch_time = per_step(torch_step, args.steps, warmup=0)

    n_params = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(params))
    jax_tps, torch_tps = tokens_count / jax_time, tokens_count / torch_time
    print(f"config: {args.arch} tiny (text hidden {cfg.text.hidden_size} x {cfg.text.num_layers} layers, vision "
          f"{cfg.vision.hidden_size} x {cfg.vision.depth} blocks), params={n_params / 1e3:.0f}k fp32; batch "
          f"{args.batch} x 1 image {h}x{w} -> grid {inp['image_grid_thw'][0].tolist()}, {tokens_count} tokens "
          f"({int((inp['input_ids'] == cfg.image_token_id).sum())} image); CPU x{os.cpu_count()}, "
          f"torch threads={torch.get_num_threads()}, XLA single-thread={bool(args.threads)}")
    print(f"loss check: jax {float(loss):.5f}  torch {torch_loss:.5f}")
    print(f"jaxwebrl (Flax, jit)      : {jax_time * 1e3:9.1f} ms/step  {jax_tps:9.1f} tokens/s")
    print(f"transformers (PyTorch CPU): {torch_time * 1e3:9.1f} ms/step  {torch_tps:9.1f} tokens/s")
    print(f"ratio jaxwebrl / transformers: {jax_tps / torch_tps:.2f}x")


if __name__ == "__main__":
    main()
