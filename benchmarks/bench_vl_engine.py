#!/usr/bin/env python3
"""Generated tokens/s with one image per request: JaxEngine (continuous batching, the vision encoder in
prefill) vs batched `transformers.generate`, same tiny random Qwen3-VL / Qwen2.5-VL checkpoint, same
processor outputs (the checkpoint's image processor and placeholder expansion), greedy, EOS disabled so
every request generates exactly --new-tokens. Each side runs the workload once to warm up (XLA compiles,
torch allocations) and once timed. Prints both, the ratio, and whether the greedy tokens agree.

  .venv/bin/python benchmarks/bench_vl_engine.py [--arch qwen3_vl --requests 8 --slots 4 --new-tokens 32 --image 210x160]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402

from jaxwebrl.engines import ImageInput, JaxEngine, SamplingParams  # noqa: E402
from jaxwebrl.models.processor import load_processor  # noqa: E402
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint  # noqa: E402

from interleave import await_timed, call_timed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="qwen3_vl", choices=["qwen3_vl", "qwen2_5_vl"])
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--image", default="210x160", help="HxW of each request's image (MiniWoB screenshots: 210x160)")
    args = ap.parse_args()
    h, w = (int(v) for v in args.image.split("x"))
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory() as d:
        cfg, _, _ = make_tiny_vl_checkpoint(d, args.arch, std=0.1)
        proc = load_processor(d)
        model = transformers.AutoModelForImageTextToText.from_pretrained(d, dtype=torch.float32).eval()
        engine = JaxEngine.from_checkpoint(d, num_slots=args.slots, max_len=512, buckets=(128, 256, 512))
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(args.requests)]
    texts = [proc.apply_chat_template([{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "click the submit button " * (1 + i % 3)}]}],
        tokenize=False, add_generation_prompt=True) for i in range(args.requests)]
    requests = []
    for text, image in zip(texts, images):
        out = proc(text=[text], images=[image], return_tensors="np")
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, format="PNG")
        grid = tuple(int(v) for v in out["image_grid_thw"][0])
        requests.append(([int(t) for t in out["input_ids"][0]], [ImageInput(buf.getvalue(), grid, out["pixel_values"])]))
    params = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)

    async def run_jax() -> list[list[int]]:
        gens = await asyncio.gather(*(engine.generate(ids, params, images=ims) for ids, ims in requests))
        return [g.token_ids for g in gens]

    async def jax_side() -> tuple[float, list[list[int]]]:
        await run_jax()  # warm-up: compiles
        timed_run = await await_timed(run_jax())
        await engine.close()
        return timed_run

    jax_time, jax_tokens = asyncio.run(jax_side())

    proc.tokenizer.padding_side = "left"
    batch = proc(text=texts, images=images, padding=True, return_tensors="pt")

    def torch_run() -> torch.Tensor:
        with torch.no_grad():
            return model.generate(**batch, max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=None,
                                  pad_token_id=cfg.text.pad_token_id)

    torch_run()  # warm-up
    torch_time, out = call_timed(torch_run)
    torch_tokens = out[:, batch["input_ids"].shape[1]:].tolist()

    n = args.requests * args.new_tokens
    jax_tps, torch_tps = n / jax_time, n / torch_time
    agree = sum(a == b for a, b in zip(jax_tokens, torch_tokens))
    print(f"config: {args.arch} tiny (text hidden {cfg.text.hidden_size} x {cfg.text.num_layers}, vision "
          f"{cfg.vision.hidden_size} x {cfg.vision.depth}); {args.requests} requests x 1 image {h}x{w} -> grid "
          f"{list(requests[0][1][0].grid_thw)}, prompts {min(len(r[0]) for r in requests)}-"
          f"{max(len(r[0]) for r in requests)} tokens, {args.new_tokens} new tokens each; JaxEngine {args.slots} "
          f"slots; transformers one batch (left padding); CPU x{os.cpu_count()}, torch threads={torch.get_num_threads()}")
    print(f"greedy tokens equal on {agree}/{args.requests} requests")
    print(f"jaxwebrl JaxEngine         : {jax_time:7.2f} s  {jax_tps:8.1f} tokens/s")
    print(f"transformers.generate      : {torch_time:7.2f} s  {torch_tps:8.1f} tokens/s")
    print(f"ratio JaxEngine / transformers: {jax_tps / torch_tps:.2f}x")


if __name__ == "__main__":
    main()
