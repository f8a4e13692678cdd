"""Every paper config's local variant trains for real: behaviour cloning on scripted demonstrations written in
the paper's own grammar, then the paper's online loop with the BC policy (the JaxEngine sampling, real
Chromium, MiniWoB++), exported; the smoke variant (`local=True, quick=True`) keeps the paper's recipe, context
strategy, prompt format, action space, loss and normalisation (asserted). The paper-specific mechanisms are
checked with a scripted policy in test_recipe_mechanisms.py; here the policy is the model being trained.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from jaxwebrl.config import apply_variants, parse_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
IDENTITY = ("recipe", "agent.strategy", "agent.prompt_format", "env.action_space", "loss.kind", "data.per", "data.norm",
            "train.epochs", "train.dynamic_sampling", "rollout.group_size")


def _get(run, dotted: str):
    for part in dotted.split("."):
        run = getattr(run, part)
    return run


def load(name: str, **flags):
    spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    for k, v in flags.items():
        c[k] = v
    return c


@pytest.mark.parametrize("name", ["grpo_tpu", "grpo_openwebrl", "reinforce_webgym", "rft_browseragent"])
def test_local_variant_trains(name, tmp_path):
    from jaxwebrl.recipes.main_job import run_main_job

    paper = parse_config(load(name))
    c = apply_variants(load(name, local=True, quick=True))
    c.workdir, c.log.progress, c.report.enabled = str(tmp_path), False, False
    run = parse_config(c)
    validate_config(run, 1)
    assert {k: _get(run, k) for k in IDENTITY} == {k: _get(paper, k) for k in IDENTITY}
    summary = run_main_job(run)
    history = [json.loads(line) for line in (tmp_path / "rl" / "history.jsonl").read_text().splitlines()]
    assert summary["iterations"] == len(history) == run.rl.iterations
    trained = [h["metrics"] for h in history if h["metrics"]["train/samples_used"] > 0]
    assert trained, f"{name}: no iteration trained a sample: {[h['metrics'] for h in history]}"
    assert all(math.isfinite(m["train/loss"]) for m in trained)
    # the BC policy spoke the paper's grammar: its rollouts parsed as actions at least once
    rollouts = [json.loads(line) for line in (tmp_path / "rl" / "rollouts.jsonl").read_text().splitlines()]
    assert any(turn["format_ok"] for t in rollouts for turn in t["turns"])
    bc = load_file(str(tmp_path / "bc" / "hf" / "model.safetensors"))
    rl = load_file(str(tmp_path / "rl" / "hf" / "model.safetensors"))
    assert any(not np.array_equal(bc[k], rl[k]) for k in bc), f"{name}: RL left every BC parameter unchanged"
    # BrowserAgent's RFT mixes in 80% of the SFT data over the run; the other recipes mix none
    mixed = sum(h["metrics"]["train/demonstration_groups"] for h in history)
    demos = len((tmp_path / "demonstrations.jsonl").read_text().splitlines())
    assert mixed == round(run.rl.demonstration_share * demos) and (mixed > 0) == (name == "rft_browseragent")
