"""Evaluate any checkpoint greedily on held-out task instances and write the run report.

  python scripts/eval.py --checkpoint runs/grpo_local/rl/hf --suite miniwob --tasks click-button,click-link --episodes 20
  python scripts/eval.py --checkpoint runs/grpo_local/rl/checkpoints --checkpoint runs/grpo_local/bc/hf --out /tmp/report

--checkpoint takes a HuggingFace directory (ours or any Llama/Qwen2/Qwen3 one with a tokenizer) or an Orbax
checkpoint directory of a run (converted with export_hf first); repeat it to compare several policies.
Agent and environment settings (prompt format, context strategy, observation) come from --config
(default configs/grpo_local.py); --suite / --tasks / --episodes override them.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from absl import app, flags
from ml_collections import config_flags

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "grpo_local.py"),
                                          "Config giving the agent/env settings.")
_CKPT = flags.DEFINE_multi_string("checkpoint", None, "HF dir or Orbax checkpoint dir; repeatable.", required=True)
_SUITE = flags.DEFINE_string("suite", None, "Task suite (miniwob | local_sites).")
_TASKS = flags.DEFINE_string("tasks", None, "Comma-separated tasks to evaluate on.")
_EPISODES = flags.DEFINE_integer("episodes", 20, "Held-out seeds (episodes) per task.")
_OUT = flags.DEFINE_string("out", None, "Report directory (default: beside the first checkpoint).")


def _as_hf(path: str) -> str:
    """An HF directory for `path`: itself, or an export of the latest Orbax checkpoint under it."""
    if (Path(path) / "config.json").exists():
        return path
    from jaxwebrl.train.export import export_checkpoint

    out = os.path.join(path, "hf_eval")
    return export_checkpoint(path, out)


def main(argv: list[str]) -> None:
    del argv
    sys.path.insert(0, ROOT)
    from jaxwebrl.config import apply_variants, command_line_fields, parse_config
    from jaxwebrl.evaluation.report import paired_table, success_table, write_report
    from jaxwebrl.main_job.stages import evaluate_checkpoints

    # --config.local=true / --config.quick=true / --config.model.pretrained evaluate as the variant's run played
    cfg = apply_variants(_CONFIG.value, command_line_fields(sys.argv[1:]))
    if _SUITE.value:
        cfg.tasks.suite = _SUITE.value
    if _TASKS.value is not None:
        cfg.tasks.train = _TASKS.value
        cfg.tasks.eval = _TASKS.value
    run = parse_config(cfg)
    policies = {}
    for ck in _CKPT.value:
        name = Path(ck).name if Path(ck).name not in ("hf", "checkpoints") else Path(ck).parent.name + "/" + Path(ck).name
        policies[name] = _as_hf(ck)
    reports = asyncio.run(evaluate_checkpoints(run, policies, int(_EPISODES.value)))
    out = _OUT.value or os.path.join(os.path.dirname(os.path.abspath(_CKPT.value[0])), "eval_report")
    path = write_report(out, reports, title=f"Evaluation of {', '.join(policies)}")
    print(success_table(reports))
    print(paired_table(reports))
    print(f"report: {path}")


if __name__ == "__main__":
    app.run(main)
