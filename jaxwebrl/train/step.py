"""The compiled train step: sharded state, micro-batch accumulation, one optimizer update.

A batch is a dict of arrays shaped [accum_steps, micro_batch, T] (see `BATCH_KEYS`), sharded with the
micro-batch dimension over (data, fsdp). The step scans over micro-batches summing each one's loss
gradient, then divides once by the batch's total normalisation denominator (a data quantity, summed up
front), so accumulating k micro-batches is the same computation as one big batch. State is donated.

Logprobs are computed from the final hidden states in length chunks under `jax.checkpoint`, so the
[B, T, V] float32 logits of a 150k-vocabulary model are never all live at once (`logits_chunk`).

Vision-language models (`StepConfig.model` a `VLConfig`): the batch also holds `mrope_positions`
[accum, mb, 3, T] and `vision` [accum, mb, patches, ...] (each row's own image patches), built by
`data.vl_batch`; every array's rows are sharded over (data, fsdp) like the tokens, so the vision encoder
runs inside the step on each device's own rows, and `freeze_vision` keeps its params fixed (no gradient,
no update, no weight decay).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from jaxwebrl.models import ModelConfig, abstract_params, hidden_states, lm_head, logical_axes
from jaxwebrl.models import vl
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.logprobs import token_logprobs, token_logprobs_and_entropy
from jaxwebrl.models.projection import project
from jaxwebrl.sharding import (
    batch_spec_sharding, optimizer_state_shardings, replicated, tree_shardings,
)
from jaxwebrl.train.losses import LossConfig, get_loss

# Per-token inputs of the step. All token-aligned: entry t describes tokens[t].
BATCH_KEYS: dict[str, Any] = {
    "tokens": jnp.int32,
    "positions": jnp.int32,
    "segment_ids": jnp.int32,
    "loss_mask": jnp.int32,
    "advantages": jnp.float32,
    "old_logprobs": jnp.float32,
    "norm_weight": jnp.float32,
    "norm_denom": jnp.float32,
}
REF_KEY = "ref_logprobs"
VL_KEYS = ("mrope_positions", "vision")  # extra inputs of a vision-language batch (not token-aligned)

State = dict[str, Any]  # {"params", "opt_state", "step": int32[], "rng": uint32[2]}


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """Static description of a compiled step (hashable)."""

    model: ModelConfig | VLConfig
    loss: LossConfig
    logits_chunk: int = 0  # 0: whole sequence at once
    with_entropy: bool = True
    freeze_vision: bool = False  # VL models: the vision encoder gets no gradient and no update
    # Text models: the embedding (and an untied lm_head) and the decoder layers below the top
    # `trainable_layers` get no gradient and no update (0 = every parameter trains); see `frozen_layers`.
    trainable_layers: int = 0
    temperature: float = 1.0  # logprobs of softmax(logits / T): the rollouts' T for GRPO (trainer.sampling_temperature)


def frozen_layers(cfg: StepConfig) -> int:
    """How many of the text model's lowest decoder layers are frozen (0: none)."""
    if not cfg.trainable_layers or isinstance(cfg.model, VLConfig):
        return 0
    if cfg.trainable_layers > cfg.model.num_layers:
        raise ValueError(f"train.trainable_layers={cfg.trainable_layers} exceeds the model's {cfg.model.num_layers} "
                         f"layers; set at most {cfg.model.num_layers}, or 0 to train every parameter")
    return cfg.model.num_layers - cfg.trainable_layers


def _freeze_params(params: Any) -> Any:
    """The frozen text-model params outside the layers (embedding, untied lm_head) under stop_gradient."""
    return {k: jax.lax.stop_gradient(v) if k in ("embed", "lm_head") else v for k, v in params.items()}


def _abstract_params(model: ModelConfig | VLConfig) -> Any:
    return vl.abstract_params(model) if isinstance(model, VLConfig) else abstract_params(model)


def _logical_axes(model: ModelConfig | VLConfig) -> Any:
    return vl.logical_axes(model) if isinstance(model, VLConfig) else logical_axes(model)


# ---- logprobs ----------------------------------------------------------------------------------


def next_token_logprobs(
    cfg: StepConfig, params: Any, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array,
    vl_inputs: dict[str, Any] | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """lp[b, t] = log pi(tokens[b, t+1] | tokens[b, :t+1]) (last column is junk, masked), and entropy.
    `vl_inputs` (VL models): mrope_positions and vision of the micro-batch."""
    mc = cfg.model
    if isinstance(mc, VLConfig):
        if vl_inputs is None:
            raise ValueError("a vision-language step needs mrope_positions and vision in the batch (data.vl_batch)")
        inputs = {"tokens": tokens, "positions": positions, "segment_ids": segment_ids, **vl_inputs}
        h, _ = vl.hidden_states(mc, params, inputs)
        w = lm_head(mc.text, params["text"]).astype(h.dtype)
    else:
        if cfg.trainable_layers:
            params = _freeze_params(params)
        h, _ = hidden_states(mc, params, tokens, positions, segment_ids, frozen_layers=frozen_layers(cfg))
        w = lm_head(mc, params).astype(h.dtype)
    targets = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
    B, T, D = h.shape
    chunk = cfg.logits_chunk if cfg.logits_chunk and T % cfg.logits_chunk == 0 else T

    def one(hc: jax.Array, tc: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = project("btd,dv->btv", hc, w, jnp.float32)
        if cfg.temperature != 1.0:
            logits = logits / cfg.temperature
        if cfg.with_entropy:
            return token_logprobs_and_entropy(logits, tc)
        return token_logprobs(logits, tc), jnp.zeros(tc.shape, jnp.float32)

    if chunk == T:
        lp, ent = one(h, targets)
    else:
        n = T // chunk
        hs = h.reshape(B, n, chunk, D).swapaxes(0, 1)
        ts = targets.reshape(B, n, chunk).swapaxes(0, 1)
        body = jax.checkpoint(lambda c, x: (c, one(*x)))
        _, (lp, ent) = jax.lax.scan(body, None, (hs, ts))
        lp, ent = lp.swapaxes(0, 1).reshape(B, T), ent.swapaxes(0, 1).reshape(B, T)
    return lp, (ent if cfg.with_entropy else None)


def _shift(x: jax.Array) -> jax.Array:
    """Token-aligned [.., T] -> prediction-aligned: entry t describes tokens[t+1]; last entry 0."""
    return jnp.concatenate([x[..., 1:], jnp.zeros_like(x[..., :1])], axis=-1)


def _unshift(x: jax.Array) -> jax.Array:
    """Prediction-aligned -> token-aligned (entry 0 = 0)."""
    return jnp.concatenate([jnp.zeros_like(x[..., :1]), x[..., :-1]], axis=-1)


def _vl_inputs(cfg: StepConfig, micro: dict[str, Any]) -> dict[str, Any] | None:
    """A VL micro-batch's model inputs: M-RoPE positions as the model takes them [3, mb, T], and the rows' patches."""
    if not isinstance(cfg.model, VLConfig):
        return None
    return {"mrope_positions": jnp.swapaxes(micro["mrope_positions"], 0, 1), "vision": micro["vision"]}


def micro_loss(cfg: StepConfig, params: Any, micro: dict[str, jax.Array]) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array]]]:
    """(loss_sum, (denominator, metric_sums)) of one micro-batch [mb, T]."""
    if cfg.freeze_vision and isinstance(cfg.model, VLConfig):
        params = {**params, "vision": jax.lax.stop_gradient(params["vision"])}
    vl_inputs = _vl_inputs(cfg, micro)
    lp, ent = next_token_logprobs(cfg, params, micro["tokens"], micro["positions"], micro["segment_ids"], vl_inputs)
    aligned = {k: _shift(v) for k, v in micro.items() if k not in ("tokens", "positions", "segment_ids", *VL_KEYS)}
    if ent is not None:
        aligned["entropy"] = ent
    loss_sum, denom, sums = get_loss(cfg.loss.kind)(cfg.loss, lp, aligned)
    return loss_sum, (denom, sums)


# ---- shardings -------------------------------------------------------------------------------------


def param_shardings(model: ModelConfig | VLConfig, mesh: Mesh) -> Any:
    return tree_shardings(_abstract_params(model), _logical_axes(model), mesh)


def batch_shardings(model: ModelConfig | VLConfig, mesh: Mesh) -> Any:
    """Sharding of every array of a step's batch (a pytree prefix): rows over (data, fsdp). A VL batch's
    mrope_positions and vision arrays are row-major too ([accum, mb, ...]), so the one sharding fits all."""
    return batch_spec_sharding(mesh)


def state_shardings(model: ModelConfig | VLConfig, tx: optax.GradientTransformation, mesh: Mesh) -> State:
    abs_p = _abstract_params(model)
    p_sh = tree_shardings(abs_p, _logical_axes(model), mesh)
    o_sh = optimizer_state_shardings(jax.eval_shape(tx.init, abs_p), abs_p, p_sh, mesh)
    rep = replicated(mesh)
    return {"params": p_sh, "opt_state": o_sh, "step": rep, "rng": rep}


def abstract_state(model: ModelConfig, tx: optax.GradientTransformation, mesh: Mesh) -> State:
    """ShapeDtypeStructs (with shardings) of the whole train state; nothing is allocated."""
    abs_p = _abstract_params(model)
    shapes = {
        "params": abs_p, "opt_state": jax.eval_shape(tx.init, abs_p),
        "step": jax.ShapeDtypeStruct((), jnp.int32), "rng": jax.ShapeDtypeStruct((2,), jnp.uint32),
    }
    sh = state_shardings(model, tx, mesh)
    return jax.tree.map(lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h), shapes, sh)


def abstract_batch(mesh: Mesh, accum: int, micro_batch: int, seq_len: int, with_ref: bool) -> dict[str, jax.ShapeDtypeStruct]:
    sh = batch_spec_sharding(mesh)
    keys = dict(BATCH_KEYS)
    if with_ref:
        keys[REF_KEY] = jnp.float32
    return {k: jax.ShapeDtypeStruct((accum, micro_batch, seq_len), dt, sharding=sh) for k, dt in keys.items()}


def abstract_vl_batch(model: VLConfig, mesh: Mesh, accum: int, micro_batch: int, seq_len: int, patches: int,
                      with_ref: bool) -> dict[str, Any]:
    """`abstract_batch` plus a VL batch's mrope_positions and `patches` image patch rows per row (the shapes
    `data.vl_batch` makes), all sharded by rows."""
    from jaxwebrl.models.vision import patch_layout

    out: dict[str, Any] = dict(abstract_batch(mesh, accum, micro_batch, seq_len, with_ref))
    sh = batch_shardings(model, mesh)
    v = model.vision
    lead = (accum, micro_batch)
    layout = patch_layout(v, np.zeros((0, 3), np.int64), patches)
    vision = {k: jax.ShapeDtypeStruct(lead + a.shape, a.dtype, sharding=sh) for k, a in layout.items()}
    vision["pixel_values"] = jax.ShapeDtypeStruct(lead + (patches, v.patch_dim), jnp.float32, sharding=sh)
    vision["scatter_to"] = jax.ShapeDtypeStruct(lead + (patches // v.merge_unit,), jnp.int32, sharding=sh)
    out["mrope_positions"] = jax.ShapeDtypeStruct(lead + (3, seq_len), jnp.int32, sharding=sh)
    out["vision"] = vision
    return out


def init_state(params: Any, tx: optax.GradientTransformation, mesh: Mesh, model: ModelConfig, seed: int = 0) -> State:
    """Train state on the mesh: params placed with their shardings, optimizer state created sharded."""
    sh = state_shardings(model, tx, mesh)
    # A copy placed with the right shardings: the step donates its state, the caller keeps its arrays.
    params = jax.jit(lambda p: jax.tree.map(jnp.copy, p), out_shardings=sh["params"])(params)
    opt_state = jax.jit(tx.init, out_shardings=sh["opt_state"])(params)
    rng = jax.device_put(np.asarray(jax.random.key_data(jax.random.key(seed))), sh["rng"])
    step = jax.device_put(np.zeros((), np.int32), sh["step"])
    return {"params": params, "opt_state": opt_state, "step": step, "rng": rng}


# ---- the step ---------------------------------------------------------------------------------------


def _metrics(loss_sum: jax.Array, denom: jax.Array, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
    n = jnp.maximum(sums["tokens"], 1.0)
    d = jnp.maximum(denom, 1e-12)
    out = {"loss": loss_sum / d, "tokens": sums["tokens"], "denominator": denom}
    for k, v in sums.items():
        if k in ("pg_loss", "kl_loss"):
            out[k] = v / d
        elif k != "tokens":
            out[k] = v / n
    return out


def grads_and_metrics(cfg: StepConfig, params: Any, batch: dict[str, jax.Array]) -> tuple[Any, dict[str, jax.Array]]:
    """Normalised gradient of the batch loss [accum, mb, T], accumulated over the leading axis."""
    denom = batch["norm_denom"].astype(jnp.float32).sum()
    grad_fn = jax.value_and_grad(lambda p, m: micro_loss(cfg, p, m), has_aux=True)

    def body(carry: tuple[Any, jax.Array, dict[str, jax.Array]], micro: dict[str, jax.Array]) -> tuple[Any, None]:
        g_acc, l_acc, s_acc = carry
        (loss_sum, (_, sums)), g = grad_fn(params, micro)
        g_acc = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), g_acc, g)
        s_acc = {k: s_acc[k] + sums[k] for k in s_acc}
        return (g_acc, l_acc + loss_sum, s_acc), None

    if jax.tree.leaves(batch)[0].shape[0] == 1:  # one micro-batch: no loop, so XLA fuses it with the update
        (loss_sum, (_, sums)), g = grad_fn(params, jax.tree.map(lambda x: x[0], batch))
        g = jax.tree.map(lambda b: b.astype(jnp.float32), g)
    else:
        sums0 = jax.eval_shape(lambda: micro_loss(cfg, params, jax.tree.map(lambda x: x[0], batch))[1][1])
        sums0 = {k: jnp.zeros((), jnp.float32) for k in sums0}
        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        (g, loss_sum, sums), _ = jax.lax.scan(body, (zeros, jnp.zeros((), jnp.float32), sums0), batch)
    scale = 1.0 / jnp.maximum(denom, 1e-12)
    g = jax.tree.map(lambda x: x * scale, g)
    return g, _metrics(loss_sum, denom, sums)


def train_step(cfg: StepConfig, tx: optax.GradientTransformation, schedule: optax.Schedule | None,
               state: State, batch: dict[str, jax.Array]) -> tuple[State, dict[str, jax.Array]]:
    grads, metrics = grads_and_metrics(cfg, state["params"], batch)
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state["params"])
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    if cfg.freeze_vision and isinstance(cfg.model, VLConfig):  # no update at all (weight decay included)
        updates = {**updates, "vision": jax.tree.map(jnp.zeros_like, updates["vision"])}
    if cfg.trainable_layers and not isinstance(cfg.model, VLConfig):  # frozen: no update at all (weight decay too)
        # the embeddings always (next_token_logprobs stops their gradient), the layers below the top N if any
        updates = {k: jax.tree.map(jnp.zeros_like, v) if k in ("embed", "lm_head") else v for k, v in updates.items()}
        n_frozen = frozen_layers(cfg)
        if n_frozen:
            updates["layers"] = jax.tree.map(lambda u: u.at[:n_frozen].set(0), updates["layers"])
    params = optax.apply_updates(state["params"], updates)
    metrics["grad_norm"] = optax.tree.norm(grads)
    metrics["update_norm"] = optax.tree.norm(updates)
    if schedule is not None:
        metrics["lr"] = jnp.asarray(schedule(state["step"]), jnp.float32)
    new = {"params": params, "opt_state": opt_state, "step": state["step"] + 1, "rng": state["rng"]}
    return new, metrics


def make_train_step(cfg: StepConfig, tx: optax.GradientTransformation, mesh: Mesh,
                    schedule: optax.Schedule | None = None) -> Callable[[State, dict[str, jax.Array]], tuple[State, dict[str, jax.Array]]]:
    """jit with explicit shardings: state as `state_shardings`, batch rows over data x fsdp, metrics
    replicated; the input state is donated."""
    s_sh = state_shardings(cfg.model, tx, mesh)
    keys = list(BATCH_KEYS) + ([REF_KEY] if cfg.loss.needs_reference else []) + (
        list(VL_KEYS) if isinstance(cfg.model, VLConfig) else [])
    b_sh = {k: batch_shardings(cfg.model, mesh) for k in keys}
    rep = replicated(mesh)
    fn = lambda state, batch: train_step(cfg, tx, schedule, state, batch)  # noqa: E731
    return jax.jit(fn, in_shardings=(s_sh, b_sh), out_shardings=(s_sh, rep), donate_argnums=(0,))


def make_score_fn(cfg: StepConfig, mesh: Mesh) -> Callable[[Any, dict[str, jax.Array]], jax.Array]:
    """Token-aligned logprobs [accum, mb, T] of a batch under `params` (old-policy or reference scoring);
    params sharded like the policy (a frozen reference model uses the same shardings)."""
    p_sh = param_shardings(cfg.model, mesh)
    b_sh = batch_shardings(cfg.model, mesh)
    nocfg = dataclasses.replace(cfg, with_entropy=False, trainable_layers=0)  # scoring: no gradient anyway
    extra = VL_KEYS if isinstance(cfg.model, VLConfig) else ()

    def score(params: Any, batch: dict[str, jax.Array]) -> jax.Array:
        def one(_: None, m: dict[str, jax.Array]) -> tuple[None, jax.Array]:
            lp, _ = next_token_logprobs(nocfg, params, m["tokens"], m["positions"], m["segment_ids"], _vl_inputs(cfg, m))
            return None, _unshift(lp)

        sub = {k: batch[k] for k in ("tokens", "positions", "segment_ids", *extra)}
        return jax.lax.scan(one, None, sub)[1]

    # every array of the batch (VL ones included) keeps the row sharding it was placed with (pipeline.to_device)
    return jax.jit(score, in_shardings=(p_sh, None), out_shardings=b_sh)


def lower_train_step(cfg: StepConfig, tx: optax.GradientTransformation, mesh: Mesh, accum: int, micro_batch: int,
                     seq_len: int, schedule: optax.Schedule | None = None, compile: bool = True,
                     patches: int = 0) -> Any:
    """Lower and (unless `compile=False`) compile the step against abstract state and batch (no weights
    allocated): the Compiled, or the Lowered program. VL models: `patches` image patch rows per row."""
    step = make_train_step(cfg, tx, mesh, schedule)
    if isinstance(cfg.model, VLConfig):
        if patches < 1:
            raise ValueError("lowering a vision-language step needs patches (image patch rows per row)")
        batch = abstract_vl_batch(cfg.model, mesh, accum, micro_batch, seq_len, patches, cfg.loss.needs_reference)
    else:
        batch = abstract_batch(mesh, accum, micro_batch, seq_len, cfg.loss.needs_reference)
    with jax.set_mesh(mesh):
        lowered = step.lower(abstract_state(cfg.model, tx, mesh), batch)
        return lowered.compile() if compile else lowered
