"""A paper config's local variant trains for real: behaviour cloning on scripted demonstrations written in the
paper's own grammar, then the paper's online loop on the BC policy's own rollouts (the JaxEngine sampling,
real Chromium, MiniWoB++), exported. The smoke variant (`local=True, quick=True`) keeps the paper's recipe,
context strategy, prompt format, action space, loss, normalisation, epochs, dynamic sampling and group size
(asserted).

One config runs here: OpenWebRL (MM-GRPO, coordinate tool calls, format gate, dynamic sampling, two epochs),
about 2 minutes of CI; its screenshot twin is tests/test_local_vl.py. Every recipe's update and its paper
mechanisms (WebGym's filtered REINFORCE, memory and replay among them) are tested with a scripted policy in
test_recipe_mechanisms.py, every paper config's scale by the dry run, and the full local variant of each
paper is measured in RESULTS.md. (WebGym's local variant ran here too until the suite outgrew CI's budget:
`pytest tests/test_recipes_local.py --local-variant=reinforce_webgym` runs any other.)
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


def test_local_variant_trains(local_variant, tmp_path):
    name = local_variant
    from jaxwebrl.main_job.stages import run_main_job

    paper = parse_config(load(name))
    c = apply_variants(load(name, local=True, quick=True))
    c.workdir, c.log.progress, c.report.enabled = str(tmp_path), False, False
    run = parse_config(c)
    validate_config(run, 1)
    assert {k: _get(run, k) for k in IDENTITY} == {k: _get(paper, k) for k in IDENTITY}
    summary = run_main_job(run)
    # BC learnt from demonstrations written in the paper's grammar (each parses as that grammar's action)
    demos = [json.loads(line) for line in (tmp_path / "demonstrations.jsonl").read_text().splitlines()]
    assert demos and all(turn["format_ok"] and turn["action"] for t in demos for turn in t["turns"])
    bc_log = [json.loads(line) for line in (tmp_path / "bc" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert len(bc_log) == run.bc.steps and bc_log[-1]["bc/nll"] < 0.6 * bc_log[0]["bc/nll"]
    # then the paper's online loop ran on the BC policy's own rollouts, every iteration, and exported
    history = [json.loads(line) for line in (tmp_path / "rl" / "history.jsonl").read_text().splitlines()]
    assert summary["iterations"] == len(history) == run.rl.iterations
    assert all(h["metrics"]["rollout/episodes_tried"] >= run.rollout.group_size for h in history)
    rollouts = [json.loads(line) for line in (tmp_path / "rl" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["metadata"]["iteration"] for r in rollouts} == set(range(run.rl.iterations))
    # ... and trained on them: samples, a finite loss, parameters moved away from BC's
    trained = [h["metrics"] for h in history if h["metrics"]["train/samples_used"] > 0]
    assert trained, f"{name}: no iteration trained a sample: {[h['metrics'] for h in history]}"
    assert all(math.isfinite(m["train/loss"]) for m in trained)
    bc = load_file(str(tmp_path / "bc" / "hf" / "model.safetensors"))
    rl = load_file(str(tmp_path / "rl" / "hf" / "model.safetensors"))
    assert any(not np.array_equal(bc[k], rl[k]) for k in bc), f"{name}: RL left every BC parameter unchanged"
