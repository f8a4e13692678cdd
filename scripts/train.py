"""The one training entry point.

  python scripts/train.py --config configs/sft_demo.py --config.optim.lr=1e-3
  python scripts/train.py --config configs/grpo_demo.py --config.checkpoint.resume=true
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python scripts/train.py --config configs/grpo_tpu.py --dry_run

SFT-family configs (data.kind='sft') stream demonstrations through the Grain pipeline; GRPO configs
(data.kind='trajectories') train from rewarded trajectory records in rollout batches of whole groups;
online configs (data.kind='online', e.g. configs/grpo_local.py) drive real browsers and the rollout engine
(jaxwebrl.recipes.run: optional behaviour cloning from scripted demonstrations, RL, evaluation report).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Collection

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(os.path.dirname(__file__), "..", "configs", "sft_demo.py"),
                                          "Python config file with get_config().", lock_config=True)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Lower and compile the train step against abstract params; print memory and FLOPs.")


def run(config, explicit: Collection[str] = ()) -> dict[str, float]:  # type: ignore[no-untyped-def]
    import jax
    from tqdm import tqdm

    from jaxwebrl.data.demo import write_demo_jsonl
    from jaxwebrl.data.pipeline import DataIterator, PipelineConfig, make_dataset, trajectory_files_dataset
    from jaxwebrl.data.records import read_trajectories
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.train.batches import GroupBatches, trajectories_to_samples
    from jaxwebrl.train.config import apply_quick, data_files, validate_config
    from jaxwebrl.train.trainer import Trainer

    config = apply_quick(config, explicit)  # fields set on the command line win over the quick variant
    validate_config(config, len(jax.devices()))
    if config.data.kind == "online":  # browsers + engine + trainer: the online RL loop (jaxwebrl.recipes.run)
        from jaxwebrl.recipes.run import run_online

        return run_online(config)
    total = int(config.train.steps) * (int(config.train.epochs) if config.data.kind == "trajectories" else 1)
    trainer = Trainer(config, total_steps=total)
    files = data_files(config)
    if not files:  # the demo set, tokenised with the model's own tokenizer
        if not trainer.tokenizer_dir:
            raise SystemExit("config.data.demo needs a model with a tokenizer (model.source='tiny' or 'hf')")
        path = os.path.join(config.workdir, f"demo_{config.data.kind}.jsonl")
        if jax.process_index() == 0 and not os.path.exists(path):
            write_demo_jsonl(path, load_tokenizer(trainer.tokenizer_dir), int(config.data.demo_records), config.data.kind, int(config.seed))
        files = [path]

    if config.data.kind == "sft":
        pipe = PipelineConfig(seq_len=int(config.train.seq_len), rows=trainer.rows // jax.process_count(),
                              seed=int(config.seed), shuffle=bool(config.data.shuffle), mode=config.data.mode,
                              shard_index=jax.process_index(), shard_count=jax.process_count())
        source = trajectory_files_dataset(files, config.data.per, config.data.norm)
        it = DataIterator(make_dataset(source, pipe))
        trainer.attach_data(it)
        def one_step() -> dict[str, float]:
            return trainer.train_on_batch(next(it))
    else:
        groups = GroupBatches([t for f in files for t in read_trajectories(f)], int(config.train.groups_per_step))
        trainer.attach_data(groups)  # type: ignore[arg-type]
        def one_step() -> dict[str, float]:
            samples = trajectories_to_samples(config, next(groups))
            return trainer.train_on_samples(samples) if samples else {}

    steps = int(config.train.steps)
    start = trainer.step if config.data.kind == "sft" else groups.pos // int(config.train.groups_per_step)
    bar = tqdm(range(start, steps), initial=start, total=steps, disable=not config.log.progress or jax.process_index() != 0)
    metrics: dict[str, float] = {}
    export_every = int(config.checkpoint.export_every)
    for i in bar:
        metrics = one_step() or metrics
        if metrics and (i + 1) % int(config.log.every) == 0:
            trainer.log(metrics)
            bar.set_postfix(loss=f"{metrics.get('loss', float('nan')):.4f}", tok_s=f"{metrics.get('tokens_per_s', 0):.0f}")
        if (i + 1) % int(config.checkpoint.every) == 0 and (i + 1) < steps:
            trainer.save()
        if export_every and (i + 1) % export_every == 0 and (i + 1) < steps:
            trainer.export()
    trainer.save(force=True)
    out = trainer.export()
    trainer.close()
    print(f"finished at step {trainer.step}; checkpoint in {trainer.checkpointer.directory}; HF export in {out}")
    print("FINAL_METRICS " + json.dumps(metrics))
    return metrics


def main(argv: list[str]) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save at INFO
    config = _CONFIG.value
    from jaxwebrl.sharding import maybe_initialize_distributed

    if _DRY_RUN.value:  # ahead-of-time compile on this process's devices: no cluster needed
        from jaxwebrl.train.dry_run import dry_run, format_report

        report = dry_run(config)
        print(format_report(report))
        print("DRY_RUN " + json.dumps(report))
        return
    maybe_initialize_distributed(config)  # multi-host: before any device is touched
    from jaxwebrl.train.config import command_line_fields

    run(config, command_line_fields(sys.argv[1:]))


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    app.run(main)
