"""Each paper's recipe-specific mechanisms fire in its online loop, observed in the run's metrics and records.

Every test runs a paper config's local smoke variant (`local=True, quick=True`: the paper's recipe, context
strategy, prompt format, action space, loss and normalisation) for two iterations with real Chromium on
MiniWoB++ and the real Flax trainer, but with a SCRIPTED POLICY (tests/recipe_fixtures.py) behind the
Engine protocol, so the episode mixes each mechanism needs occur every time: a group with equal rewards, an
episode aborted for format errors, a longer correct rollout, a step that changes nothing. The trainer
recomputes old logprobs (the scripted engine has none), which is the only change to the paper's update.
Learning with a real policy is tested in tests/test_recipes_local.py.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import json
import math
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np
import pytest

from jaxwebrl.config import apply_variants, parse_config, validate_config, with_changes
from jaxwebrl.data.records import Trajectory, read_trajectories
from jaxwebrl.rollout import replay_draw_count
from recipe_fixtures import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[1]


def paper_config(name: str, workdir: Path, **changes: Any):
    """The paper config's local smoke variant, with the scripted policy's model and `changes` on top."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.local = c.quick = True
    run = parse_config(apply_variants(c))
    paper = parse_config(module.get_config())
    assert (run.recipe, run.agent.strategy, run.agent.prompt_format, run.env.action_space, run.loss.kind,
            run.data.per, run.data.norm) == (paper.recipe, paper.agent.strategy, paper.agent.prompt_format,
                                             paper.env.action_space, paper.loss.kind, paper.data.per, paper.data.norm)
    base = {"workdir": str(workdir), "model.source": "tiny", "model.path": "", "model.shape": {},"bc.enabled": False,
            "report.enabled": False, "log.progress": False, "train.old_logprobs": "recompute",
            "tasks.train": "click-test", "rollout.max_concurrent_groups": 1, "env.contexts_per_browser": 4,
            "agent.max_context_tokens": 8192, "train.seq_len": 8192, "engine.max_len": 8192}
    run = with_changes(run, **{**base, **changes})
    validate_config(run, len(jax.devices()))
    return run


def scripted_run(run, roles: Sequence[str]) -> tuple[list[dict], list[Trajectory], ScriptedPolicy, dict, dict]:
    """Two (run.rl.iterations) iterations of the online loop with the scripted policy. Returns the history, the
    saved rollouts, the policy, and the trainer's params before and after."""
    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.train.loop import fit
    from jaxwebrl.train.trainer import Trainer

    trainer = Trainer(run, total_steps=100)
    before = jax.tree.map(np.asarray, trainer.params)
    made: list[ScriptedPolicy] = []

    def engine_factory(cfg, *, tokenizer, **_):
        made.append(ScriptedPolicy(tokenizer, run.env.action_space, run.agent.prompt_format, roles))
        return made[0]

    rl_dir = Path(run.workdir) / "rl"
    rl_dir.mkdir(parents=True)

    async def go() -> list[dict]:
        async with OnlineRL(run, trainer, rl_dir / "history.jsonl", engine_factory=engine_factory) as rl:
            await fit(trainer, rl, run.rl.iterations, progress=False)
            return rl.history

    history = asyncio.run(go())
    after = jax.tree.map(np.asarray, trainer.params)
    trainer.close()
    return history, read_trajectories(rl_dir / "rollouts.jsonl"), made[0], before, after


def assert_trained(history: list[dict], before: Any, after: Any) -> None:
    """The update ran on real samples: samples > 0 and a finite loss every iteration, parameters moved."""
    for h in history:
        m = h["metrics"]
        assert m["train/samples_used"] > 0, m
        assert math.isfinite(m["train/loss"]), m
    moved = [a for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)) if not np.array_equal(a, b)]
    assert moved, "the recipe's updates left every parameter unchanged"


def by_iteration(rollouts: list[Trajectory]) -> dict[int, list[Trajectory]]:
    out: dict[int, list[Trajectory]] = collections.defaultdict(list)
    for t in rollouts:
        out[t.metadata["iteration"]].append(t)
    return out


def test_openwebrl_format_gate_dynamic_sampling_horizon_and_epochs(tmp_path):
    # Groups of 5 take roles[0:5] then roles[5:10]: five idle episodes (rewards all 0: dropped and resampled),
    # then one garbage episode (aborted for format errors: -1) beside four idle ones (0).
    roles = ["idle"] * 5 + ["garbage"] + ["idle"] * 4
    run = paper_config("grpo_openwebrl", tmp_path, **{"rollout.horizon_schedule": "0:4,1:6",
                                                      "rollout.groups_per_iteration": 1})
    history, rollouts, policy, before, after = scripted_run(run, roles)
    assert_trained(history, before, after)
    for h in history:
        m = h["metrics"]
        assert m["rollout/groups_rejected"] >= 1 and m["rollout/groups_tried"] == m["rollout/groups_rejected"] + 1
        assert m["train/epochs"] == 2 and m["train/optimizer_steps"] % 2 == 0  # two PPO epochs per batch
    garbage = [t for t in rollouts if t.termination == "format_errors"]
    assert garbage and all(t.reward == -1.0 for t in garbage)  # the format gate
    idle = by_iteration([t for t in rollouts if t.termination == "max_steps"])
    assert {len(t.turns) for t in idle[0]} == {4} and {len(t.turns) for t in idle[1]} == {6}  # horizon rose
    assert all(t.reward == 0.0 for ts in idle.values() for t in ts)
    assert history[1]["metrics"]["rollout/horizon/easy"] == 6.0


def test_webgym_repetition_filter_replay_difficulty_and_memory(tmp_path):
    roles = ["slow_solve", "solve", "idle"]
    run = paper_config("reinforce_webgym", tmp_path, **{
        "tasks.train": "click-test,click-checkboxes,login-user", "tasks.difficulty_ratio": "easy:3,medium:1,hard:1",
        "rollout.horizon_per_difficulty": "easy:2,medium:3,hard:4", "rollout.groups_per_iteration": 8})
    history, rollouts, policy, before, after = scripted_run(run, roles)
    assert_trained(history, before, after)
    m0, m1 = history[0]["metrics"], history[1]["metrics"]
    # the repetition filter: slow_solve's scroll left the page as it was, so that step trains nothing
    assert m0["recipe/webgym_repetition/turns_in"] > m0["recipe/webgym_repetition/turns_out"] > 0
    assert m0["recipe/webgym_repetition/trajectories_out"] < m0["recipe/webgym_repetition/trajectories_in"]
    # replay: the second iteration's batch draws from the first iteration too, as many as keep each sample's
    # reuse at the paper's ~2 trainings (epochs included)
    assert run.rollout.replay_reuse == 2.0 and m1["recipe/samples"] > 0
    assert m1["replay/from_earlier_iterations"] > 0
    assert m1["replay/samples"] == replay_draw_count(int(m1["recipe/samples"]), run.rollout.replay_samples,
                                                     run.rollout.replay_reuse, run.train.epochs)
    # the difficulty ratio and the per-difficulty horizons
    played = collections.Counter(str(t.task_id) for t in rollouts)
    assert set(played) == {"miniwob.click-test", "miniwob.click-checkboxes", "miniwob.login-user"}
    assert played["miniwob.click-test"] > max(played["miniwob.click-checkboxes"], played["miniwob.login-user"])
    horizon = {"miniwob.click-test": 2, "miniwob.click-checkboxes": 3, "miniwob.login-user": 4}
    idle = [t for t in rollouts if t.termination == "max_steps"]
    assert idle and all(len(t.turns) == horizon[t.task_id] for t in idle)
    assert (m0["rollout/horizon/easy"], m0["rollout/horizon/medium"], m0["rollout/horizon/hard"]) == (2, 3, 4)
    # memory carried: each turn's prompt holds the memory the previous reply wrote
    later = [p for prompts in policy.prompts.values() for p in prompts[1:]]
    assert later and all("note-" in p for p in later)


def offline(config_name: str, workdir: Path, records: Path, model_dir: Path, **changes: Any) -> dict[str, float]:
    """`python -m jaxwebrl --config configs/<config_name>.py` on saved rollout records (data.kind='trajectories'),
    in-process, at a tiny size."""
    from jaxwebrl.main import train

    spec = importlib.util.spec_from_file_location(config_name, ROOT / "configs" / f"{config_name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = with_changes(parse_config(module.get_config()), **{
        "workdir": str(workdir), "data.kind": "trajectories", "data.synthetic": False, "data.train_files": str(records),
        "model.source": "hf", "model.path": str(model_dir), "model.dtype": "float32", "model.remat": False,
        "train.seq_len": 8192, "train.micro_batch": 2, "train.accum_steps": 1, "train.logits_chunk": 0,
        "train.groups_per_step": 2, "train.steps": 2, "log.progress": False, **changes})
    return train(run)


def test_browseragent_rft_selection_and_conclusions(tmp_path):
    # Groups of 4: (slow_solve, solve, idle, idle) -> 2 of 4 correct: kept, the 2-step rollout trains;
    # then (idle x 4) -> none correct: dropped.
    roles = ["slow_solve", "solve", "idle", "idle"] + ["idle"] * 4
    run = paper_config("rft_browseragent", tmp_path, **{"rollout.groups_per_iteration": 2,
                                                        "rollout.horizon_schedule": "0:3", "rl.demonstration_share": 0.0})
    history, rollouts, policy, before, after = scripted_run(run, roles)
    assert_trained(history, before, after)
    for h in history:
        m = h["metrics"]
        assert m["recipe/rft_select/trajectories_in"] == 8 and m["recipe/rft_select/trajectories_out"] == 1
        assert m["recipe/rft_select/turns_out"] == 2  # the longest correct rollout (slow_solve: scroll, click)
    assert all(t.reward == 1.0 for t in rollouts if policy.role_of(t.metadata["episode_id"]) != "idle")
    later = [p for prompts in policy.prompts.values() for p in prompts[1:]]
    assert later and all("seen-0" in p for p in later)  # every <conclusion> is carried forward

    # The offline path: RFT from the saved rollouts with the paper's SFT config (data.kind='trajectories')
    m = offline("sft_browseragent", tmp_path / "offline", tmp_path / "rl" / "rollouts.jsonl", tmp_path / "tiny_model")
    assert m["train/samples"] == 2 and math.isfinite(m["train/loss"])  # the kept group's 2-step correct rollout


def test_webagent_r1_trajectory_samples_and_compressed_history(tmp_path):
    roles = ["slow_solve", "solve", "idle", "idle"]
    run = paper_config("grpo_tpu", tmp_path, **{"rollout.horizon_schedule": "0:3"})
    history, rollouts, policy, before, after = scripted_run(run, roles)
    assert_trained(history, before, after)
    from jaxwebrl.agent.context import COMPRESSED

    for h in history:
        m = h["metrics"]  # one sample per trajectory (the paper's cut), every group has reward variance
        assert m["recipe/samples"] == m["recipe/trajectories_trained"] == run.rollout.group_size * 2
    later = [p for prompts in policy.prompts.values() for p in prompts[1:]]
    assert later and all(COMPRESSED in p for p in later)  # earlier pages compressed, the current one whole

    # The offline path: M-GRPO from the saved rollouts (configs/grpo_synthetic.py on records, not synthetic)
    m = offline("grpo_synthetic", tmp_path / "offline", tmp_path / "rl" / "rollouts.jsonl", tmp_path / "tiny_model",
                **{"train.groups_per_step": 1})
    assert m["train/samples"] == run.rollout.group_size and math.isfinite(m["train/loss"])
