"""The main job from the pretrained SmolLM2-135M-Instruct (`configs/grpo_local_smollm2.py`, `model.pretrained`).

Its prompts are rendered by the agent's token-in/token-out renderer with SmolLM2's own chat template: a turn
with an earlier sampled response spliced in as ids must be exactly the ids transformers' `apply_chat_template`
gives for the same conversation (transformers reading the tokenizer out of the GGUF file itself, an import
independent of ours). The smoke variant then runs every stage on the real checkpoint with real Chromium:
demonstrations in SmolLM2's chat format, BC of its top layers, one M-GRPO iteration, and the report with the
pretrained model zero-shot as its first row and the held-out task table.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import transformers
from safetensors.numpy import load_file

from jaxwebrl.agent.render import Message, PromptRenderer
from jaxwebrl.config import apply_variants, parse_config, resolve_pretrained, validate_config
from jaxwebrl.models import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(3600)  # the smoke run: ~6 min quiet, ~15 min on the loaded 2-core machine


def _config(**flags):
    spec = importlib.util.spec_from_file_location("grpo_local_smollm2", ROOT / "configs" / "grpo_local_smollm2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    for k, v in flags.items():
        c[k] = v
    return c, module


@pytest.fixture(scope="module")
def smollm2():
    from jaxwebrl.models.pretrained import fetch_gguf, fetch_pretrained

    gguf = fetch_gguf("smollm2")
    return {"hf": fetch_pretrained("smollm2"),
            "ref_tok": transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)}


def test_rendered_turn_equals_apply_chat_template(smollm2):
    """A second turn: system prompt, first page, the first response as the sampled ids (ending in
    <|im_end|>), feedback and the second page, then the opened assistant turn."""
    _, module = _config()
    ours = load_tokenizer(smollm2["hf"])
    page1 = ("Task: Click on the \"Okay\" button.\nRootWebArea 'Click Button Task' focused: True\n"
             "\t[3] button 'Okay'\n\t[4] textbox '' required: False\n\t[8] button 'Submit'")
    page2 = "Feedback: clicked [3]\nRootWebArea 'Click Button Task'\n\t[8] button 'Submit'  ünïcode\ttab"
    response = "click('3')"
    sampled = tuple(ours.encode(response, add_special_tokens=False)) + (ours.convert_tokens_to_ids("<|im_end|>"),)
    got = PromptRenderer(ours).render([Message("system", module.SYSTEM_PROMPT), Message("user", page1),
                                       Message("assistant", response, ids=sampled), Message("user", page2)])
    chat = [{"role": "system", "content": module.SYSTEM_PROMPT}, {"role": "user", "content": page1},
            {"role": "assistant", "content": response}, {"role": "user", "content": page2}]
    want = smollm2["ref_tok"].apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert got.ids == list(want)
    opened = list(smollm2["ref_tok"].encode("<|im_start|>assistant\n", add_special_tokens=False))
    assert len(opened) == 4 and got.ids[-len(opened):] == opened
    # the sampled ids sit in the prompt verbatim, between the two template pieces
    assert got.ids[len(got.pieces[0]):len(got.pieces[0]) + len(sampled)] == list(sampled)


def test_pretrained_option_is_checked_at_start(tmp_path):
    from jaxwebrl.config import ConfigError

    c, _ = _config()
    c.model.shape = {"num_layers": 2}
    with pytest.raises(ConfigError, match=r"config\.model\.shape: is set with model\.pretrained='smollm2'"):
        parse_config(c)
    c, _ = _config()
    c.model.source = "inline"
    with pytest.raises(ConfigError, match=r"config\.model\.source: is 'inline' with model\.pretrained"):
        parse_config(c)
    c, _ = _config()
    c.model.pretrained = "gpt5"
    with pytest.raises(ConfigError, match=r"config\.model\.pretrained: .*gpt5.*smollm2"):
        parse_config(c)


def test_quick_main_job_from_smollm2(smollm2, tmp_path):
    from jaxwebrl.main_job.stages import BASE_POLICY, run_main_job

    c, _ = _config(quick=True)
    c = apply_variants(c)
    c.workdir, c.log.progress = str(tmp_path), False
    run = resolve_pretrained(parse_config(c))
    validate_config(run, 1)
    assert run.model.path == str(smollm2["hf"]) and run.train.trainable_layers > 0
    summary = run_main_job(run)
    # demonstrations in SmolLM2's own chat format, ending each response with its <|im_end|>
    tok = load_tokenizer(smollm2["hf"])
    demos = [json.loads(line) for line in (tmp_path / "demonstrations.jsonl").read_text().splitlines()]
    assert demos and all(t["turns"][0]["prompt_ids"][:3] == tok.encode("<|im_start|>system\n") for t in demos)
    assert all(turn["response_ids"][-1] == tok.convert_tokens_to_ids("<|im_end|>") for t in demos for turn in t["turns"])
    # BC ran its steps on the pretrained model's top layers only: the layers below and the embedding are the
    # pretrained ones, bit for bit
    bc_log = [json.loads(line) for line in (tmp_path / "bc" / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert len(bc_log) == run.bc.steps and all(np.isfinite(m["bc/loss"]) for m in bc_log)
    base, bc = load_file(str(smollm2["hf"] / "model.safetensors")), load_file(str(tmp_path / "bc" / "hf" / "model.safetensors"))
    assert set(base) == set(bc)
    top = run.train.trainable_layers
    first_trained = 30 - top
    for k in base:
        layer = int(k.split(".")[2]) if k.startswith("model.layers.") else None
        if layer is not None and layer >= first_trained:
            continue
        if k == "model.norm.weight":
            continue
        np.testing.assert_array_equal(bc[k], base[k], err_msg=k)
    assert any(not np.array_equal(bc[k], base[k]) for k in bc if k.startswith(f"model.layers.{first_trained}."))
    # one RL iteration played its groups on the BC policy
    history = [json.loads(line) for line in (tmp_path / "rl" / "history.jsonl").read_text().splitlines()]
    assert summary["iterations"] == len(history) == 1
    assert history[0]["metrics"]["rollout/episodes_tried"] >= run.rollout.group_size
    # the report: the pretrained model zero-shot first, then BC and RL, on the run's tasks and the held-out ones
    assert list(summary["eval"]) == [BASE_POLICY, "BC", "RL"] == list(summary["held_out_eval"])
    report = (tmp_path / "report.md").read_text()
    assert f"| task | {BASE_POLICY} | BC | RL |" in report and f"BC - {BASE_POLICY}" in report
    assert "## Held-out tasks" in report and f"miniwob.{run.report.held_out_tasks}" in report
    assert {"demonstrations", "bc", "rl", "eval", "eval_held_out"} <= set(summary["stage_s"])
    # which bits it started from: the conversion record of the cached checkpoint, named in the report
    from jaxwebrl.models.pretrained import conversion_record

    sha = conversion_record(smollm2["hf"])["weights_sha256"]
    assert summary["provenance"]["base_model"]["weights_sha256"] == sha
    assert f"base model smollm2 (weights sha256 {sha[:12]}, converted by gguf " in report


@pytest.mark.parametrize("paper", ["grpo_openwebrl", "grpo_tpu", "reinforce_webgym", "rft_browseragent"])
def test_paper_local_variant_from_the_pretrained_model_keeps_the_recipe(paper):
    """`--config.local=true --config.model.pretrained=smollm2` on a paper config: the paper's identity (recipe,
    context strategy, prompt format, action space, loss, normalisation, epochs, dynamic sampling, group size)
    is the from-scratch local variant's, the model is the pretrained checkpoint with its top layers trained, and
    the paper's own system prompt is back."""
    spec = importlib.util.spec_from_file_location(paper, ROOT / "configs" / f"{paper}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    identity = ("recipe", "agent.strategy", "agent.prompt_format", "env.action_space", "loss.kind", "data.per",
                "data.norm", "train.epochs", "train.dynamic_sampling", "rollout.group_size")

    def get(run, dotted):
        for part in dotted.split("."):
            run = getattr(run, part)
        return run

    for quick in (False, True):
        c = module.get_config()
        c.local, c.quick = True, quick
        scratch = parse_config(apply_variants(c))
        c.model.pretrained = "smollm2"
        run = parse_config(apply_variants(c, {"model.pretrained"}))
        assert {k: get(run, k) for k in identity} == {k: get(scratch, k) for k in identity}
        assert (run.model.source, run.model.path, dict(run.model.shape)) == ("hf", "", {})
        assert run.model.pretrained == "smollm2" and run.train.trainable_layers > 0
        assert run.agent.system_prompt == "" and run.bc.context_loss_weight == 0.0
        assert run.env.ids_after_names and run.bc.rationale  # every target named before its id
        assert run.workdir == f"{scratch.workdir}_smollm2"
        assert run.bc.steps < scratch.bc.steps and run.optim.lr < scratch.optim.lr


def test_openwebrl_from_the_pretrained_model_draws_fewer_groups_an_iteration():
    """OpenWebRL's two epochs over every turn's whole history do not fit the shared pretrained budget: its
    pretrained local run draws 2 groups an iteration (at most 4 with dynamic sampling) where the from-scratch
    run draws 4 (at most 16); another paper's pretrained run keeps the shared budget."""

    def local_run(paper: str, pretrained: str):
        spec = importlib.util.spec_from_file_location(paper, ROOT / "configs" / f"{paper}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        c = module.get_config()
        c.local, c.model.pretrained = True, pretrained
        return parse_config(apply_variants(c, {"model.pretrained"} if pretrained else ()))

    budget = lambda run: (run.rollout.groups_per_iteration, run.rollout.max_groups_per_iteration)  # noqa: E731
    assert budget(local_run("grpo_openwebrl", "smollm2")) == (2, 4)
    assert budget(local_run("grpo_openwebrl", "")) == (4, 16)
    assert budget(local_run("grpo_tpu", "smollm2")) == budget(local_run("grpo_tpu", "")) == (4, 16)
