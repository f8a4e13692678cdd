"""Evaluation statistics and the report files, against hand-computed values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from jaxwebrl.evaluation.evaluate import EvalReport, paired_difference, wilson_interval
from jaxwebrl.evaluation.report import paired_table, write_report


def _report(results: dict[str, list[int]]) -> EvalReport:
    """{task: [success per seed]} -> EvalReport with per-episode outcomes."""
    outcomes = {f"{t}@{s}": bool(x) for t, xs in results.items() for s, x in enumerate(xs)}
    per_task = {t: (sum(xs), len(xs)) for t, xs in results.items()}
    return EvalReport(per_task, {"done": sum(len(xs) for xs in results.values())}, 1.0, outcomes)


def test_wilson_interval_hand_values() -> None:
    lo, hi = wilson_interval(0, 60)
    assert lo == 0.0 and hi == pytest.approx(1.96**2 / (60 + 1.96**2))  # closed form when p = 0
    lo, hi = wilson_interval(30, 60)  # p = 1/2: symmetric, half-width z*sqrt(n/4 + z^2/4)/(n + z^2)
    half = 1.96 * math.sqrt(60 / 4 + 1.96**2 / 4) / (60 + 1.96**2)
    assert (lo, hi) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))


def test_paired_difference_hand_values() -> None:
    a = _report({"t": [1, 1, 0, 0, 0]})
    b = _report({"t": [1, 0, 1, 1, 0]})
    d = paired_difference(a, b)
    assert (d.n, d.b_only, d.a_only) == (5, 2, 1)
    assert d.diff == pytest.approx(0.2)
    half = 1.96 * math.sqrt((3 / 5 - 0.04) / 5)
    assert (d.ci_low, d.ci_high) == (pytest.approx(0.2 - half), pytest.approx(0.2 + half))
    assert d.p_value == pytest.approx(1.0)  # 2 * P(Bin(3, 1/2) <= 1) = 2 * 4/8, capped at 1
    strong = paired_difference(_report({"t": [0] * 10 + [1] * 5}), _report({"t": [1] * 15}))
    assert (strong.b_only, strong.a_only) == (10, 0)
    assert strong.p_value == pytest.approx(2 / 2**10)
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference(a, _report({"other": [1]}))


def test_write_report_has_tables_plots_and_paired_section(tmp_path: Path) -> None:
    reports = {"random": _report({"x": [0, 0, 0, 0], "y": [0, 0, 0, 0]}),
               "BC": _report({"x": [1, 0, 1, 0], "y": [0, 0, 1, 0]}),
               "RL": _report({"x": [1, 1, 1, 0], "y": [1, 0, 1, 1]})}
    history = [{"iteration": i, "metrics": {"rollout/reward": 0.1 * i, "rollout/success_rate": 0.1 * i}}
               for i in range(3)]
    path = write_report(tmp_path, reports, history, {"Run": "three policies"})
    md = path.read_text()
    assert "| x | 0/4 (0%) | 2/4 (50%) | 3/4 (75%) |" in md
    assert "| RL - BC | +37.5%" in md and "| BC - random | +37.5%" in md
    assert "## Run" in md and (tmp_path / "rl_curves.png").stat().st_size > 0
    assert (tmp_path / "per_task_success.png").stat().st_size > 0
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["RL"]["outcomes"]["y@3"] is True and saved["random"]["episodes"] == 8
    assert paired_table({"only": reports["RL"]}) == ""


def test_paired_table_splits_tasks_with_and_without_demonstrations() -> None:
    """Subset rows pair only their own tasks' episodes: here RL gains on the task BC had no demonstrations of
    (2 of 4 gained, 0 lost: +50% +- 1.96 * sqrt(1/2 - 1/4) / 2, exact McNemar p = 2 * 1/4) and loses one of 4
    on the other (-25% +- 1.96 * sqrt((1/4 - 1/16) / 4)); over both, 2 gained and 1 lost of 8."""
    bc = _report({"shown": [1, 1, 0, 0], "new": [0, 0, 0, 1]})
    rl = _report({"shown": [1, 0, 0, 0], "new": [1, 1, 0, 1]})
    rows = paired_table({"BC": bc, "RL": rl}, {"with demos": {"shown"}, "without demos": {"new"}}).splitlines()[2:]
    assert rows == ["| RL - BC | +12.5% [-29.0%, +54.0%] n=8 | 2 / 1 | 1 |",
                    "| RL - BC, with demos | -25.0% [-67.4%, +17.4%] n=4 | 0 / 1 | 1 |",
                    "| RL - BC, without demos | +50.0% [+1.0%, +99.0%] n=4 | 2 / 0 | 0.5 |"]


def test_rl_signal_counts_groups_with_differing_rewards_hand_values(tmp_path: Path) -> None:
    """rl/rollouts.jsonl -> per task: groups played, kept, with differing rewards (the only ones with a GRPO
    advantage), sampled successes by the episodes' own flag (a shaped reward of 0.5 is not a success); then the
    table beside the greedy successes, summed over a subset and over all tasks; a line that is not a saved
    trajectory names the file and line."""
    from jaxwebrl.evaluation.rl_signal import TaskSignal, read_signal, signal_table, sum_signals

    def row(task: str, group: str, reward: float, success: bool, kept: bool = True) -> str:
        return json.dumps({"task_id": task, "group_id": group, "reward": reward, "turns": [],
                           "metadata": {"success": success, "group_kept": kept}}) + "\n"

    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(row("a", "g1", 1.0, True) + row("a", "g1", 0.0, False) + row("a", "g1", 0.5, False)
                        + "".join(row("a", "g2", 0.0, False, kept=False) for _ in range(3))
                        + row("b", "g3", 1.0, True) + row("b", "g3", 1.0, True) + "\n")
    signal = read_signal(rollouts)
    assert signal == {"a": TaskSignal(groups=2, trained=1, varied=1, episodes=6, successes=1),
                      "b": TaskSignal(groups=1, trained=1, varied=0, episodes=2, successes=2)}
    assert sum_signals([signal, signal])["a"] == TaskSignal(4, 2, 2, 12, 2)
    greedy = {"BC": {"a": (1, 4), "b": (2, 4)}, "RL": {"a": (3, 4), "b": (2, 4)}}
    rows = signal_table(signal, greedy, {"with demos": {"a"}}).splitlines()
    assert rows[0] == ("| task | groups played | trained on | rewards differ | sampled success | BC (greedy) | "
                       "RL (greedy) |")
    assert rows[2:] == ["| a | 2 | 1 | 1 | 1/6 (17%) | 1/4 (25%) | 3/4 (75%) |",
                        "| b | 1 | 1 | 0 | 2/2 (100%) | 2/4 (50%) | 2/4 (50%) |",
                        "| **with demos** | 2 | 1 | 1 | 1/6 (17%) | 1/4 (25%) | 3/4 (75%) |",
                        "| **all tasks** | 3 | 2 | 1 | 3/8 (38%) | 3/8 (38%) | 5/8 (62%) |"]
    rollouts.write_text(row("a", "g1", 1.0, True) + '{"task_id": "a"}\n')
    with pytest.raises(ValueError, match="rollouts.jsonl:2: not a saved trajectory with a group_id"):
        read_signal(rollouts)


def test_demo_subsets_read_the_demonstrated_tasks_from_the_demo_file(tmp_path: Path) -> None:
    from jaxwebrl.evaluation.report import demonstration_subsets as demo_subsets

    demos = tmp_path / "demonstrations.jsonl"
    demos.write_text("".join(json.dumps({"task_id": t, "turns": []}) + "\n" for t in ("a", "a", "b")))
    reports = {"BC": _report({"a": [1], "b": [0], "c": [0]})}
    assert demo_subsets(demos, reports) == {"tasks with demonstrations": {"a", "b"},
                                            "tasks without demonstrations": {"c"}}
    assert demo_subsets(demos, {"BC": _report({"a": [1]})}) is None  # every evaluated task was demonstrated


def test_transformers_check_loads_text_and_vision_language_exports(tmp_path: Path) -> None:
    """The report's proof of export: a text policy loads as a causal LM, a Qwen3-VL policy as an image-text
    model with its processor (the full visual local run failed here once: its report asked for a causal LM)."""
    from jaxwebrl.evaluation.report import transformers_check
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
    from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint

    make_tiny_checkpoint(tmp_path / "text", tiny_config("qwen3"))
    make_tiny_vl_checkpoint(tmp_path / "vl", "qwen3_vl")
    text, vl = transformers_check(str(tmp_path / "text")), transformers_check(str(tmp_path / "vl"))
    assert "AutoModelForCausalLM" in text and "(Qwen3ForCausalLM)" in text
    assert "AutoModelForImageTextToText" in vl and "(Qwen3VLForConditionalGeneration)" in vl and "screenshot" in vl


# ---- reports over seeds and the generated tables (issue 39) -----------------------------------------------


def _seed_summary(rl: list[int], bc: list[int]) -> dict:
    """A summary.json's `eval` for one seed: 10 episodes of task t, the same instances for every seed."""
    return {"schedule": "deterministic", "eval": {name: _report({"t": xs}).to_dict() for name, xs in
                                                  (("random", [0] * 10), ("BC", bc), ("RL", rl))}}


def test_seeds_report_hand_values() -> None:
    from jaxwebrl.evaluation.seeds import compare, seeds_markdown, seeds_summary

    runs = {0: _seed_summary(rl=[1] * 5 + [0] * 5, bc=[1] * 3 + [0] * 7),  # RL 0.5, BC 0.3: +0.2
            1: _seed_summary(rl=[1] * 6 + [0] * 4, bc=[1] * 3 + [0] * 7),  # RL 0.6: +0.3
            2: _seed_summary(rl=[1] * 7 + [0] * 3, bc=[1] * 4 + [0] * 6)}  # RL 0.7, BC 0.4: +0.3
    result = seeds_summary(runs)
    rl = next(p for p in result["policies"] if p["policy"] == "RL")
    assert rl["per_seed"] == [0.5, 0.6, 0.7] and rl["mean"] == pytest.approx(0.6) and rl["sd"] == pytest.approx(0.1)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, 2 df) * sd / sqrt(3 seeds)
    assert (rl["ci_low"], rl["ci_high"]) == (pytest.approx(0.6 - half), pytest.approx(0.6 + half))
    diff = next(d for d in result["differences"] if d["comparison"] == "RL - BC")
    assert diff["per_seed"] == [pytest.approx(0.2), pytest.approx(0.3), pytest.approx(0.3)]
    sd = math.sqrt(((0.2 - 0.8 / 3) ** 2 + 2 * (0.3 - 0.8 / 3) ** 2) / 2)
    assert diff["ci_high"] - diff["mean"] == pytest.approx(4.302652729911275 * sd / math.sqrt(3))
    md = seeds_markdown(result)
    assert "| RL | 60.0% |" in md and "t interval over the per-seed success rates" in md
    one = seeds_summary({0: runs[0]})  # one seed: no seed variance, the episodes-only interval, said so
    assert next(p for p in one["policies"] if p["policy"] == "RL")["interval"] == "Wilson, episodes only (1 seed)"
    with pytest.raises(ValueError, match="different seeds"):
        compare({0: runs[0], 1: runs[1]}, {0: runs[0], 2: runs[2]})
    same = compare({0: runs[0], 1: runs[1]}, {0: runs[1], 1: runs[2]})
    assert same["per_seed"] == [pytest.approx(0.1), pytest.approx(0.1)]


def _two_task_summary(bc: dict[str, list[int]], rl: dict[str, list[int]], held_bc: list[int], held_rl: list[int]) -> dict:
    """A summary.json with a demonstrated task `d`, an undemonstrated task `u` and a held-out task `h`."""
    return {"schedule": "deterministic",
            "eval": {"BC": _report(bc).to_dict(), "RL": _report(rl).to_dict()},
            "held_out_eval": {"BC": _report({"h": held_bc}).to_dict(), "RL": _report({"h": held_rl}).to_dict()}}


def test_seeds_report_on_task_subsets_held_out_tasks_and_two_configs_hand_values() -> None:
    """RL - BC on the demonstrated tasks alone, the held-out tasks' own rows, and config B - A on every trained
    task, on a subset both share and on the held-out tasks (the issue-40 headline), each by hand; two configs
    that evaluated different episodes are refused rather than paired."""
    from jaxwebrl.evaluation.seeds import compare_all, seeds_markdown, seeds_summary

    # seed 0: on d BC 2/4 -> RL 4/4 (+0.5), on u 0/4 -> 1/4; seed 1: on d 1/4 -> 2/4 (+0.25), on u 0/4 -> 0/4
    a = {0: _two_task_summary({"d": [1, 1, 0, 0], "u": [0] * 4}, {"d": [1] * 4, "u": [1, 0, 0, 0]}, [0] * 4, [0] * 4),
         1: _two_task_summary({"d": [1, 0, 0, 0], "u": [0] * 4}, {"d": [1, 1, 0, 0], "u": [0] * 4}, [0] * 4, [1, 0, 0, 0])}
    subsets = {s: {"tasks with demonstrations": {"d"}, "tasks without demonstrations": {"u"}} for s in a}
    result = seeds_summary(a, subsets)
    demo = next(d for d in result["differences"] if d["comparison"] == "RL - BC, tasks with demonstrations")
    assert demo["per_seed"] == [pytest.approx(0.5), pytest.approx(0.25)] and demo["mean"] == pytest.approx(0.375)
    half = 12.706204736174707 * math.sqrt(2 * 0.125**2) / math.sqrt(2)  # t(0.975, 1 df) * sd / sqrt(2 seeds)
    assert demo["ci_high"] - demo["mean"] == pytest.approx(half)
    overall = next(d for d in result["differences"] if d["comparison"] == "RL - BC")
    assert overall["per_seed"] == [pytest.approx(3 / 8), pytest.approx(1 / 8)]
    held_rl = next(p for p in result["held_out"]["policies"] if p["policy"] == "RL")
    assert held_rl["per_seed"] == [0.0, 0.25] and result["held_out"]["tasks"] == ["h"]
    # a rate's interval stays in [0, 1]: the t interval of (0, 0.25) over 2 seeds is 0.125 -/+ 1.59
    assert (held_rl["ci_low"], held_rl["ci_high"]) == (0.0, 1.0)
    assert result["held_out"]["differences"][0]["per_seed"] == [0.0, pytest.approx(0.25)]
    md = seeds_markdown(result)
    assert "| RL - BC, tasks with demonstrations | +37.5 |" in md and "## Tasks held out of training (h)" in md
    # a subset whose tasks differ between seeds is left out, not mixed
    assert not any("without" in d["comparison"] for d in seeds_summary(
        a, {0: subsets[0], 1: {"tasks without demonstrations": {"u", "d"}}})["differences"])

    # config B: RL one more success on d in each seed, two more on h in seed 0
    b = {0: _two_task_summary({"d": [0] * 4, "u": [0] * 4}, {"d": [1] * 4, "u": [1, 1, 0, 0]}, [0] * 4, [1, 1, 0, 0]),
         1: _two_task_summary({"d": [0] * 4, "u": [0] * 4}, {"d": [1, 1, 1, 0], "u": [0] * 4}, [0] * 4, [1, 0, 0, 0])}
    rows = {r["comparison"]: r for r in compare_all(a, b, "B - A", subsets, subsets)}
    assert rows["B - A (RL)"]["per_seed"] == [pytest.approx(1 / 8), pytest.approx(1 / 8)]
    assert rows["B - A (RL, tasks with demonstrations)"]["per_seed"] == [0.0, pytest.approx(0.25)]
    assert rows["B - A (RL, tasks without demonstrations)"]["per_seed"] == [pytest.approx(0.25), 0.0]
    assert rows["B - A (RL, tasks held out of training)"]["per_seed"] == [pytest.approx(0.5), 0.0]
    assert len(rows) == 4
    other_episodes = {s: _two_task_summary({"d": [0] * 5, "u": [0] * 4}, {"d": [1] * 5, "u": [0] * 4}, [0], [0]) for s in a}
    with pytest.raises(ValueError, match="evaluated different episodes"):
        compare_all(a, other_episodes)


def test_results_tables_are_written_from_the_records() -> None:
    """README.md and RESULTS.md hold exactly what scripts/results_tables.py writes from the committed records,
    and every row names its record."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "results_tables.py"), "--check"], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = sorted(p.stem for p in (root / "benchmarks" / "measured" / "results").glob("*.json"))
    text = (root / "README.md").read_text() + (root / "RESULTS.md").read_text()
    assert records and all(f"`{name}`" in text for name in records)


def test_results_table_shows_a_pretrained_start_and_held_out_tasks() -> None:
    """A pretrained run's untrained policy is its base model zero-shot, marked so in the start column; its
    tasks held out of training get their own column (only when some record has them)."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("results_tables", root / "scripts" / "results_tables.py")
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    pct = {"mean": 0.25, "ci": [0.1, 0.5]}
    scratch = {"name": "a", "date": "d", "commit": "c", "what": "w", "seeds": [0], "schedule": "deterministic",
               "policies": {"random": {"mean": 0.0}, "BC": pct, "RL": pct}}
    pretrained = dict(scratch, name="b", policies={"base (zero-shot)": pct, "BC": pct, "RL": pct},
                      held_out={"BC": {"mean": 0.05, "ci": [0.01, 0.2]}, "RL": pct})
    rows = rt.table([scratch, pretrained]).splitlines()
    assert rows[0].endswith("| held-out tasks |") and len(rows) == 4
    assert "| 0.0% | 25.0% [10.0, 50.0] |" in rows[2] and rows[2].endswith("| - |")
    assert "| 25.0% [10.0, 50.0] (base, zero-shot) |" in rows[3]
    assert rows[3].endswith("| BC: 5.0% [1.0, 20.0]; RL: 25.0% [10.0, 50.0] |")
    assert "held-out" not in rt.table([scratch])
