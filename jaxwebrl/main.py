"""The training entry point: a config in, a trained and exported policy out.

    python -m jaxwebrl --config configs/sft_synthetic.py --config.optim.lr=1e-3
    python scripts/train.py --config configs/grpo_local.py --config.quick=true      # the same, as a script
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m jaxwebrl --config configs/grpo_tpu.py --dry_run

`train(config)` runs the mode `data.kind` names through the one training loop (`jaxwebrl.train.loop`):
`sft` streams demonstration files (or a synthetic set) through the Grain pipeline, one optimizer step per
round; `trajectories` trains on saved rollouts in batches of whole groups with the recipe's filters and
advantages; `online` runs the main job (`jaxwebrl.main_job.stages`: behaviour cloning, RL with real
browsers and the engine, the evaluation report).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Collection

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from jaxwebrl.config import (
    RunConfig, apply_variants, command_line_fields, parse_config, resolve_pretrained, validate_config,
)

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def train(config: object, explicit: Collection[str] = ()) -> dict[str, float]:
    """Run a config (an ml_collections ConfigDict from `configs/*.py`, or a RunConfig); returns the final
    metrics (online: the run summary). `explicit` names fields set on the command line (they win over
    the config's quick variant)."""
    if not isinstance(config, RunConfig):
        config = parse_config(apply_variants(config, explicit))  # type: ignore[arg-type]
    config = resolve_pretrained(config)
    validate_config(config, len(jax.devices()))
    if config.data.kind == "online":
        from jaxwebrl.main_job.stages import run_main_job

        return run_main_job(config)
    return train_offline(config)


def train_offline(run: RunConfig) -> dict[str, float]:
    """SFT from files, or GRPO/RFT from saved rollouts."""
    from jaxwebrl.data.pipeline import DataIterator, PipelineConfig, make_dataset, trajectory_files_dataset
    from jaxwebrl.data.records import read_trajectories
    from jaxwebrl.data.synthetic import write_synthetic_jsonl
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.recipes.papers import run_samples
    from jaxwebrl.train.loop import BatchSource, GroupBatches, RecordSource, run_fit
    from jaxwebrl.train.trainer import Trainer

    records = run.data.kind == "trajectories"
    trainer = Trainer(run, total_steps=run.train.steps * (run.train.epochs if records else 1))
    files = run.data.files
    if not files:  # the synthetic set, tokenised with the model's own tokenizer
        if not trainer.tokenizer_dir:
            raise SystemExit("config.data.synthetic needs a model with a tokenizer (model.source='tiny' or 'hf')")
        path = os.path.join(run.workdir, f"synthetic_{run.data.kind}.jsonl")
        if jax.process_index() == 0 and not os.path.exists(path):
            write_synthetic_jsonl(path, load_tokenizer(trainer.tokenizer_dir), run.data.synthetic_records, run.data.kind, run.seed)
        files = [path]
    if records:
        groups = GroupBatches([t for f in files for t in read_trajectories(f)], run.train.groups_per_step)
        trainer.attach_data(groups)  # type: ignore[arg-type]
        source = RecordSource(groups, lambda trajs: run_samples(run, trajs))
    else:
        pipe = PipelineConfig(seq_len=run.train.seq_len, rows=trainer.rows // jax.process_count(), seed=run.seed,
                              shuffle=run.data.shuffle, mode=run.data.mode, shard_index=jax.process_index(),
                              shard_count=jax.process_count())
        it = DataIterator(make_dataset(trajectory_files_dataset(files, run.data.per, run.data.norm), pipe))
        trainer.attach_data(it)
        source = BatchSource(it)
    metrics = run_fit(trainer, source, run.train.steps, progress=run.log.progress and jax.process_index() == 0,
                      log_every=run.log.every, save_every=run.checkpoint.every, export_every=run.checkpoint.export_every)
    out = trainer.export()
    trainer.close()
    print(f"finished at step {trainer.step}; checkpoint in {trainer.checkpointer.directory}; HF export in {out}")
    print("FINAL_METRICS " + json.dumps(metrics))
    return metrics


_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(_CONFIGS, "sft_synthetic.py"),
                                          "Python config file with get_config().", lock_config=True)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Lower and compile the train step against abstract params; print memory and FLOPs.")


COMPILATION_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "jaxwebrl", "xla")
COMPILATION_CACHE_BYTES = 4 << 30  # least recently used programs go first past this


def use_compilation_cache() -> None:
    """Keep what a run compiles in JAX's compilation cache on disk: every policy the main job evaluates gets
    an engine of its own with the same programs (SmolLM2: about 30 s of compiling each), and a resumed or
    repeated run compiles nothing it compiled before. `JAX_COMPILATION_CACHE_DIR` set (empty: off) wins."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        jax.config.update("jax_compilation_cache_dir", COMPILATION_CACHE)
        jax.config.update("jax_compilation_cache_max_size", COMPILATION_CACHE_BYTES)


def _main(argv: list[str]) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    use_compilation_cache()
    config = _CONFIG.value
    if _DRY_RUN.value:  # ahead-of-time compile on this process's devices: no cluster needed
        from jaxwebrl.train.dry_run import dry_run, format_report

        run = parse_config(apply_variants(config, command_line_fields(sys.argv[1:])))
        report = dry_run(run, validate_config(run, len(jax.devices()), check_paths=False))
        print(format_report(report))
        print("DRY_RUN " + json.dumps(report))
        return
    from jaxwebrl.sharding import maybe_initialize_distributed

    explicit = command_line_fields(sys.argv[1:])
    config = apply_variants(config, explicit)  # a local / quick variant may turn multi-host off
    maybe_initialize_distributed(config)  # multi-host: before any device is touched
    train(config, explicit)


def cli() -> None:
    app.run(_main)
