"""NNetNav's trajectory labeler trained here (issue 23 item 3): the scripted solvers play the main job's
demonstrated MiniWoB++ tasks, a rule writes each step's state-change summary, and the BC policy's weights are
fine-tuned to write the task's own utterance from the summaries (summaries -> "Instruction: ..."); held-out
seeds report exact match and softer measures against the true utterances (report.md), and the labeler is
exported to HuggingFace (`labeler_hf/`), usable as `nnetnav.labeler_path`.

    python scripts/train_judge.py --config configs/labeler_local.py \
        --config.policy=runs/grpo_local/bc/hf [--config.quick=true]

`policy_run` is the main job's config (configs/grpo_local.py): its tasks (the demonstrated ones are labelled),
browser and agent settings. Every other field is `jaxwebrl.judge_training.labeler.LabelerTrainingConfig`.
"""

import dataclasses

import ml_collections

from jaxwebrl.config import sibling_config
from jaxwebrl.judge_training.labeler import LabelerTrainingConfig


def get_config():
    c = ml_collections.ConfigDict({f.name: getattr(LabelerTrainingConfig(), f.name)
                                   for f in dataclasses.fields(LabelerTrainingConfig)})
    c.kind = "labeler"
    c.policy = "runs/grpo_local/bc/hf"
    c.workdir = "runs/labeler_local"
    c.policy_run = sibling_config(__file__, "grpo_local")
    c.quick = False
    # the smoke variant: two demonstrated tasks, a few instances and steps
    c.quick_overrides = ml_collections.ConfigDict({
        "workdir": "runs/labeler_local_quick", "train_seeds": 6, "heldout_seeds": 3, "steps": 30,
        "policy_run": {"tasks": {"train": "click-button,focus-text"}},
    })
    return c
