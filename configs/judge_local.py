"""A judge trained here (issue 21 item 4): the main job's BC policy plays its MiniWoB++ tasks at temperature,
the rule evaluator labels the episodes, and a small Flax judge (the BC policy's weights) is fine-tuned to write
SUCCESS / NOT SUCCESS; held-out seeds report accuracy, precision, recall and AUC with 95% intervals against the
majority-class baseline (report.md, calibration.png), and the judge is exported to HuggingFace.

    python scripts/train_judge.py --config configs/judge_local.py \
        --config.policy=runs/grpo_local/bc/hf [--config.quick=true]

`policy_run` is the main job's config (configs/grpo_local.py): its tasks, browser and agent settings are the
ones the BC policy was trained with. Every other field is `jaxwebrl.judge_training.verifier.JudgeTrainingConfig`.
"""

import dataclasses

import ml_collections

from jaxwebrl.config import sibling_config
from jaxwebrl.judge_training.verifier import JudgeTrainingConfig


def get_config():
    c = ml_collections.ConfigDict({f.name: getattr(JudgeTrainingConfig(), f.name)
                                   for f in dataclasses.fields(JudgeTrainingConfig)})
    c.policy = "runs/grpo_local/bc/hf"
    c.workdir = "runs/judge_local"
    c.policy_run = sibling_config(__file__, "grpo_local")
    c.quick = False
    # the smoke variant: three demonstrated tasks and three the BC policy often fails, fewer instances and steps
    c.quick_overrides = ml_collections.ConfigDict({
        "workdir": "runs/judge_local_quick", "train_seeds": 6, "heldout_seeds": 5, "steps": 40,
        "policy_run": {"tasks": {"train": "click-button,click-link,click-option,click-dialog-2,click-widget,click-checkboxes"}},
    })
    return c
