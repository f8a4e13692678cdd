"""Several seeds of one config in one command, and the report over them.

    python scripts/seeds.py --config configs/grpo_local.py --seeds 3              # seeds 0, 1, 2
    python scripts/seeds.py --config configs/grpo_local.py --seeds 0,1,2 --workdir runs/main_seeds \\
        --config.rl.iterations=30                                                  # any --config.* flag
    python scripts/seeds.py --report runs/main_seeds                              # rebuild the report only
    python scripts/seeds.py --report runs/judge_seeds --compare runs/main_seeds   # B - A, seed by seed

Each seed runs the main job (`scripts/train.py`, its own process) into <workdir>/seed_<k> with `--config.seed=k`;
a seed whose summary.json exists is not run again, and an interrupted one resumes per stage. Then
<workdir>/seeds_report.md and seeds_summary.json give, for random / BC / RL, the mean success, the spread
over seeds and a 95% interval over seeds and episodes, and RL - BC per seed and over seeds, also on the tasks
with and without demonstrations (from each seed's demonstrations.jsonl) and on the tasks held out of training
(`jaxwebrl.evaluation.seeds` says which interval and why), and what RL had to learn from on each task summed over
the seeds (`jaxwebrl.evaluation.rl_signal`, from each seed's rl/rollouts.jsonl). `--compare A` adds this config minus config A on RL
success, paired seed by seed on every task, on each shared task subset and on the held-out tasks (refused
unless both ran the same seeds on the same episodes). `scripts/results_tables.py --add` puts
the result in the README's and RESULTS.md's tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxwebrl.evaluation import provenance  # noqa: E402
from jaxwebrl.evaluation.rl_signal import SIGNAL_NOTE, read_signal, signal_table, sum_signals  # noqa: E402
from jaxwebrl.evaluation.seeds import (  # noqa: E402
    common_subsets, compare_all, difference_table, per_seed, report_from_dict, seeds_markdown, seeds_summary)

SEEDS_SUMMARY = "seeds_summary.json"
SEEDS_REPORT = "seeds_report.md"


def parse_seeds(text: str) -> list[int]:
    """'3' -> [0, 1, 2]; '0,4,7' -> [0, 4, 7]."""
    if "," not in text and text.strip().isdigit():
        return list(range(int(text)))
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds {text!r}: give a count (3) or a comma-separated list (0,1,2)") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds {text!r}: give at least one seed, each once")
    return seeds


def read_seed_runs(workdir: Path) -> dict[int, dict]:
    """seed -> summary.json of each finished seed_<k> run under `workdir`."""
    runs = {}
    for d in sorted(workdir.glob("seed_*")):
        summary = d / "summary.json"
        if summary.exists():
            runs[int(d.name.split("_", 1)[1])] = json.loads(summary.read_text())
    if not runs:
        raise SystemExit(f"{workdir}: no seed_<k>/summary.json; run `scripts/seeds.py --config ... --workdir {workdir}` first")
    return runs


def read_seed_subsets(workdir: Path, runs: dict[int, dict]) -> dict[int, dict[str, set[str]] | None]:
    """seed -> its evaluated tasks split by whether BC had demonstrations of them (from the seed's
    demonstrations.jsonl; None where every task had, or the file is gone)."""
    from jaxwebrl.evaluation.report import demonstration_subsets

    out: dict[int, dict[str, set[str]] | None] = {}
    for seed, summary in runs.items():
        demos = workdir / f"seed_{seed}" / "demonstrations.jsonl"
        reports = {k: report_from_dict(v) for k, v in summary.get("eval", {}).items()}
        out[seed] = demonstration_subsets(demos, reports) if demos.exists() else None
    return out


def rl_signal_over_seeds(workdir: Path, runs: dict[int, dict], subsets: dict) -> tuple[dict, str] | None:
    """The RL groups of every seed summed by task (`jaxwebrl.evaluation.rl_signal`) and their table beside BC's
    and RL's greedy successes summed over the seeds; None unless every seed kept its rl/rollouts.jsonl."""
    files = [workdir / f"seed_{k}" / "rl" / "rollouts.jsonl" for k in runs]
    if not all(f.exists() for f in files):
        return None
    signal = sum_signals([read_signal(f) for f in files])
    greedy: dict[str, dict[str, tuple[int, int]]] = {}
    for name, by_seed in per_seed(runs).items():
        if name in ("BC", "RL"):
            for report in by_seed.values():
                for task, (s, n) in report.per_task.items():
                    a, b = greedy.setdefault(name, {}).get(task, (0, 0))
                    greedy[name][task] = (a + s, b + n)
    table = signal_table(signal, greedy, common_subsets(subsets))
    return {t: dataclasses.asdict(s) for t, s in sorted(signal.items())}, table


def run_seed(config: str, seed: int, workdir: Path, flags: list[str]) -> None:
    out = workdir / f"seed_{seed}"
    if (out / "summary.json").exists():
        print(f"[seeds] seed {seed}: {out}/summary.json exists, not run again", flush=True)
        return
    cmd = [sys.executable, str(ROOT / "scripts" / "train.py"), "--config", config, f"--config.seed={seed}",
           f"--config.workdir={out}", *flags]
    print(f"[seeds] seed {seed}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True)
    print(f"[seeds] seed {seed} done in {(time.time() - t0) / 60:.1f} min", flush=True)


def write_report(workdir: Path, driver: dict | None, compare_with: Path | None) -> dict:
    runs = read_seed_runs(workdir)
    subsets = read_seed_subsets(workdir, runs)
    result = seeds_summary(runs, subsets)
    md = seeds_markdown(result, title=f"{workdir.name}: {len(runs)} seeds")
    if compare_with is not None:
        other = read_seed_runs(compare_with)
        rows = compare_all(other, runs, label=f"{workdir.name} - {compare_with.name}",
                           subsets_a=read_seed_subsets(compare_with, other), subsets_b=subsets)
        result["comparisons"] = rows
        md += (f"\n## {workdir.name} - {compare_with.name}, seed by seed on the same episodes\n\n"
               + "\n".join(difference_table(rows)) + "\n")
    signal = rl_signal_over_seeds(workdir, runs, subsets)
    if signal is not None:
        result["rl_signal"], table = signal
        md += f"\n## What RL learned from, by task, summed over the seeds\n\n{SIGNAL_NOTE}\n\n{table}\n"
    seed_runs = {k: {"workdir": str(workdir / f"seed_{k}"), "wall_s": r.get("wall_s"),
                     "provenance": r.get("provenance"), "timeouts": r.get("timeouts")} for k, r in runs.items()}
    md += "\n## Runs\n\n| seed | commit | date | wall | load average start / end | timeouts fired |\n|---|---|---|---|---|---|\n"
    for k, r in seed_runs.items():
        p = r["provenance"] or {}
        fired = sum(sum(v.values()) for v in (r["timeouts"] or {}).values())
        wall = f"{r['wall_s'] / 60:.1f} min" if r["wall_s"] else "-"
        md += f"| {k} | {p.get('commit', '?')} | {p.get('date', '?')} | {wall} | {p.get('load_start')} / {p.get('load_end')} | {fired} |\n"
    summary = {**result, "runs": seed_runs, "provenance": driver or {}}
    if driver is None and (workdir / SEEDS_SUMMARY).exists():  # a rebuilt report keeps the driver's record
        summary["provenance"] = json.loads((workdir / SEEDS_SUMMARY).read_text()).get("provenance", {})
    (workdir / SEEDS_SUMMARY).write_text(json.dumps(summary, indent=2, default=str))
    (workdir / SEEDS_REPORT).write_text(md)
    print(md)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="the config file, e.g. configs/grpo_local.py")
    parser.add_argument("--seeds", default="3", help="a count (3: seeds 0..2) or a list (0,1,2)")
    parser.add_argument("--workdir", help="where seed_<k>/ go (default runs/<config>_seeds)")
    parser.add_argument("--report", metavar="WORKDIR", help="only rebuild the report of an existing multi-seed run")
    parser.add_argument("--compare", metavar="WORKDIR", help="another multi-seed run of the same seeds: this - that")
    args, flags = parser.parse_known_args()
    bad = [f for f in flags if not f.startswith("--config.")]
    if bad:
        raise SystemExit(f"unknown arguments {bad}: seeds.py takes --config, --seeds, --workdir, --report, --compare "
                         "and --config.<field>=<value> flags for the main job")
    if any(f.startswith(("--config.seed=", "--config.workdir=")) for f in flags):
        raise SystemExit("--config.seed and --config.workdir are set per seed: use --seeds and --workdir")
    compare_with = Path(args.compare) if args.compare else None
    if args.report:
        write_report(Path(args.report), None, compare_with)
        return
    if not args.config:
        raise SystemExit("--config is required (or --report WORKDIR to rebuild a report)")
    config = str(Path(args.config).resolve())
    if not Path(config).is_file():
        raise SystemExit(f"--config {args.config!r} is not a file; give a config such as configs/grpo_local.py")
    quick = any(f.lower() in ("--config.quick=true", "--config.quick=1") for f in flags)
    workdir = Path(args.workdir or f"runs/{Path(config).stem}{'_quick' if quick else ''}_seeds").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    seeds = parse_seeds(args.seeds)
    driver = provenance.run_start()
    t0 = time.time()
    for seed in seeds:
        run_seed(config, seed, workdir, flags)
    driver = {**provenance.run_end(driver), "wall_s": time.time() - t0}
    write_report(workdir, driver, compare_with)


if __name__ == "__main__":
    main()
