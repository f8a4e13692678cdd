"""The visual local run's smoke variant (`configs/grpo_local_vl.py --config.quick=true`) runs end to end: scripted
coordinate demonstrations recorded with their screenshots -> a tiny Qwen3-VL with its own tokenizer and
processor built from scratch -> behaviour cloning on pixels -> one MM-GRPO iteration whose rollouts the
JaxEngine sampled from screenshots (no HTML, no accessibility tree) -> trained and exported. Real Chromium,
MiniWoB++, the real engine and trainer; the evaluation report is the main job's (tested with the text run).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from jaxwebrl.config import apply_variants, parse_config, validate_config
from jaxwebrl.models.vl_or_text import load_tokenizer_or_processor
from test_recipes_local import load

pytestmark = pytest.mark.timeout(3600)  # minutes on a loaded 2-core machine; see the report


def test_visual_local_run_quick(tmp_path: Path) -> None:
    from jaxwebrl.main_job.stages import run_main_job

    c = apply_variants(load("grpo_local_vl", quick=True))
    c.workdir, c.log.progress, c.report.enabled = str(tmp_path), False, False
    run = parse_config(c)
    validate_config(run, 1)
    assert run.env.text_mode == "none" and run.env.screenshot and run.model.vision
    summary = run_main_job(run)

    # demonstrations: box-centre clicks in OpenWebRL's grammar, each turn with the screenshot it acted on
    demos = [json.loads(line) for line in (tmp_path / "demonstrations.jsonl").read_text().splitlines()]
    turns = [turn for t in demos for turn in t["turns"]]
    assert turns and all(turn["format_ok"] and '"name": "click"' in turn["action"] for turn in turns)
    assert all(len(turn["images"]) == 1 and turn["observation"] == "" for turn in turns)
    init = json.loads((tmp_path / "policy_init" / "config.json").read_text())
    assert init["architectures"] == ["Qwen3VLForConditionalGeneration"]
    processor = load_tokenizer_or_processor(str(tmp_path / "policy_init"))  # saved beside the weights
    assert processor.image_processor.patch_size == init["vision_config"]["patch_size"]
    bc_log = [json.loads(line) for line in (tmp_path / "bc" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert len(bc_log) == run.bc.steps and bc_log[-1]["bc/nll"] < bc_log[0]["bc/nll"]

    # one MM-GRPO iteration on the BC policy's own rollouts from screenshots, trained and exported
    (record,) = [json.loads(line) for line in (tmp_path / "rl" / "history.jsonl").read_text().splitlines()]
    m = record["metrics"]
    assert summary["iterations"] == 1 and m["rollout/episodes_tried"] >= run.rollout.group_size
    assert m["train/samples_used"] > 0 and math.isfinite(m["train/loss"]) and m["train/patches"] >= 64
    rollouts = [json.loads(line) for line in (tmp_path / "rl" / "rollouts.jsonl").read_text().splitlines()]
    assert rollouts and all(turn["images"] for r in rollouts for turn in r["turns"])
    bc = load_file(str(tmp_path / "bc" / "hf" / "model.safetensors"))
    rl = load_file(str(tmp_path / "rl" / "hf" / "model.safetensors"))
    assert any(not np.array_equal(bc[k], rl[k]) for k in bc if k.startswith("model.visual."))
