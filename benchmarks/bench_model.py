"""Forward+backward tokens/s: our Flax decoder (jitted) vs transformers on PyTorch, same config, same CPU.

    python benchmarks/bench_model.py [--layers 8 --hidden 512 --seq 512 --batch 4 --steps 2 --rounds 5] [--scan_layers]
    python benchmarks/bench_model.py --checkpoint smollm2 --seq 256 --batch 2   # a real 30-layer model

Both sides compute the mean next-token NLL over the batch's real tokens and its gradient w.r.t. all
parameters, in fp32, from the same weights: a random model of the given shape (ours exported and loaded by
transformers), or `--checkpoint DIR` (any HF checkpoint directory, or `smollm2`: the pretrained
SmolLM2-135M-Instruct, fetched and converted once by `jaxwebrl.models.pretrained`) loaded by each side.
Ours runs with layers unrolled (the main job's setting for small models, jaxwebrl/recipes/local.py;
`--scan_layers` for jax.lax.scan over layers as the large-model configs use). Batches are [batch, seq] as the
trainer pads them; with `--vary-lengths` (the default) every round gets a new batch whose rows hold
sequences of new lengths (seq/2..seq, right-padded, padding masked out of attention and loss), the warm-up
another, and the output says how many programs each round compiled (a new length inside the padded shape
must compile nothing). Both sides are set up and warmed up, then take turns (`--rounds` rounds of `--steps`
steps, order reversed every round; benchmarks/interleave.py) so load from other jobs hits both alike. Prints
the median step time of each and the median of the per-round ratios; tokens/s counts the batch's positions.
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

from jaxwebrl.models import export_hf, forward, init_params, load_hf, token_logprobs
from jaxwebrl.models.config import ModelConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_arg import CompileCounter, resolve_checkpoint  # noqa: E402
from interleave import summary, timed  # noqa: E402


def batches(rng: np.random.Generator, n: int, batch: int, seq: int, vocab: int, vary: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` batches of (tokens, mask) [batch, seq]: with `vary`, each row's real length drawn in seq/2..seq
    (right-padded, mask 0 on padding), else every row full."""
    out = []
    for _ in range(n):
        tokens = rng.integers(0, vocab, (batch, seq))
        lengths = rng.integers(seq // 2, seq + 1, batch) if vary else np.full(batch, seq)
        mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
        out.append((tokens * mask, mask))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", default=None,
                    help="a HF checkpoint directory, or a pretrained name (smollm2); default: a random model of the "
                         "shape below")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=2, help="steps per side per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scan_layers", action="store_true", help="ours with the layers under jax.lax.scan")
    ap.add_argument("--arch", default="qwen3", choices=["llama", "qwen2", "qwen3"])
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="PyTorch's threads (0: its default, one per core; on a machine other jobs load, 1 can be faster)")
    ap.add_argument("--vary-lengths", action=argparse.BooleanOptionalAction, default=True,
                    help="a new batch of new row lengths (padded to --seq) every round and for the warm-up")
    args = ap.parse_args()

    compiles = CompileCounter()
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    tmp = tempfile.TemporaryDirectory()
    if args.checkpoint:
        path = resolve_checkpoint(args.checkpoint)
        cfg, params = load_hf(path, scan_layers=args.scan_layers, remat=False, dtype="float32", param_dtype="float32")
        name = f"{cfg.architecture} from {path}"
    else:
        heads = args.hidden // 64
        cfg = ModelConfig(architecture=args.arch, vocab_size=args.vocab, hidden_size=args.hidden,
                          intermediate_size=args.hidden * 3, num_layers=args.layers, num_heads=heads,
                          num_kv_heads=max(1, heads // 2), head_dim=64, qk_norm=args.arch == "qwen3",
                          attention_bias=args.arch == "qwen2", max_position_embeddings=args.seq,
                          scan_layers=args.scan_layers, remat=False)
        params = init_params(cfg, jax.random.key(0))
        path = tmp.name
        export_hf(cfg, params, path)
        name = f"random {args.arch}"
    vocab = cfg.vocab_size
    rng = np.random.default_rng(0)
    data = batches(rng, 1 + args.rounds, args.batch, args.seq, vocab, args.vary_lengths)  # warm-up, then rounds
    positions_count = args.batch * (args.seq - 1)

    def loss_fn(p, tokens, mask):
        pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        logits, _ = forward(cfg, p, tokens, pos, segment_ids=mask)
        weight = mask[:, 1:].astype(jnp.float32)
        return -(token_logprobs(logits[:, :-1], tokens[:, 1:]) * weight).sum() / weight.sum()

    step = jax.jit(jax.value_and_grad(loss_fn))
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    tmp.cleanup()
    batch = {"i": 0}  # the batch both sides run now: the warm-up's, then each round's

    def jax_step() -> None:
        tokens, mask = data[batch["i"]]
        jax.block_until_ready(step(params, tokens, mask))

    def torch_step() -> float:
        tokens, mask = (torch.tensor(a, dtype=torch.long) for a in data[batch["i"]])
        model.zero_grad(set_to_none=True)
        out = model(input_ids=tokens, attention_mask=mask).logits
        nll = torch.nn.functional.cross_entropy(out[:, :-1].reshape(-1, vocab), tokens[:, 1:].reshape(-1),
                                                reduction="none")
        weight = mask[:, 1:].reshape(-1).float()
        loss = (nll * weight).sum() / weight.sum()
        loss.backward()
        return loss.item()

    loss, _ = step(params, *data[0])
    torch_loss = torch_step()  # warm-up (compiles, allocations) on the warm-up batch
    warm_compiles = compiles.total
    sides = {"jaxwebrl": timed(jax_step), "torch": timed(torch_step)}
    times: dict[str, list[float]] = {n: [] for n in sides}
    round_compiles = []
    for r in range(args.rounds):
        batch["i"] = 1 + r
        before = compiles.total
        for n in (list(sides) if r % 2 == 0 else list(sides)[::-1]):  # order reversed every round
            times[n].append(sides[n](args.steps) / args.steps)
        round_compiles.append(compiles.total - before)
    s = summary(times, "jaxwebrl", "torch")
    jax_time, torch_time = s["jaxwebrl_step_s"], s["torch_step_s"]
    lengths = [sorted(int(m.sum()) for m in mask) for _, mask in data]
    print(f"config: {name} layers={cfg.num_layers} hidden={cfg.hidden_size} seq={args.seq} batch={args.batch} "
          f"vocab={vocab} params={cfg.num_params()/1e6:.1f}M fp32, CPU x{os.cpu_count()}, torch threads={torch.get_num_threads()}, "
          f"jaxwebrl layers {'scanned' if cfg.scan_layers else 'unrolled'}, loadavg {os.getloadavg()[0]:.1f}")
    print(f"row lengths: warm-up {lengths[0]}, rounds {lengths[1:]}")
    print(f"loss check (warm-up batch): jax {float(loss):.5f}  torch {torch_loss:.5f}")
    print(f"programs compiled: warm-up {warm_compiles}, then per round {round_compiles}")
    print(f"interleaved: {args.rounds} rounds x {args.steps} steps per side, order alternating")
    for name, t, label in (("jaxwebrl", jax_time, "jaxwebrl (Flax, jit)      "), ("torch", torch_time, "transformers (PyTorch CPU)")):
        per = ", ".join(f"{x * 1e3:.0f}" for x in times[name])
        print(f"{label}: {t*1e3:9.1f} ms/step  {positions_count / t:9.1f} tokens/s (median; rounds: {per} ms)")
    print(f"ratio jaxwebrl / transformers (median of per-round ratios): {s['ratio']:.2f}x "
          f"(rounds {s['ratio_min']:.2f}-{s['ratio_max']:.2f}x)")


if __name__ == "__main__":
    main()
