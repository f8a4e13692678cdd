"""The judge-agreement metrics of a trained judge (jaxwebrl.judges.metrics) against independent references:
AUC against scipy's Mann-Whitney U, precision / recall / accuracy counted by hand, the bootstrap interval
around the point value and reproducible, the calibration table's bins."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from jaxwebrl.judges.metrics import agreement, auc, calibration


def test_auc_equals_mann_whitney_u_with_ties() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(200) < 0.3
    scores = np.round(rng.random(200) * 0.6 + 0.3 * labels, 1)  # rounded: many ties
    u = mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert labels.sum() > 10 and len(np.unique(scores)) < 20
    assert auc(labels, scores) == pytest.approx(u / (labels.sum() * (~labels).sum()), abs=1e-12)
    assert auc([True, False], [0.9, 0.1]) == 1.0 and auc([True, False], [0.1, 0.9]) == 0.0
    assert auc([True, False], [0.5, 0.5]) == 0.5


def test_agreement_counts_and_intervals() -> None:
    labels = [True, True, True, False, False, False, False, False]
    scores = [0.9, 0.6, 0.2, 0.7, 0.1, 0.3, 0.4, 0.05]
    a = agreement(labels, scores, resamples=500, seed=1)
    # by hand: predicted positive = {0.9, 0.6, 0.7}: tp 2, fp 1, fn 1; 6 of 8 right; majority (negative) 5 of 8
    assert (a.n, a.positives) == (8, 3)
    assert a.point["precision"] == pytest.approx(2 / 3) and a.point["recall"] == pytest.approx(2 / 3)
    assert a.point["accuracy"] == pytest.approx(6 / 8) and a.point["majority_accuracy"] == pytest.approx(5 / 8)
    assert a.point["auc"] == pytest.approx(11 / 15)  # pairs ordered right: 0.9 > 5 negatives, 0.6 > 4, 0.2 > 2
    for k, v in a.point.items():
        assert a.low[k] <= v <= a.high[k] and a.low[k] < a.high[k], k
    assert agreement(labels, scores, resamples=500, seed=1) == a  # fixed seed: the same intervals
    with pytest.raises(ValueError, match="equal, non-empty"):
        agreement([True], [0.1, 0.2])


def test_calibration_bins() -> None:
    table = calibration([True, False, True, True], [0.05, 0.08, 0.95, 0.91], bins=10)
    assert table == [(pytest.approx(0.065), 0.5, 2), (pytest.approx(0.93), 1.0, 2)]


def test_verdict_score_is_the_models_next_token_probability(tmp_path) -> None:
    """The judge's score (P(SUCCESS) over the two verdicts' first tokens, batched and padded) equals the same
    probability from transformers' forward pass on each prompt alone; the prior correction keeps the order."""
    import torch
    import transformers

    from jaxwebrl.judge_training.verifier import Example, prior_corrected, verdict_ids, verdict_scores
    from jaxwebrl.models import load_hf, load_tokenizer
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
    from judge_fixtures import CORPUS

    make_tiny_checkpoint(tmp_path, tiny_config("qwen3"), seed=1, std=0.5, corpus=CORPUS)
    tok = load_tokenizer(tmp_path)
    cfg, params = load_hf(tmp_path)
    ids = verdict_ids(tok)
    rng = np.random.default_rng(0)
    data = [Example(list(rng.integers(3, 400, n)), ids[True], True, "t", 0) for n in (5, 17, 40, 9, 33)]
    ours = verdict_scores(cfg, params, data, tok, batch=2)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    for e, score in zip(data, ours):
        with torch.no_grad():
            logits = model(torch.tensor([e.prompt_ids])).logits[0, -1].double()
        two = torch.softmax(logits[[ids[True][0], ids[False][0]]], 0)
        assert score == pytest.approx(float(two[0]), abs=2e-5)
    assert len(set(np.round(ours, 6))) == len(ours)  # the scores differ: the check compared real values
    moved = prior_corrected(ours, 0.25)
    assert np.all(np.argsort(moved) == np.argsort(ours)) and np.all(moved < ours)


def test_judge_local_config_parses_with_quick_and_command_line_fields() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("judge_local", root / "configs" / "judge_local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.insert(0, str(root / "scripts"))
    from train_judge import parse

    c = module.get_config()
    run, cfg = parse(c)
    assert cfg.steps == 120 and run.tasks.train.count(",") == 11 and run.env.action_space == "bid"
    c.quick, c.workdir = True, "/tmp/mine"
    run, cfg = parse(c, explicit={"workdir"})
    assert cfg.steps == 40 and cfg.workdir == "/tmp/mine" and "click-widget" in run.tasks.train
    c.batch = 1
    from jaxwebrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"config.batch: 1 must be >= 2; use at least 2"):
        parse(c)


def test_verifier_judge_scores_every_episode_with_the_training_prompt() -> None:
    """reward.judge.kind='verifier' (the judge trained here) judges episodes that ended without an answer too (a
    MiniWoB++ page ends them), with exactly the prompt judge_training trains on; a scripted judge model through
    the Engine protocol answers (the test needs predictable verdicts)."""
    import asyncio

    from jaxwebrl.judge_training.verifier import JudgeTrainingConfig, judge_messages
    from jaxwebrl.judges import EngineBackend, JudgeConfig, VerifierJudge, make_judge
    from judge_fixtures import ScriptedEngine, tiny_tokenizer, trajectory

    tok = tiny_tokenizer()
    answers = iter(["NOT SUCCESS", "Verdict: SUCCESS", "maybe"])
    engine = ScriptedEngine(tok, lambda _p: next(answers))
    judge = make_judge(JudgeConfig(kind="verifier", engine="jax", model_path="unused"), backend=EngineBackend(engine, tok))
    assert isinstance(judge, VerifierJudge)
    page_ended = trajectory(["click('12')"], termination="done", final_observation="[3] button 'ok' pressed")
    trajs = [page_ended, trajectory(["click('7')", "click('12')"], termination="max_steps"),
             trajectory(["click('7')"], termination="done")]
    verdicts = [asyncio.run(judge.judge(t)) for t in trajs]
    assert len(engine.prompts) == 3  # every episode went to the model, none skipped for lack of an answer
    assert [(v.label, v.reward) for v in verdicts[:2]] == [("failure", 0.0), ("success", 1.0)]
    assert verdicts[2].error == "judge_error" and verdicts[2].error_kind == "unparsable"
    expected = EngineBackend(engine, tok).prompt_ids(judge_messages(page_ended, JudgeTrainingConfig(), "bid"))
    assert engine.prompts[0] == expected
    assert "[3] button 'ok' pressed" in tok.decode(engine.prompts[0])


# ---- issue 21 item 5: the judge against the rule on the rollouts RL produced ---------------------------------


def _rollout(iteration: int, rule: bool, judge: bool | None, task: str = "miniwob.click-test", error: bool = False):
    from jaxwebrl.data.records import Trajectory, Turn

    meta = {"iteration": iteration, "success": rule, "group_kept": True, "episode_id": f"e{iteration}{rule}{judge}"}
    if judge is not None:
        meta["judged_success"] = judge
        meta["judge"] = {"error": "judge_error" if error else None}
    return Trajectory(task, [Turn([1], [2])], termination="judge_error" if error else "done", metadata=meta)


def test_judge_vs_rule_agreement_per_iteration_counts_false_positives_by_hand() -> None:
    from jaxwebrl.judge_training.judge_loop import agreement_section, by_iteration, by_task, early_late_test, judged_rollouts

    # iteration 0: (rule, judge) = (T,T) (F,F) (F,F) (T,F); iteration 1: (F,T) (F,T) (T,T) (F,F); plus one judge
    # error and one episode never judged (neither counts)
    pairs = {0: [(True, True), (False, False), (False, False), (True, False)],
             1: [(False, True), (False, True), (True, True), (False, False)]}
    trajs = [_rollout(i, r, j, task="miniwob.click-dialog" if i == 1 and r is False and j else "miniwob.click-test")
             for i, ps in pairs.items() for r, j in ps]
    trajs += [_rollout(1, True, False, error=True), _rollout(1, False, None)]
    rows, undecided = judged_rollouts(trajs)
    assert len(rows) == 8 and undecided == 2
    it0, it1, total = by_iteration(rows)
    assert (it0.episodes, it0.agree, it0.false_pos, it0.false_neg, it0.rule_failures) == (4, 3, 0, 1, 2)
    assert (it1.episodes, it1.agree, it1.false_pos, it1.false_neg, it1.rule_failures) == (4, 2, 2, 0, 3)
    assert it1.false_positive_rate == pytest.approx(2 / 3) and it1.precision == pytest.approx(1 / 3)
    assert (total.episodes, total.agree, total.false_pos) == (8, 5, 2) and total.label == "all"
    dialog = [r for r in by_task(rows) if r.label == "click-dialog"][0]
    assert (dialog.episodes, dialog.false_pos) == (2, 2)
    early, late, p = early_late_test(rows)
    assert (early.false_pos, early.rule_failures, late.false_pos, late.rule_failures) == (0, 2, 2, 3)
    # Fisher exact on [[0, 2], [2, 1]], by hand: the top-left count is hypergeometric (N 5, 2 drawn, 2 marked):
    # P(0) = 3/10, P(1) = 6/10, P(2) = 1/10; two-sided = the tables no more likely than the observed: 0.3 + 0.1
    assert p == pytest.approx(0.4)
    text = agreement_section("RL judge", trajs, bucket=1)
    assert "| 1 | 4 | 25% | 75% | 50%" in text and "8 rollouts judged (2 without a verdict" in text


def test_labeler_measures_exact_template_and_arguments_by_hand() -> None:
    from jaxwebrl.judge_training.labeler import LabeledEpisode, Templates, label_scores, majority_labels, nearest_labels

    train = {"click-button": ['Click on the "ok" button.', 'Click on the "Cancel" button.', 'Click on the "no" button.'],
             "focus-text": ["Focus into the textbox."] * 2}
    t = Templates.fit(train)
    assert t.template('Click on the "yes" button.') == "click on _ button" and t.arguments('Click on the "yes" button.') == {"yes"}
    assert t.template("Focus into the textbox.") == "focus into textbox" and t.arguments("Focus into the textbox.") == set()
    truth = ['Click on the "yes" button.', 'Click on the "yes" button.', 'Click on the "yes" button.', "Focus into the textbox."]
    pred = ['click on the "Yes" button', 'Click on the "no" button.', "Focus into the textbox.", None]
    s = label_scores(pred, truth, t)
    assert s == {"exact match": [True, False, False, False], "same task template": [True, True, False, False],
                 "same template and arguments": [True, False, False, False]}
    eps = [LabeledEpisode(f"miniwob.{k}", i, "train", u, [f"Clicked button '{u[14:16]}'." if "button" in u else "Focused textbox ''."])
           for k, us in train.items() for i, u in enumerate(us)]
    assert majority_labels(eps, 2) == ["Focus into the textbox."] * 2  # the most frequent training utterance
    held = [LabeledEpisode("miniwob.focus-text", 9, "heldout", "Focus into the textbox.", ["Focused textbox ''."])]
    assert nearest_labels(eps, held) == ["Focus into the textbox."]


def test_labeler_training_quick_trains_labels_through_the_engine_and_writes_its_report(tmp_path) -> None:
    """configs/labeler_local.py's quick variant end to end on a tiny random policy (~1 min): the scripted solvers
    play in real Chromium, the rule summarises, the model is fine-tuned (its loss falls), exported, and labels
    the held-out episodes through the JaxEngine and NNetNav's labeler prompt; the report compares it with the
    two baselines. A model this small and this briefly trained is not expected to beat them."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    from agent_fixtures import tiny_policy
    from jaxwebrl.judge_training.labeler import train_labeler

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("labeler_local", root / "configs" / "labeler_local.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.insert(0, str(root / "scripts"))
    from train_judge import parse

    tiny_policy(tmp_path / "policy")
    c = module.get_config()
    c.quick = True
    c.policy, c.workdir = str(tmp_path / "policy"), str(tmp_path / "labeler")
    c.train_seeds, c.heldout_seeds, c.steps, c.batch, c.seq_len, c.lr = 3, 2, 12, 4, 2048, 3e-3
    c.policy_run.env.contexts_per_browser = 2
    explicit = {"policy", "workdir", "train_seeds", "heldout_seeds", "steps", "batch", "seq_len", "lr",
                "policy_run.env.contexts_per_browser"}
    run, cfg = parse(c, explicit)
    assert type(cfg).__name__ == "LabelerTrainingConfig" and run.tasks.train == "click-button,focus-text"
    summary = train_labeler(run, cfg)
    work = tmp_path / "labeler"
    episodes = [json.loads(line) for line in (work / "labeler_episodes.jsonl").read_text().splitlines()]
    assert {e["split"] for e in episodes} == {"train", "heldout"} and len(episodes) >= 8  # it played (10 planned)
    focus = next(e for e in episodes if e["task_id"] == "miniwob.focus-text")
    assert focus["goal"] == "Focus into the textbox." and focus["summaries"][0].startswith("Focused textbox")
    losses = summary["loss"]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3]), losses
    assert (work / "labeler_hf" / "config.json").exists()
    labels = [json.loads(line) for line in (work / "labels.jsonl").read_text().splitlines()]
    assert len(labels) == summary["heldout_episodes"] >= 3 and all("truth" in x for x in labels)
    report = (work / "report.md").read_text()
    assert "| exact match |" in report and "trained labeler - most frequent training utterance" in report
    assert set(summary["rates"]) == {"most frequent training utterance", "nearest training episode's utterance",
                                     "trained labeler"}


def test_the_judge_offline_decides_each_rollout_from_its_verdict_token(tmp_path) -> None:
    """`judge_rollouts` (the control: the judge on rollouts it never rewarded) renders each rollout with the
    verifier's training prompt and decides SUCCESS when P(SUCCESS) >= 0.5 over the two verdict tokens (what
    greedy decoding writes); a rollout too long for the judge is left out; `offline_matches_online` counts
    the run's own verdicts the offline decision reproduces."""
    from jaxwebrl.judge_training.judge_loop import judge_rollouts, offline_matches_online
    from jaxwebrl.judge_training.verifier import Example, JudgeTrainingConfig, judge_messages, verdict_scores
    from jaxwebrl.judges.backends import render_prompt_ids
    from jaxwebrl.models import load_hf, load_tokenizer
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
    from judge_fixtures import CORPUS, trajectory

    make_tiny_checkpoint(tmp_path, tiny_config("qwen3"), seed=3, std=0.5, corpus=CORPUS)
    tok = load_tokenizer(tmp_path)
    trajs = [trajectory(["click('12')"] * n, goal=f"Click on button {n}", task_id="miniwob.click-button",
                        success=n % 2 == 0, episode_id=f"e{n}", judged_success=n == 1) for n in (1, 2, 3)]
    trajs.append(trajectory(["click('12')"] * 150, episode_id="long", success=False))  # over seq_len
    judged, scores = judge_rollouts(str(tmp_path), trajs, "bid", batch=2, seq_len=1024)
    assert [t.metadata["episode_id"] for t in judged] == ["e1", "e2", "e3"] and len(scores) == 3
    cfg, params = load_hf(tmp_path)
    ids = [render_prompt_ids(tok, judge_messages(t, JudgeTrainingConfig(), "bid")) for t in trajs[:3]]
    expected = verdict_scores(cfg, params, [Example(i, [], True, "t", 0) for i in ids], tok, batch=1)
    assert np.allclose(scores, expected, atol=1e-5) and len(set(np.round(scores, 6))) == 3
    assert [t.metadata["judged_success"] for t in judged] == [bool(s >= 0.5) for s in scores]
    assert all(t.metadata["success"] == o.metadata["success"] for t, o in zip(judged, trajs))  # the rule's kept
    same, n = offline_matches_online(trajs[:1], judged)
    assert n == 1 and same == int(scores[0] >= 0.5)
