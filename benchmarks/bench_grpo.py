"""GRPO train-step throughput: jaxwebrl's compiled step vs Tunix's GRPO learner step, same model and batch.

  python benchmarks/bench_grpo.py                       # both sides, prints both and the ratio
  python benchmarks/bench_grpo.py --side=ours|tunix|torch   # one side alone

Tunix needs its own dependencies (tensorflow-datasets, qwix, ...), so it lives in a separate virtual
environment of this checkout with the same jax/flax versions, made by
  bash scripts/setup_tunix_env.sh          # -> <repo>/.venv-tunix (git-ignored)
and this script runs its Tunix side there (--tunix_python, or TUNIX_PYTHON). If that interpreter or Tunix
is missing, it says how to make it and compares against a PyTorch/transformers implementation of the same
loss instead (--side=torch).

Both sides: a tiny Qwen3 (same shapes), B sequences of prompt P + completion C tokens, token-mean GRPO loss
with clip 0.2, KL (k3) to precomputed reference logprobs with beta 0.04, AdamW; one optimizer step per
call. Ours runs with the model settings of the main job's recipe for this model size
(`jaxwebrl/recipes/local.py`: layers unrolled, no remat, fp32, `xla` attention; `--scan_layers` measures the
scanned-layers setting that the large-model configs use). Tunix runs as its GRPO learner wires its
trainer, layers unrolled as its Qwen3 always does.

Timing excludes compilation (warm-up steps) and blocks on the result. Both sides are set up first (Tunix
in a worker process of its venv), then take turns: `--rounds` rounds of `--steps` steps each, the order
reversed every round, so load from other jobs hits both alike (benchmarks/interleave.py). Printed:
the median step time of each side and the median over rounds of the per-round ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Callable

import numpy as np

from interleave import Worker, alternate, serve, summary, timed

SHAPE = dict(vocab_size=1024, hidden_size=128, intermediate_size=384, num_layers=4, num_heads=4, num_kv_heads=2,
             head_dim=32, rope_theta=1e6, rms_norm_eps=1e-6)
BETA, EPS, LR = 0.04, 0.2, 1e-5
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNIX_PYTHON = os.path.join(REPO, ".venv-tunix", "bin", "python")  # made by scripts/setup_tunix_env.sh


def make_batch(B: int, P: int, C: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "prompt": rng.integers(3, SHAPE["vocab_size"], (B, P)).astype(np.int32),
        "completion": rng.integers(3, SHAPE["vocab_size"], (B, C)).astype(np.int32),
        "advantages": rng.standard_normal(B).astype(np.float32),
        "old_lp": (-rng.random((B, C)) - 6.5).astype(np.float32),
        "ref_lp": (-rng.random((B, C)) - 6.5).astype(np.float32),
    }


def _warm(step: Callable[[], None], n_warmup: int) -> Callable[[], None]:
    for _ in range(max(n_warmup, 1)):  # the first call compiles
        step()
    return step


# ---- ours ----------------------------------------------------------------------------------------


def setup_ours(B: int, P: int, C: int, warmup: int, scan_layers: bool = False) -> Callable[[], None]:
    import jax

    from jaxwebrl.models import ModelConfig, init_params
    from jaxwebrl.sharding import make_mesh
    from jaxwebrl.train.losses import LossConfig
    from jaxwebrl.train.step import StepConfig, init_state, make_train_step
    from jaxwebrl.train.optim import OptimConfig, make_optimizer

    mc = ModelConfig(architecture="qwen3", qk_norm=True, scan_layers=scan_layers, remat=False, **SHAPE)
    mesh = make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, devices=jax.devices()[:1])
    cfg = StepConfig(mc, LossConfig(kind="grpo", eps_low=EPS, eps_high=EPS, beta=BETA, kl_estimator="k3"))
    optim = OptimConfig(lr=LR, schedule="constant", b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1, max_grad_norm=1.0)
    tx, sched = make_optimizer(optim, 1000)
    step = make_train_step(cfg, tx, mesh, sched)
    b = make_batch(B, P, C)
    T = P + C
    tokens = np.concatenate([b["prompt"], b["completion"]], 1)
    mask = np.concatenate([np.zeros((B, P), np.int32), np.ones((B, C), np.int32)], 1)
    pad = lambda x: np.concatenate([np.zeros((B, P), np.float32), x], 1)  # noqa: E731
    batch = {
        "tokens": tokens, "positions": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
        "segment_ids": np.ones((B, T), np.int32), "loss_mask": mask, "advantages": mask * b["advantages"][:, None],
        "old_logprobs": pad(b["old_lp"]), "ref_logprobs": pad(b["ref_lp"]),
        "norm_weight": mask.astype(np.float32), "norm_denom": mask.astype(np.float32),
    }
    batch = {k: jax.device_put(v[None]) for k, v in batch.items()}  # [accum=1, B, T]
    with jax.set_mesh(mesh):
        state = {"s": init_state(init_params(mc, jax.random.key(0)), tx, mesh, mc)}

    def one() -> None:
        with jax.set_mesh(mesh):  # the step was traced under this mesh: the same context hits its cache
            state["s"], m = step(state["s"], batch)
        jax.block_until_ready(m["loss"])

    return _warm(one, warmup)


# ---- Tunix ----------------------------------------------------------------------------------------


def setup_tunix(B: int, P: int, C: int, warmup: int) -> Callable[[], None]:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from tunix.models.qwen3 import model as qwen3
    from tunix.rl import function_registry
    from tunix.rl import trainer as rl_trainer
    from tunix.rl.grpo import grpo_learner
    from tunix.sft import peft_trainer

    cfg = qwen3.ModelConfig(
        num_layers=SHAPE["num_layers"], vocab_size=SHAPE["vocab_size"], embed_dim=SHAPE["hidden_size"],
        hidden_dim=SHAPE["intermediate_size"], num_heads=SHAPE["num_heads"], head_dim=SHAPE["head_dim"],
        num_kv_heads=SHAPE["num_kv_heads"], rope_theta=int(SHAPE["rope_theta"]), norm_eps=SHAPE["rms_norm_eps"],
        use_tied_embedding=False,
    )
    model = qwen3.Qwen3(cfg, rngs=nnx.Rngs(0))
    algo = grpo_learner.GRPOConfig(num_generations=2, num_iterations=1, beta=BETA, epsilon=EPS, loss_agg_mode="token-mean")
    algo.temperature = 1.0  # GRPOLearner copies the rollout temperature onto its config the same way
    loss = function_registry.get_policy_loss_fn(algo.policy_loss_fn)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(LR, b1=0.9, b2=0.99, weight_decay=0.1))
    tr = rl_trainer.Trainer(model, tx, peft_trainer.TrainingConfig(eval_every_n_steps=10**9, max_steps=10**6),
                            custom_checkpoint_metadata_fn=lambda: {})
    # exactly how GRPOLearner wires its actor trainer (tunix/rl/grpo/grpo_learner.py)
    tr.with_loss_fn(lambda model, train_example, algo_config: loss(model, train_example, algo_config=algo, pad_id=0, eos_id=1),
                    has_aux=True)
    tr.with_gen_model_input_fn(lambda x: {"train_example": x, "algo_config": algo})
    train_step, _ = tr.jit_train_and_eval_step()
    b = make_batch(B, P, C)
    ex = grpo_learner.TrainExample(
        prompt_ids=jnp.asarray(b["prompt"]), prompt_mask=jnp.ones((B, P), jnp.int32),
        completion_ids=jnp.asarray(b["completion"]), completion_mask=jnp.ones((B, C), jnp.int32),
        advantages=jnp.asarray(b["advantages"]), ref_per_token_logps=jnp.asarray(b["ref_lp"]),
        old_per_token_logps=jnp.asarray(b["old_lp"]),
    )

    def one() -> None:
        out = train_step(ex)
        jax.block_until_ready(out[0])

    return _warm(one, warmup)


# ---- PyTorch fallback -------------------------------------------------------------------------------


def setup_torch(B: int, P: int, C: int, warmup: int) -> Callable[[], None]:
    import torch
    import transformers

    hf = transformers.Qwen3Config(
        vocab_size=SHAPE["vocab_size"], hidden_size=SHAPE["hidden_size"], intermediate_size=SHAPE["intermediate_size"],
        num_hidden_layers=SHAPE["num_layers"], num_attention_heads=SHAPE["num_heads"],
        num_key_value_heads=SHAPE["num_kv_heads"], head_dim=SHAPE["head_dim"], rope_theta=SHAPE["rope_theta"],
        rms_norm_eps=SHAPE["rms_norm_eps"], tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(hf)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.1)
    b = {k: torch.from_numpy(v) for k, v in make_batch(B, P, C).items()}
    ids = torch.cat([b["prompt"], b["completion"]], 1).long()

    def one() -> None:
        logits = model(input_ids=ids).logits[:, P - 1 : -1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, b["completion"].long()[..., None])[..., 0]
        ratio = torch.exp(lp - b["old_lp"])
        adv = b["advantages"][:, None]
        pg = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - EPS, 1 + EPS) * adv)
        d = b["ref_lp"] - lp
        loss = (pg + BETA * (torch.exp(d) - d - 1)).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return _warm(one, warmup)


SIDES = {"ours": setup_ours, "tunix": setup_tunix, "torch": setup_torch}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", default="both", choices=["both", *SIDES])
    ap.add_argument("--serve", action="store_true", help="(internal) run --side as a worker timed by the parent")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--completion", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="steps per side per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--scan_layers", action="store_true", help="ours with the layers under jax.lax.scan")
    ap.add_argument("--tunix_python", default=os.environ.get("TUNIX_PYTHON", TUNIX_PYTHON))
    a = ap.parse_args()
    shape = (a.batch, a.prompt, a.completion, a.warmup)
    tokens = a.batch * (a.prompt + a.completion)
    setup = lambda side: SIDES[side](*shape, **({"scan_layers": a.scan_layers} if side == "ours" else {}))  # noqa: E731
    if a.serve:
        serve(setup(a.side), {"side": a.side})
        return
    if a.side != "both":
        times = alternate({a.side: timed(setup(a.side))}, a.rounds, a.steps)[a.side]
        dt = statistics.median(times)
        print("BENCH " + json.dumps({"side": a.side, "step_s": dt, "tokens_per_s": tokens / dt}))
        return

    ours = timed(setup("ours"))
    other_name, other, why = "tunix", None, ""
    if os.path.exists(a.tunix_python):
        argv = [a.tunix_python, os.path.abspath(__file__), "--side=tunix", "--serve", *[f"--{k}={v}" for k, v in dict(
            batch=a.batch, prompt=a.prompt, completion=a.completion, warmup=a.warmup).items()]]
        try:
            other = Worker(argv, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        except RuntimeError as e:
            why = f"Tunix side failed: {e}"
    else:
        why = (f"no Tunix interpreter at {a.tunix_python}: run `bash scripts/setup_tunix_env.sh` "
               "(makes .venv-tunix in this checkout) or set TUNIX_PYTHON / --tunix_python")
    if other is None:
        print(f"{why}; comparing against PyTorch/transformers instead")
        other_name, other = "torch", timed(setup("torch"))
    try:
        times = alternate({"jaxwebrl": ours, other_name: other}, a.rounds, a.steps)
    finally:
        if isinstance(other, Worker):
            other.close()
    s = summary(times, "jaxwebrl", other_name)
    settings = "layers scanned" if a.scan_layers else "layers unrolled (the main job's setting)"
    print(f"model: tiny Qwen3 {SHAPE}; batch {a.batch} x ({a.prompt} prompt + {a.completion} completion) = {tokens} tokens/step")
    print(f"interleaved: {a.rounds} rounds x {a.steps} steps per side, order alternating; jaxwebrl {settings}")
    for name in ("jaxwebrl", other_name):
        per = ", ".join(f"{t * 1e3:.0f}" for t in times[name])
        print(f"{name:9s}: {s[f'{name}_step_s'] * 1e3:8.1f} ms/step (median; rounds: {per})  {tokens / s[f'{name}_step_s']:8.0f} tokens/s")
    print(f"speed-up (jaxwebrl over {other_name}, median of per-round ratios): {s['ratio']:.2f}x "
          f"(rounds {s['ratio_min']:.2f}-{s['ratio_max']:.2f}x)")
    print("BENCH " + json.dumps({"other": other_name, "times": times, **s}))


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main()
