"""Ahead-of-time lowering of the full-size train step: memory and FLOPs without allocating weights."""

from __future__ import annotations

from typing import Any

import jax

from jaxwebrl.data.vl_batch import patch_bucket
from jaxwebrl.models.attention import check_attention_fits
from jaxwebrl.models import vl
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_known_shapes import screenshot_grid
from jaxwebrl.sharding import make_mesh
from jaxwebrl.train.optim import make_optimizer
from jaxwebrl.train.step import StepConfig, lower_train_step


def num_params(cfg: Any) -> int:
    """Parameter count (a VL model's from its abstract params: both towers)."""
    if isinstance(cfg, VLConfig):
        return sum(int(a.size) for a in jax.tree.leaves(vl.abstract_params(cfg)))
    return cfg.num_params()


def screenshot_patches(run: Any, cfg: VLConfig) -> tuple[int, int]:
    """(image patch rows of one turn sample, their bucket): the last `agent.last_k` screenshots (one unless the
    context strategy keeps K) at the run's viewport and device scale factor, as the checkpoint's processor cuts
    them."""
    env, agent = run.env, run.agent
    k = agent.last_k if agent.strategy == "last_k_screenshots" else 1
    grid = screenshot_grid(cfg, run.model.path, round(env.viewport_height * env.device_scale_factor),
                           round(env.viewport_width * env.device_scale_factor))
    n = k * grid[0] * grid[1] * grid[2]
    return n, patch_bucket(n, cfg.vision.merge_unit)


def dry_run(run: Any, sizes: dict[str, int], compile: bool = True) -> dict[str, Any]:
    """Compile the step of a `RunConfig` on the devices that exist (mesh sizes already resolved and
    checked); return per-device memory (bytes) and step FLOPs. `compile=False` only lowers (traces and
    emits the sharded program: shapes, shardings and kernels check out; no memory figures)."""
    mesh = make_mesh(sizes)
    mc = run.model.abstract_config()
    check_attention_fits(mc, run.train.seq_len, sizes)
    tx, sched = make_optimizer(run.optim, run.train.steps)
    cfg = StepConfig(mc, run.loss, logits_chunk=run.train.logits_chunk, freeze_vision=run.train.freeze_vision,
                     trainable_layers=run.train.trainable_layers)
    A, mb, T = run.train.accum_steps, run.train.micro_batch, run.train.seq_len
    tokens = A * mb * T
    vision: dict[str, Any] = {}
    if isinstance(mc, VLConfig):  # each row carries its turn's screenshot patches (data.vl_batch)
        n, bucket = screenshot_patches(run, mc)
        vision = {"patches": n, "patches_bucket": bucket, "freeze_vision": run.train.freeze_vision}
    base = {
        "devices": len(jax.devices()), "device_kind": jax.devices()[0].device_kind, "mesh": dict(sizes),
        "params": num_params(mc), "layers": mc.num_layers, "attention": mc.attention, "batch": [A, mb, T],
        "tokens_per_step": tokens, "model_flops_per_step": mc.flops_per_token(T) * tokens, **vision,
    }
    patches = vision.get("patches_bucket", 0)
    if not compile:
        lowered = lower_train_step(cfg, tx, mesh, A, mb, T, sched, compile=False, patches=patches)
        return {**base, "compiled": False, "lowered_chars": len(lowered.as_text())}
    compiled = lower_train_step(cfg, tx, mesh, A, mb, T, sched, patches=patches)
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float((cost or {}).get("flops", 0.0))
    out = {
        **base, "compiled": True,
        "argument_bytes": int(mem.argument_size_in_bytes), "output_bytes": int(mem.output_size_in_bytes),
        "temp_bytes": int(mem.temp_size_in_bytes), "alias_bytes": int(mem.alias_size_in_bytes),
        "generated_code_bytes": int(mem.generated_code_size_in_bytes),
        "xla_flops_per_device": flops,
    }
    out["peak_bytes_estimate"] = out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"]
    return out


def format_report(r: dict[str, Any]) -> str:
    gib = lambda b: f"{b / 2**30:.2f} GiB"  # noqa: E731
    images = (f"; vision-language: {r['patches']} screenshot patches per row (bucket {r['patches_bucket']}), "
              f"freeze_vision={r['freeze_vision']}" if "patches" in r else "")
    return "\n".join([
        f"dry run: {r['params'] / 1e9:.2f}B params, {r['layers']} layers, batch [accum, micro, T] = {r['batch']}, "
        f"attention {r['attention']}{images}",
        f"  devices {r['devices']} x {r['device_kind']}, mesh {r['mesh']}",
        f"  per device: arguments {gib(r['argument_bytes'])}, outputs {gib(r['output_bytes'])} "
        f"(aliased {gib(r['alias_bytes'])}), temporaries {gib(r['temp_bytes'])}, peak ~{gib(r['peak_bytes_estimate'])}",
        f"  step FLOPs, model (fwd+bwd, 6N + attention): {r['model_flops_per_step']:.3e} in all, "
        f"{r['model_flops_per_step'] / r['devices']:.3e} per device",
        f"  step FLOPs, XLA cost analysis per device: {r['xla_flops_per_device']:.3e} (counts each scan body once: "
        "layers, micro-batches and logit chunks are loops, so this is a lower bound)",
    ])
