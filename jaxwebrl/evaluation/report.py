"""The run report: a per-task success table for several policies, plots over RL iterations, report.md."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jaxwebrl.evaluation.evaluate import EvalReport, paired_difference  # noqa: E402
from jaxwebrl.evaluation.provenance import base_model_line, machine_line  # noqa: E402
from jaxwebrl.evaluation.rl_signal import SIGNAL_NOTE, read_signal, signal_table  # noqa: E402


def success_table(reports: Mapping[str, EvalReport]) -> str:
    """Markdown table: one row per task, one column per policy, then the overall row with 95% intervals."""
    names = list(reports)
    tasks = sorted({t for r in reports.values() for t in r.per_task})
    lines = ["| task | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for t in tasks:
        cells = []
        for n in names:
            s, k = reports[n].per_task.get(t, (0, 0))
            cells.append(f"{s}/{k} ({s / max(1, k):.0%})")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    overall = []
    for n in names:
        r = reports[n]
        lo, hi = r.interval
        overall.append(f"**{r.success_rate:.1%}** [{lo:.1%}, {hi:.1%}] n={r.episodes}")
    lines.append("| **overall** (95% Wilson CI) | " + " | ".join(overall) + " |")
    return "\n".join(lines)


def paired_table(reports: Mapping[str, EvalReport], subsets: Mapping[str, Collection[str]] | None = None) -> str:
    """Each later policy against each earlier one on the same held-out episodes (e.g. BC - random, RL - BC),
    over all tasks and then over each named subset of tasks (e.g. those with and without demonstrations)."""
    names = [n for n, r in reports.items() if r.outcomes]
    lines = ["| comparison | difference (95% CI) | solved only by the second / only by the first | McNemar p |",
             "|---|---|---|---|"]
    for label, tasks in {"": None, **(subsets or {})}.items():
        on = reports if tasks is None else {n: reports[n].on_tasks(tasks) for n in names}
        for j, b in enumerate(names):
            for a in names[:j]:
                if not set(on[a].outcomes) & set(on[b].outcomes):
                    continue
                d = paired_difference(on[a], on[b])
                lines.append(f"| {b} - {a}{f', {label}' if label else ''} | {d.diff:+.1%} [{d.ci_low:+.1%}, "
                             f"{d.ci_high:+.1%}] n={d.n} | {d.b_only} / {d.a_only} | {d.p_value:.2g} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def plot_history(history: Sequence[Mapping[str, Any]], out: Path) -> list[Path]:
    """reward and success over RL iterations (rollout, and greedy eval where it ran)."""
    if not history:
        return []
    its = [h["iteration"] for h in history]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(its, [h["metrics"].get("rollout/reward", 0) for h in history], marker="o")
    ax[0].set(title="reward of the trained groups (sampled)", xlabel="RL iteration", ylabel="mean reward")
    # every sampled episode, including groups dynamic sampling dropped (older runs logged accepted ones only)
    sampled = [h["metrics"].get("rollout/success_rate_all", h["metrics"].get("rollout/success_rate", 0)) for h in history]
    ax[1].plot(its, sampled, marker="o", label="every sampled episode")
    evals = [(h["iteration"], h["eval"]["success_rate"]) for h in history if h.get("eval")]
    if evals:
        ax[1].plot(*zip(*evals), marker="s", label="greedy eval (held-out seeds)")
    ax[1].set(title="success rate", xlabel="RL iteration", ylim=(0, 1.02))
    ax[1].legend()
    fig.tight_layout()
    path = out / "rl_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def plot_per_task(reports: Mapping[str, EvalReport], out: Path) -> Path:
    tasks = sorted({t for r in reports.values() for t in r.per_task})
    width = 0.8 / max(1, len(reports))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(tasks)), 3.8))
    for i, (name, r) in enumerate(reports.items()):
        rates = [r.per_task.get(t, (0, 1))[0] / max(1, r.per_task.get(t, (0, 1))[1]) for t in tasks]
        ax.bar([j + i * width for j in range(len(tasks))], rates, width, label=name)
    ax.set_xticks([j + width * (len(reports) - 1) / 2 for j in range(len(tasks))])
    ax.set_xticklabels([t.split(".", 1)[-1] for t in tasks], rotation=30, ha="right")
    ax.set(ylabel="greedy success (held-out seeds)", ylim=(0, 1.05))
    ax.legend()
    fig.tight_layout()
    path = out / "per_task_success.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(
    out_dir: str | os.PathLike[str],
    reports: Mapping[str, EvalReport],
    history: Sequence[Mapping[str, Any]] = (),
    sections: Mapping[str, str] | None = None,
    title: str = "jaxwebrl run report",
    subsets: Mapping[str, Collection[str]] | None = None,
) -> Path:
    """report.md (+ PNG plots, + eval.json) in `out_dir`; `sections` are extra markdown blocks by heading."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = plot_history(history, out) + [plot_per_task(reports, out)]
    md = [f"# {title}", "", "## Greedy success on held-out task instances", "", success_table(reports), ""]
    paired = paired_table(reports, subsets)
    if paired:
        md += ["## Paired differences (the same held-out episodes for every policy)", "", paired, ""]
    for path in plots:
        md += [f"![{path.stem}]({path.name})", ""]
    for heading, body in (sections or {}).items():
        md += [f"## {heading}", "", body, ""]
    (out / "report.md").write_text("\n".join(md))
    (out / "eval.json").write_text(json.dumps({k: r.to_dict() for k, r in reports.items()}, indent=2))
    return out / "report.md"


# ---- the main job's report ---------------------------------------------------------------------------


def transformers_check(path: str) -> str:
    """Load the exported policy with transformers and generate greedily: the proof the export is usable. A
    vision-language policy loads as `AutoModelForImageTextToText` with its processor and sees a blank
    screenshot; a text policy as `AutoModelForCausalLM`."""
    import torch
    import transformers

    from jaxwebrl.models.vl_or_text import is_vl_checkpoint

    goal = 'Task: Click on the "OK" button.'
    if is_vl_checkpoint(path):
        from PIL import Image

        from jaxwebrl.models.processor import load_processor

        auto, proc = "AutoModelForImageTextToText", load_processor(path)
        tok = proc.tokenizer
        model = transformers.AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
        content = [{"type": "image"}, {"type": "text", "text": goal}]
        prompt = proc.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                          add_generation_prompt=True)
        inputs = dict(proc(text=[prompt], images=[Image.new("RGB", (160, 210), "white")], return_tensors="pt"))
        what = "a chat prompt with a blank 160 x 210 screenshot"
    else:
        auto, tok = "AutoModelForCausalLM", transformers.AutoTokenizer.from_pretrained(path)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        prompt = tok.apply_chat_template([{"role": "user", "content": goal}], tokenize=False, add_generation_prompt=True)
        inputs = {"input_ids": tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids}
        what = "a chat prompt"
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    return (f"`transformers.{auto}.from_pretrained({path!r})` loaded "
            f"{sum(p.numel() for p in model.parameters()):,} parameters ({type(model).__name__}); greedy "
            f"`generate` on {what} returned: `{text!r}`")


def demonstration_subsets(demo_file: Path, reports: Mapping[str, EvalReport]) -> dict[str, set[str]] | None:
    """The evaluated tasks split by whether BC had demonstrations of them (None when every task had)."""
    with demo_file.open() as f:
        demonstrated = {json.loads(line)["task_id"] for line in f if line.strip()}
    evaluated = {t for r in reports.values() for t in r.per_task}
    if evaluated <= demonstrated:
        return None
    return {"tasks with demonstrations": evaluated & demonstrated, "tasks without demonstrations": evaluated - demonstrated}


def write_run_viewer(run: Any, work: Path, reports: Mapping[str, EvalReport]) -> str:
    """viewer.html beside report.md: every evaluated episode and the rollouts the RL loop kept; returns the
    report's paragraph that links it."""
    from jaxwebrl.viewer import ViewerLog, episodes_from_reports, write_viewer

    v = run.viewer
    episodes = ViewerLog(work / "viewer_episodes.jsonl").read() + episodes_from_reports(reports, max_chars=v.max_chars)
    write_viewer(work / "viewer.html", episodes, title=f"{run.recipe} run: trajectories", max_episodes=v.max_episodes,
                 max_screenshots=v.max_screenshots)
    return (f"[viewer.html](viewer.html): every evaluated episode of {', '.join(reports)} and up to "
            f"{v.rollouts_per_iteration} training rollouts per RL iteration, step by step: the observation as the "
            "prompt showed it, the model's output, the parsed action, the feedback, the element hit, the logprobs. "
            "One self-contained file: open it in a browser, no server needed.")


def stage_times(seconds: Mapping[str, float]) -> str:
    """Wall time by stage in minutes, e.g. "demonstrations 2.1, BC 8.0, RL 15.2, evaluation 9.9"."""
    names = {"demonstrations": "demonstrations", "bc": "BC", "rl": "RL", "eval": "evaluation",
             "eval_held_out": "evaluation on held-out tasks"}
    parts = [f"{label} {seconds[k] / 60:.1f}" for k, label in names.items() if seconds.get(k)]
    if "demonstrations" not in seconds and seconds.get("bc"):  # older runs timed them together
        parts[0] = parts[0].replace("BC", "demonstrations + BC", 1)
    return ", ".join(parts)


SCHEDULE_NOTES = {
    "deterministic": "deterministic: rounds follow the run's logical schedule (seed, iteration, group) and the "
                     "engine is batch-invariant, so the same config and seed give the same rollouts, weights and "
                     "report whatever the machine's load",
    "async": "async (throughput mode): groups train in the order they finish, so two runs with the same seed "
             "differ, by more on a loaded machine",
}


def timeouts_line(timeouts: Mapping[str, Mapping[str, int]]) -> str:
    """'none' or the safety-limit timeouts that fired, by stage and kind."""
    parts = [f"{stage}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
             for stage, kinds in timeouts.items() if kinds]
    return "; ".join(parts) if parts else "none"


def write_run_report(run: Any, work: Path, reports: Mapping[str, EvalReport], history: Sequence[Mapping[str, Any]],
                     seconds: Mapping[str, float], final_policy: str, demo_file: Path | None,
                     held_out: Mapping[str, EvalReport] | None = None, summary: Mapping[str, Any] | None = None,
                     rollouts: Path | None = None) -> Path:
    """The main job's report.md: the tables and plots of `write_report` plus what was run (seed, schedule,
    commit, machine load, the timeouts that fired), how long each stage took, what each policy is, what RL had
    to learn from on each task (`rollouts`: the RL stage's rollouts.jsonl; `rl_signal`), the policies
    on the held-out tasks (`report.held_out_tasks`), and the exported policy loaded back with transformers.
    Also prints the tables."""
    wall = sum(seconds.values())
    bc, rl = run.bc, run.rl
    context = f", page tokens trained at weight {bc.context_loss_weight}" if bc.context_loss_weight else ""
    replay = f", each batch replaying {rl.replay_demonstrations} demonstrations" if rl.replay_demonstrations else ""
    if rl.demonstration_share:
        replay = f", mixed with {rl.demonstration_share:.0%} of the demonstrations spread over the iterations"
    sections = {
        "Run": (f"recipe `{run.recipe}`, suite `{run.tasks.suite}`, tasks `{run.tasks.train or 'train split'}`; "
                f"{len(history)} RL iterations x {run.rollout.groups_per_iteration} groups of "
                f"{run.rollout.group_size}; wall time {wall / 60:.1f} min ({stage_times(seconds)}; summed over "
                f"resumed segments). Seed {run.seed}; schedule {SCHEDULE_NOTES.get(run.rl.schedule, run.rl.schedule)}."),
        "Policies": (f"{_first_policy(run)}; BC: "
                     f"{bc.steps} SFT steps on the scripted solvers' demonstrations "
                     f"({bc.demonstration_seeds} training seeds per task{context}{_trained_part(run)}); RL: BC "
                     f"plus {len(history)} {run.recipe} iterations{replay}. All play the same "
                     f"{run.report.eval_seeds} held-out test seeds per task with greedy decoding."),
        "Exported policy": transformers_check(final_policy),
        "Logs": f"TensorBoard: `tensorboard --logdir {work}` (bc/logs, rl/logs).",
    }
    if summary is not None:
        prov = summary.get("provenance", {})
        sections["Run"] += (f" Commit {prov.get('commit', '?')}{' (with local changes)' if prov.get('dirty') else ''}, "
                            f"{prov.get('date', '?')}, `{prov.get('command', '?')}`; load average at start "
                            f"{prov.get('load_start')}, at end {prov.get('load_end')} on {machine_line(prov.get('machine', {}))}"
                            f"{'; ' + base_model_line(prov['base_model']) if prov.get('base_model') else ''}. "
                            f"Safety-limit timeouts that fired: {timeouts_line(summary.get('timeouts', {}))}.")
    subsets = demonstration_subsets(demo_file, reports) if demo_file is not None else None
    if subsets:
        sections["Policies"] += (" Tasks without demonstrations: "
                                 f"{', '.join(sorted(subsets['tasks without demonstrations']))}; BC meets them "
                                 "first here and RL learns them from reward alone.")
    if history and rollouts is not None and rollouts.exists():
        greedy = {n: reports[n].per_task for n in ("BC", "RL") if n in reports}
        sections["What RL learned from, by task"] = (f"{SIGNAL_NOTE}\n\n"
                                                      f"{signal_table(read_signal(rollouts), greedy, subsets)}")
    if held_out:
        sections["Held-out tasks"] = (
            f"Tasks in neither the demonstrations nor the RL tasks ({', '.join(run.report.held_out_task_names)}), "
            f"never tuned on; the same {run.report.eval_seeds} test seeds per task for every policy.\n\n"
            f"{success_table(held_out)}\n\n{paired_table(held_out)}")
        (work / "eval_held_out.json").write_text(json.dumps({k: r.to_dict() for k, r in held_out.items()}, indent=2))
    sections["Trajectories"] = write_run_viewer(run, work, reports)
    path = write_report(work, reports, history, sections, subsets=subsets)
    print(success_table(reports))
    print(paired_table(reports, subsets))
    if held_out:
        print(success_table(held_out))
    return path


def _first_policy(run: Any) -> str:
    if run.model.pretrained:
        return (f"base (zero-shot): the pretrained `{run.model.pretrained}` checkpoint as shipped ({run.model.path}), "
                "prompted with the run's own prompts and chat template, never trained here")
    return "random: the freshly initialised model (same tokenizer and size, never trained)"


def _trained_part(run: Any) -> str:
    n = run.train.trainable_layers
    return f"; only the top {n} decoder layers and the final norm train, in BC and RL" if n else ""
