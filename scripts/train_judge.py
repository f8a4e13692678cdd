"""Train a judge here: the verifier (issue 21 item 4; jaxwebrl/judge_training/verifier.py) or NNetNav's
trajectory labeler (issue 23 item 3; jaxwebrl/judge_training/labeler.py), by the config's `kind`:

    python scripts/train_judge.py --config configs/judge_local.py --config.policy=runs/grpo_local/bc/hf
    python scripts/train_judge.py --config configs/judge_local.py --config.quick=true
    python scripts/train_judge.py --config configs/labeler_local.py --config.policy=runs/grpo_local/bc/hf

The config is the training config's fields (`JudgeTrainingConfig` / `LabelerTrainingConfig`) plus `kind`
('verifier', the default, or 'labeler') and `policy_run` (the main job's config: tasks, browser and agent
settings the BC policy was trained with); `--config.quick=true` applies `quick_overrides` except to fields set
on the command line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, Collection, Sequence


KINDS = ("verifier", "labeler")


def schema(kind: str) -> type:
    """The training config class of a `kind`."""
    if kind == "labeler":
        from jaxwebrl.judge_training.labeler import LabelerTrainingConfig

        return LabelerTrainingConfig
    from jaxwebrl.judge_training.verifier import JudgeTrainingConfig

    return JudgeTrainingConfig


def parse(config: Any, explicit: Collection[str] = ()) -> tuple[Any, Any]:
    """(the policy's run config, the JudgeTrainingConfig / LabelerTrainingConfig) from the config's tree."""
    import ml_collections

    from jaxwebrl.config import ConfigError, apply_variants, parse_config
    from jaxwebrl.fields import FieldError

    tree = config.to_dict()
    kind = tree.pop("kind", "verifier")
    if kind not in KINDS:
        raise ConfigError(f"config.kind: {kind!r} is not a judge trained here; use one of {KINDS}")
    training = schema(kind)
    quick, overrides = tree.pop("quick", False), dict(tree.pop("quick_overrides", {}) or {})
    policy_run = ml_collections.ConfigDict(tree.pop("policy_run"))
    if quick:  # the smoke variant: judge fields, and `policy_run` fields (e.g. fewer tasks), as the config lists

        def overlay(node: Any, changes: dict[str, Any], prefix: str) -> None:
            for key, value in changes.items():
                if prefix + key in explicit:
                    continue
                if isinstance(value, dict) and key != "shape":
                    overlay(node[key], value, f"{prefix}{key}.")
                else:
                    node[key] = value

        overlay(policy_run, overrides.pop("policy_run", {}) or {}, "policy_run.")
        overlay(tree, overrides, "")
    policy_run.quick = False
    run = parse_config(apply_variants(policy_run))
    known = {f.name for f in dataclasses.fields(training)}
    for k in tree:
        if k not in known:
            raise ConfigError(f"config.{k}: is not a known field of the {kind} training; known: {sorted(known)}")
    try:
        return run, training(**tree)
    except FieldError as e:
        raise e.at("config.") from None


def main(argv: Sequence[str] | None = None) -> None:
    from absl import app
    from ml_collections import config_flags

    flag = config_flags.DEFINE_config_file("config", "configs/judge_local.py", "judge training config file")

    def run_main(_: Sequence[str]) -> None:
        from jaxwebrl.config import command_line_fields
        from jaxwebrl.judge_training.labeler import train_labeler
        from jaxwebrl.judge_training.verifier import JudgeTrainingConfig, train_judge

        run, cfg = parse(flag.value, command_line_fields(sys.argv if argv is None else argv))
        if isinstance(cfg, JudgeTrainingConfig):
            summary = train_judge(run, cfg)
            print(json.dumps({k: v["point"] for k, v in summary["results"].items()}, indent=1))
        else:
            print(json.dumps(train_labeler(run, cfg)["rates"], indent=1))

    app.run(run_main, argv=list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
