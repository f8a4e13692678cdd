"""The loss family: weighted NLL (`sft`) and the clipped-ratio surrogate (`grpo`), by registry name.

Each loss is a pure function of per-token arrays that are already aligned with the logprobs (entry t is
the term for the token predicted at t). It returns `(loss_sum, denominator, metric_sums)`:

  loss_sum    = sum_t norm_weight[t] * loss_mask[t] * l[t]
  denominator = sum_t norm_denom[t]          (see jaxwebrl.data.samples for what each mode puts there)

so summing both over micro-batches and dividing once gives exactly the loss of the whole batch.
`metric_sums` are plain sums over trained tokens (divide by `tokens`) so they accumulate the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import jax
import jax.numpy as jnp

Arrays = Mapping[str, jax.Array]
LossOut = tuple[jax.Array, jax.Array, dict[str, jax.Array]]

KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Hyperparameters of the loss (hashable: it is a static argument of the compiled step)."""

    kind: str = "grpo"  # sft | grpo
    eps_low: float = 0.2  # ratio clipped to [1 - eps_low, 1 + eps_high]
    eps_high: float = 0.2
    dual_clip: float = 0.0  # c > 1: for A < 0 the objective is bounded below by c * A (Ye et al. 2020)
    beta: float = 0.0  # KL(pi_theta || pi_ref) coefficient; 0 skips the reference model entirely
    kl_estimator: str = "k3"  # k1: log r, k2: (log r)^2 / 2, k3: exp(-log r) - 1 + log r (r = pi/pi_ref)

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise ValueError(f"loss kind {self.kind!r} is unknown; use one of {sorted(LOSSES)}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator {self.kl_estimator!r}: use one of {KL_ESTIMATORS}")
        if self.dual_clip and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip={self.dual_clip}: must be > 1 (or 0 to disable)")

    @property
    def needs_reference(self) -> bool:
        return self.kind == "grpo" and self.beta != 0.0


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str) -> jax.Array:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman's k1/k2/k3)."""
    log_r = logprobs - ref_logprobs
    if estimator == "k1":
        return log_r
    if estimator == "k2":
        return 0.5 * jnp.square(log_r)
    if estimator == "k3":
        return jnp.exp(-log_r) - 1.0 + log_r
    raise ValueError(f"kl_estimator {estimator!r}: use one of {KL_ESTIMATORS}")


def _common_sums(logprobs: jax.Array, t: Arrays) -> dict[str, jax.Array]:
    m = t["loss_mask"].astype(jnp.float32)
    sums = {"tokens": m.sum(), "nll": -(m * logprobs).sum()}
    if "entropy" in t:
        sums["entropy"] = (m * jax.lax.stop_gradient(t["entropy"])).sum()
    if "old_logprobs" in t:  # |pi_theta - pi_old| in log space: sampler-vs-trainer mismatch on epoch 0
        sums["logprob_diff"] = (m * jnp.abs(jax.lax.stop_gradient(logprobs) - t["old_logprobs"])).sum()
    return sums


def sft_loss(cfg: LossConfig, logprobs: jax.Array, t: Arrays) -> LossOut:
    """Weighted NLL: l_t = -w_t log pi(y_t). w = `advantages` (0/1 for SFT, RFT, REINFORCE 1[R=1])."""
    m = t["loss_mask"].astype(jnp.float32)
    per_token = -t["advantages"] * logprobs
    loss_sum = (t["norm_weight"] * m * per_token).sum()
    sums = _common_sums(logprobs, t)
    return loss_sum, t["norm_denom"].sum(), sums


def grpo_loss(cfg: LossConfig, logprobs: jax.Array, t: Arrays) -> LossOut:
    """-[min(r A, clip(r, 1-eps_low, 1+eps_high) A) (dual-clipped for A<0) - beta KL(pi || pi_ref)]."""
    m = t["loss_mask"].astype(jnp.float32)
    adv = t["advantages"]
    log_ratio = logprobs - t["old_logprobs"]
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * adv
    clipped = jnp.clip(ratio, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high) * adv
    objective = jnp.minimum(unclipped, clipped)
    sums = _common_sums(logprobs, t)
    if cfg.dual_clip:
        lower = cfg.dual_clip * adv
        dual = (adv < 0) & (objective < lower)
        objective = jnp.where(adv < 0, jnp.maximum(objective, lower), objective)
        sums["dual_clip_frac"] = (m * dual).sum()
    per_token = -objective
    nw = t["norm_weight"] * m
    sums["pg_loss"] = (nw * per_token).sum()
    if cfg.beta:
        kl = kl_penalty(logprobs, t["ref_logprobs"], cfg.kl_estimator)
        per_token = per_token + cfg.beta * kl
        sums["kl_ref"] = (m * jax.lax.stop_gradient(kl)).sum()
        sums["kl_loss"] = (nw * cfg.beta * kl).sum()
    sg_log_ratio = jax.lax.stop_gradient(log_ratio)
    sums["clip_frac"] = (m * (clipped < unclipped)).sum()
    sums["approx_kl"] = (m * (jnp.exp(sg_log_ratio) - 1.0 - sg_log_ratio)).sum()  # k3 of KL(pi_old || pi_theta)
    sums["ratio"] = (m * jax.lax.stop_gradient(ratio)).sum()
    loss_sum = (nw * per_token).sum()
    return loss_sum, t["norm_denom"].sum(), sums


LossFn = Callable[[LossConfig, jax.Array, Arrays], LossOut]
LOSSES: dict[str, LossFn] = {"sft": sft_loss, "grpo": grpo_loss}


def get_loss(kind: str) -> LossFn:
    if kind not in LOSSES:
        raise ValueError(f"loss kind {kind!r} is unknown; use one of {sorted(LOSSES)}")
    return LOSSES[kind]
