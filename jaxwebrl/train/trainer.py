"""`Trainer`: the library face of training, driven by the one training loop (`jaxwebrl.train.loop`).

It holds the mesh, the sharded train state, the optimizer, the frozen reference params, the checkpoint
manager and the metrics writer. Two entry points:

- `train_on_batch(batch)`: one optimizer step on a host batch [rows, T] from the Grain pipeline (SFT).
- `train_on_samples(samples, epochs)`: a rollout batch of `Sample`s -> packed [rows, T_bucket] batches ->
  old logprobs (engine's, or recomputed once with the pre-update policy) and reference logprobs (once) ->
  `epochs` passes of optimizer steps (PPO epochs). Returns averaged metrics.

Vision-language policies (a `VLConfig`, loaded from a Qwen3-VL / Qwen2.5-VL checkpoint with its processor):
samples are not packed but laid out one per row with their own image patches (`data.vl_batch`: the pixels
rebuilt from each turn's recorded PNG by the checkpoint's processor and checked against the digest), at the
round's sequence bucket and patch bucket; the same compiled, sharded step trains them.

`params` gives the current policy params (for `engine.update_weights`), `save()` checkpoints, `export()`
writes a HuggingFace directory.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxwebrl.data.pipeline import Batch, DataIterator, bucket_length, pack_samples, power_of_two_buckets, to_device
from jaxwebrl.data.samples import Sample
from jaxwebrl.data.vl_batch import rows_patch_bucket, vl_rows
from jaxwebrl.models import ModelConfig, init_params
from jaxwebrl.models.attention import check_attention_fits
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_or_text import export_policy_hf, load_policy_hf
from jaxwebrl.models.setup import ModelSetup
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
from jaxwebrl.sharding import make_mesh
from jaxwebrl.train.checkpoint import Checkpointer, model_config_to_json
from jaxwebrl.train.hosts import agree_round, conform, gather_ints
from jaxwebrl.train.metrics import MetricsWriter, mfu, peak_flops_per_chip
from jaxwebrl.train.optim import OptimConfig, make_optimizer
from jaxwebrl.train.step import (
    REF_KEY, StepConfig, abstract_state, frozen_layers, init_state, make_score_fn, make_train_step, param_shardings,
)


def resolve_model(m: ModelSetup, mesh: jax.sharding.Mesh, workdir: str, seed: int) -> tuple[ModelConfig | VLConfig, Any, str | None]:
    """(model config, sharded params, tokenizer dir) for `model.source` = hf | tiny | inline; an hf
    checkpoint may be text or vision-language (by its config.json)."""
    if m.source == "inline":
        if m.vision:
            raise ValueError("model.vision: an inline vision-language policy is built with its tokenizer and processor "
                             "by the main job's behaviour cloning (bc.enabled=True); to train one directly, give a "
                             "checkpoint (model.source='hf')")
        cfg = m.model_config()
        sh = param_shardings(cfg, mesh)
        params = jax.jit(lambda k: init_params(cfg, k), out_shardings=sh)(jax.random.key(seed))
        return cfg, params, None
    path = m.path
    if m.source == "tiny":
        path = path or os.path.join(workdir, "tiny_model")
        if not os.path.isfile(os.path.join(path, "config.json")) and jax.process_index() == 0:
            make_tiny_checkpoint(path, tiny_config(m.arch, **m.shape_overrides()), seed=seed)
    cfg, params = load_policy_hf(path, mesh=mesh, **m.numerics)
    return cfg, params, path


@functools.lru_cache(maxsize=16)
def _compiled_fns(step_cfg: StepConfig, optim: OptimConfig, total_steps: int, mesh: jax.sharding.Mesh) -> tuple[Any, ...]:
    """(tx, schedule, train step, score fn), shared by Trainers with the same setup so a process that
    rebuilds its Trainer (resume, the RL loop) compiles each program once."""
    tx, schedule = make_optimizer(optim, total_steps)
    return tx, schedule, make_train_step(step_cfg, tx, mesh, schedule), make_score_fn(step_cfg, mesh)


def _floats(tree: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in jax.device_get(tree).items()}


def sampling_temperature(config: Any) -> float:
    """The temperature the policy gradient's logprobs use: the rollouts' (`agent.temperature`) for the
    importance-ratio loss, so the trainer's pi(a|s) is the distribution the engine sampled from and the
    engine's logprobs (same convention, engines/base.py) are comparable; 1 for weighted log-likelihood
    losses (SFT, RFT, REINFORCE), which train the untempered policy."""
    agent = getattr(config, "agent", None)
    t = float(getattr(agent, "temperature", 1.0))
    return t if config.loss.kind == "grpo" and t > 1e-6 else 1.0


class Trainer:
    """See the module docstring. `config` is a `jaxwebrl.config.RunConfig`; `params`/`model_cfg` may be given
    directly (tests, the RL loop)."""

    def __init__(self, config: Any, *, mesh: jax.sharding.Mesh | None = None,
                 params: Any = None, model_cfg: ModelConfig | VLConfig | None = None, tokenizer_dir: str | None = None,
                 total_steps: int | None = None, checkpointing: bool = True):
        self.config = config
        self.hosts = jax.process_count()  # > 1: every round is a collective every host must join
        self.mesh = mesh or make_mesh(config.mesh)
        if params is None:
            self.model_cfg, params, self.tokenizer_dir = resolve_model(config.model, self.mesh, config.workdir, config.seed)
        else:
            assert model_cfg is not None, "pass model_cfg with params"
            self.model_cfg, self.tokenizer_dir = model_cfg, tokenizer_dir
        check_attention_fits(self.model_cfg, config.train.seq_len, dict(self.mesh.shape))  # kernel vs mesh and length
        self.processor = None  # VL: the checkpoint's processor, which rebuilds each turn's pixels from its PNG
        if isinstance(self.model_cfg, VLConfig):
            if not self.tokenizer_dir:
                raise ValueError("a vision-language Trainer needs the checkpoint directory holding its processor "
                                 "(tokenizer_dir=, or model.source='hf')")
            from jaxwebrl.models.processor import load_processor

            self.processor = load_processor(self.tokenizer_dir)
        self.loss_cfg = config.loss
        self.step_cfg = StepConfig(self.model_cfg, self.loss_cfg, logits_chunk=config.train.logits_chunk,
                                   freeze_vision=config.train.freeze_vision,
                                   trainable_layers=config.train.trainable_layers,
                                   temperature=sampling_temperature(config))
        frozen_layers(self.step_cfg)  # a trainable_layers beyond the model's depth stops here, before compiling
        self.tx, self.schedule, self._step, self._score = _compiled_fns(
            self.step_cfg, config.optim, total_steps or config.train.steps, self.mesh)
        self.accum = config.train.accum_steps
        self.rows = config.train.rows
        with jax.set_mesh(self.mesh):
            self.state = init_state(params, self.tx, self.mesh, self.model_cfg, seed=int(config.seed))
        self.ref_params = self._reference(params) if self.loss_cfg.needs_reference else None
        del params
        self.checkpointer = None
        if checkpointing:
            ck = config.checkpoint
            self.checkpointer = Checkpointer(config.checkpoint_dir, keep=ck.keep, best_metric=ck.best_metric,
                                             best_mode=ck.best_mode, async_save=ck.async_save)
        self.writer = MetricsWriter(config.log_dir, config.log.tensorboard)
        self.data_iterator: DataIterator | None = None
        self._pending_data_state: dict[str, Any] | None = None
        self.last_metrics: dict[str, float] = {}
        # The caller's own progress (e.g. RL iterations done), saved with each checkpoint and restored with it,
        # so a resumed loop knows exactly which of its steps the restored state includes.
        self.run_meta: dict[str, Any] = {}
        self._peak = peak_flops_per_chip(config.hardware.peak_flops)
        if checkpointing and config.checkpoint.resume:
            self.restore()

    # ---- state -----------------------------------------------------------------------------------

    @property
    def params(self) -> Any:
        return self.state["params"]

    @property
    def step(self) -> int:
        return int(jax.device_get(self.state["step"]))

    def _reference(self, params: Any) -> Any:
        """Frozen reference params, sharded like the policy: config.model.ref_path or a copy of the start."""
        if self.config.model.ref_path:
            _, ref = load_policy_hf(self.config.model.ref_path, mesh=self.mesh, dtype=self.model_cfg.dtype,
                                    param_dtype=self.model_cfg.param_dtype)
            return ref
        return jax.jit(lambda p: jax.tree.map(jnp.copy, p), out_shardings=param_shardings(self.model_cfg, self.mesh))(params)

    def attach_data(self, iterator: DataIterator) -> None:
        """Save this iterator's state with every checkpoint (and restore it if we resumed)."""
        self.data_iterator = iterator
        if self._pending_data_state:
            iterator.set_state(self._pending_data_state)
            self._pending_data_state = None

    # ---- steps -----------------------------------------------------------------------------------

    def _prepare(self, host: Batch, has_old: bool) -> tuple[dict[str, jax.Array], dict[str, float]]:
        """Device batch with old logprobs (recomputed when configured or missing) and reference logprobs."""
        dev = to_device(host, self.mesh, self.accum)
        extra: dict[str, float] = {}
        with jax.set_mesh(self.mesh):
            if self.loss_cfg.kind == "grpo" and (self.config.train.old_logprobs == "recompute" or not has_old):
                engine = dev["old_logprobs"]
                dev["old_logprobs"] = self._score(self.params, dev)
                if self.config.train.old_logprobs == "engine":  # recomputed only where the sampler's are NaN
                    dev["old_logprobs"] = jnp.where(jnp.isnan(engine), dev["old_logprobs"], engine)
                elif has_old:  # sampler-vs-trainer mismatch: |engine - trainer| logprob on trained tokens
                    m = dev["loss_mask"].astype(jnp.float32)
                    diff = (m * jnp.abs(engine - dev["old_logprobs"])).sum() / jnp.maximum(m.sum(), 1.0)
                    extra["logprob_mismatch"] = float(diff)
            if self.ref_params is not None:
                dev[REF_KEY] = self._score(self.ref_params, dev)
        return dev, extra

    def _run(self, dev: dict[str, jax.Array], real_tokens: int) -> dict[str, float]:
        t0 = time.perf_counter()
        with jax.set_mesh(self.mesh):
            self.state, m = self._step(self.state, dev)
        out = _floats(m)
        dt = time.perf_counter() - t0
        seq_len = dev["tokens"].shape[-1]
        out["step_time_s"] = dt
        out["tokens_per_s"] = real_tokens / dt
        out["mfu"] = mfu(out["tokens_per_s"], self.model_cfg.flops_per_token(seq_len), self.mesh.devices.size, self._peak)
        return out

    def train_on_batch(self, batch: Batch, has_old_logprobs: bool = True) -> dict[str, float]:
        """One optimizer step on a host batch [rows, T] (rows = accum_steps * micro_batch)."""
        dev, extra = self._prepare(batch, has_old_logprobs)
        out = self._run(dev, int((np.asarray(batch["segment_ids"]) > 0).sum()))
        out.update(extra)
        self.last_metrics = out
        return out

    def train_on_samples(self, samples: Sequence[Sample], epochs: int | None = None) -> dict[str, float]:
        """PPO-style update on one rollout batch; see the module docstring. Returns mean metrics."""
        multihost = jax.process_count() > 1
        if not samples and not multihost:
            raise ValueError("train_on_samples got no samples (all filtered out?)")
        epochs = int(epochs or self.config.train.epochs)
        key = jax.random.fold_in(jax.random.wrap_key_data(jax.device_get(self.state["rng"])), self.step)
        seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
        host, seq_len, has_old = self.round_batches(samples, seed)
        prepared = [self._prepare(b, has_old) for b in host]  # old/ref logprobs with the pre-update policy
        real = [int((np.asarray(b["segment_ids"]) > 0).sum()) for b in host]
        rng = np.random.default_rng(seed)
        history: list[dict[str, float]] = []
        for _ in range(epochs):
            for i in rng.permutation(len(prepared)):
                dev, extra = prepared[i]
                m = self._run(dev, real[i])
                m.update(extra)
                history.append(m)
        # multi-host: every host may have had nothing (all filtered); then no host stepped
        out = {k: float(np.mean([h[k] for h in history if k in h])) for k in history[0]} if history else {}
        out.update(optimizer_steps=len(history), epochs=epochs, samples=len(samples), seq_len=seq_len,
                   staleness=float(np.mean([self.step - s.policy_version for s in samples])) if samples else 0.0)
        if self.processor is not None:
            out["patches"] = float(np.asarray(host[0]["vision"]["segment"]).shape[-1])
        self.last_metrics = out
        return out

    def round_batches(self, samples: Sequence[Sample], seed: int) -> tuple[list[Batch], int, bool]:
        """A rollout batch as this host's [rows, ...] host batches at the round's buckets: (batches, seq_len,
        whether they carry the sampler's old logprobs). Multi-host: the shapes and the batch count are the
        ones all hosts agreed on (`train.hosts`)."""
        max_len = int(self.config.train.seq_len)
        buckets = power_of_two_buckets(max_len, min(128, max_len))
        seq_len = bucket_length(max((len(s) for s in samples), default=1), buckets)
        rows = self.rows // jax.process_count()  # this host's rows of each global batch
        has_old = all(s.has_old_logprobs for s in samples)
        if not has_old and self.loss_cfg.kind == "grpo" and self.config.train.old_logprobs == "engine":
            # A mixed batch (e.g. rollouts beside demonstrations): keep the sampler's logprobs where a sample has
            # them (overlapped rollouts are off-policy: their ratio needs them) and mark the rest NaN, which
            # `_prepare` fills with the pre-update policy's.
            samples = [s if s.has_old_logprobs else dataclasses.replace(s, old_logprobs=np.full(len(s), np.nan, np.float32))
                       for s in samples]
        if self.processor is not None:
            return self._vl_round_batches(samples, seed, seq_len, rows, has_old)
        host = pack_samples(samples, seq_len, rows, seed=seed, mode=self.config.data.mode) if samples else []
        if jax.process_count() > 1:  # every host must run the same steps on the same shapes (jaxwebrl.train.hosts)
            plan = agree_round(seq_len, len(host), has_old)
            host, seq_len, has_old = conform(host, plan, rows), plan.seq_len, not plan.recompute_old_logprobs
        return host, seq_len, has_old

    def _vl_round_batches(self, samples: Sequence[Sample], seed: int, seq_len: int, rows: int,
                          has_old: bool) -> tuple[list[Batch], int, bool]:
        """One sample per row (shuffled), patches bucketed by the row with the most; rows past the samples are
        empty. Hosts agree on the shapes before any batch is built, so no batch is padded afterwards."""
        assert isinstance(self.model_cfg, VLConfig)
        longest = max((len(s) for s in samples), default=0)
        if longest > seq_len:  # text samples are cut; a VL row cannot be (its image placeholders must stay whole)
            raise ValueError(f"config.train.seq_len: a vision-language sample of {longest} tokens exceeds it "
                             f"({self.config.train.seq_len}); set agent.max_context_tokens <= train.seq_len")
        order = np.random.default_rng(seed).permutation(len(samples))
        patches = rows_patch_bucket(self.model_cfg, samples)
        n = -(-len(samples) // rows)
        if jax.process_count() > 1:
            plan = agree_round(seq_len, n, has_old)
            seq_len, n, has_old = plan.seq_len, plan.num_batches, not plan.recompute_old_logprobs
            patches = int(gather_ints([patches]).max())
        picked: list[Sample | None] = [samples[i] for i in order] + [None] * (n * rows - len(samples))
        return [vl_rows(self.model_cfg, picked[b * rows:(b + 1) * rows], self.processor, seq_len, patches)
                for b in range(n)], seq_len, has_old

    # ---- checkpoints, export, logs -----------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {"model": model_config_to_json(self.model_cfg), "tokenizer_dir": self.tokenizer_dir,
                "recipe": self.config.recipe, "step": self.step, "run": dict(self.run_meta)}

    def save(self, force: bool = False) -> bool:
        if self.checkpointer is None:
            return False
        data = self.data_iterator.get_state() if self.data_iterator is not None else None
        metrics = {k: v for k, v in self.last_metrics.items() if np.isfinite(v)} or None
        return self.checkpointer.save(self.step, self.state, data, self.meta(), metrics, force=force)


    def maybe_save(self) -> bool:
        """Save when the step is a multiple of `checkpoint.every` (0 = never)."""
        every = self.config.checkpoint.every
        return bool(every) and self.step % every == 0 and self.save()

    def restore(self, step: int | None = None) -> int:
        """Restore state (into this mesh's shardings) and the data iterator state; returns the step."""
        assert self.checkpointer is not None
        abstract = abstract_state(self.model_cfg, self.tx, self.mesh)
        self.state, data, meta = self.checkpointer.restore(abstract, step)
        self.run_meta = dict(meta.get("run") or {})
        if data:
            if self.data_iterator is not None:
                self.data_iterator.set_state(data)
            else:
                self._pending_data_state = data
        return self.step

    def export(self, out_dir: str | None = None, dtype: str | None = None) -> str:
        out = out_dir or os.path.join(self.config.checkpoint.export_dir or os.path.join(self.config.workdir, "hf"), f"step_{self.step}")
        export_policy_hf(self.model_cfg, self.params, out, tokenizer_dir=self.tokenizer_dir, dtype=dtype)
        return str(out)

    def log(self, metrics: dict[str, float] | None = None, prefix: str = "train") -> None:
        """Write scalars (TensorBoard + JSONL) at the current step; names get `prefix/` unless it is ''."""
        self.writer.write(self.step, metrics or self.last_metrics, prefix)

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        self.writer.close()
