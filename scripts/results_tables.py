"""The README's and RESULTS.md's result tables, written from run records, so no figure is typed by hand and
every figure names the run that produced it.

    python scripts/results_tables.py                           # rewrite the tables from benchmarks/measured/results/*.json
    python scripts/results_tables.py --check                   # exit 1 if a table is out of date (CI, tests)
    python scripts/results_tables.py --add runs/main_seeds --table main-job --what "3 seeds, quickstart config"
    python scripts/results_tables.py --add runs/grpo_local --table main-job --what "full run"

A record (`benchmarks/measured/results/<name>.json`) is made by `--add` from a run's summary.json (one seed,
`jaxwebrl.main_job.stages.run_main_job`) or seeds_summary.json (several, `scripts/seeds.py`): the figures
(success of random / BC / RL with 95% intervals, RL - BC), the seeds and schedule, and where the figures
came from (commit, date, command, machine load at start and end, wall time). Records of runs from before
summaries carried that provenance were transcribed once from the dated text of README.md and RESULTS.md
(their `source` says so); they are the only hand-entered figures, and none is added that way any more.

Tables are the text between `<!-- results:NAME -->` and `<!-- /results -->` in README.md and RESULTS.md: NAME
is a record's `table`. README's `main-job` holds the headline: the newest main-job record of at least
`HEADLINE_SEEDS` seeds if there is one, else the newest single runs, and it says which.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "measured" / "results"
DOCS = (ROOT / "README.md", ROOT / "RESULTS.md")
HEADLINE_SEEDS = 3
BASE = "base (zero-shot)"  # a pretrained run's untrained policy (jaxwebrl.main_job.stages.BASE_POLICY)
MARKER = re.compile(r"(<!-- results:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


# ---- records -------------------------------------------------------------------------------------------


def load_records(directory: Path = RECORDS) -> list[dict[str, Any]]:
    """Every record, oldest first (by date, then name)."""
    records = [json.loads(p.read_text()) | {"name": p.stem} for p in sorted(directory.glob("*.json"))]
    return sorted(records, key=lambda r: (r["date"], r["name"]))


def _interval(d: dict[str, Any]) -> list[float]:
    return [d["ci_low"], d["ci_high"]]


def _seeds_policy(p: dict[str, Any]) -> dict[str, Any]:
    """A policy row of seeds_summary.json as a record's entry: mean, interval and its kind, episodes per seed."""
    return {"mean": p["mean"], "ci": [p["ci_low"], p["ci_high"]], "interval": p["interval"], "n": p["episodes_per_seed"][0]}


def record_from_run(workdir: Path, table: str, what: str) -> dict[str, Any]:
    """A record from `workdir`'s seeds_summary.json (several seeds) or summary.json (one)."""
    seeds_file, single_file = workdir / "seeds_summary.json", workdir / "summary.json"
    if seeds_file.exists():
        s = json.loads(seeds_file.read_text())
        runs = s.get("runs", {})
        # The driver's provenance; a report rebuilt with `seeds.py --report` has none: the seeds' own then.
        prov = dict(s.get("provenance") or {})
        run_provs = [r["provenance"] for r in runs.values() if r.get("provenance")]
        if not prov.get("commit") and run_provs:
            commits = sorted({p.get("commit") or "?" for p in run_provs})
            prov.setdefault("date", min(p.get("date") or "?" for p in run_provs))
            prov["commit"] = ",".join(commits)
            prov.setdefault("command", f"scripts/seeds.py --report (each seed: {run_provs[0].get('command', '?')})")
        loads = [r["provenance"].get(k) for r in runs.values() if r.get("provenance") for k in ("load_start", "load_end")]
        policies = {p["policy"]: {**_seeds_policy(p), "per_seed": p["per_seed"]} for p in s["policies"]}
        diff = next((d for d in s["differences"] if d["comparison"] == "RL - BC"), None)
        fired = sum(sum(v.values()) for r in runs.values() for v in (r.get("timeouts") or {}).values())
        walls = [r["wall_s"] for r in runs.values() if r.get("wall_s")]
        return {"table": table, "what": what, "date": (prov.get("date") or "?")[:10], "commit": prov.get("commit", "?"),
                "command": prov.get("command", "?"), "schedule": ",".join(s.get("schedules", [])), "seeds": s["seeds"],
                "load": [min(x[0] for x in loads if x), max(x[0] for x in loads if x)] if any(loads) else None,
                "wall_min": round(sum(walls) / len(walls) / 60, 1) if walls else None,
                "wall_total_min": round(prov["wall_s"] / 60, 1) if prov.get("wall_s") else None,
                "policies": policies, "rl_minus_bc": None if diff is None else {
                    "mean": diff["mean"], "ci": [diff["ci_low"], diff["ci_high"]], "interval": diff["interval"],
                    "per_seed": diff["per_seed"], "per_seed_p": diff["per_seed_p"]},
                "timeouts_fired": fired, "source": f"{seeds_file} ({len(s['seeds'])} seeds)",
                **({"held_out": {p["policy"]: _seeds_policy(p) for p in s["held_out"]["policies"]}}
                   if s.get("held_out") else {})}
    if not single_file.exists():
        raise SystemExit(f"{workdir}: neither seeds_summary.json nor summary.json; give a run's workdir")
    s = json.loads(single_file.read_text())
    if "eval" not in s:
        raise SystemExit(f"{single_file}: the run has no evaluation (report.enabled was false); nothing to tabulate")
    from jaxwebrl.evaluation.evaluate import paired_difference
    from jaxwebrl.evaluation.seeds import report_from_dict

    prov = s.get("provenance") or {}
    reports = {k: report_from_dict(v) for k, v in s["eval"].items()}
    policies = {k: {"mean": v["success_rate"], "ci": _interval(v), "interval": "Wilson, episodes only (1 seed)",
                    "n": v["episodes"]} for k, v in s["eval"].items()}
    diff = None
    if "BC" in reports and "RL" in reports:
        d = paired_difference(reports["BC"], reports["RL"])
        diff = {"mean": d.diff, "ci": [d.ci_low, d.ci_high], "p": d.p_value, "interval": "paired, episodes only"}
    load = prov.get("load_start"), prov.get("load_end")
    stage_min = {k: round(s[f"{k}_s"] / 60, 1) for k in ("bc", "rl") if s.get(f"{k}_s") is not None}
    if s.get("wall_s") and len(stage_min) == 2:
        stage_min["eval"] = round(s["wall_s"] / 60 - stage_min["bc"] - stage_min["rl"], 1)
    held_out = {k: {"mean": v["success_rate"], "ci": _interval(v), "n": v["episodes"]}
                for k, v in (s.get("held_out_eval") or {}).items()}
    return {"stage_min": stage_min, **({"held_out": held_out} if held_out else {}), "table": table, "what": what, "date": (prov.get("date") or "?")[:10], "commit": prov.get("commit", "?"),
            "command": prov.get("command", "?"), "schedule": s.get("schedule", "async"), "seeds": [s.get("seed", 0)],
            "load": [load[0][0], load[1][0]] if all(load) else None,
            "wall_min": round(s["wall_s"] / 60, 1) if s.get("wall_s") else None, "policies": policies,
            "rl_minus_bc": diff, "timeouts_fired": sum(sum(v.values()) for v in (s.get("timeouts") or {}).values()),
            "source": str(single_file)}


# ---- tables ---------------------------------------------------------------------------------------------


def _pct(p: dict[str, Any] | None) -> str:
    if not p:
        return "-"
    ci = p.get("ci")
    return f"{100 * p['mean']:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


def _diff(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    out = f"{100 * d['mean']:+.1f}"
    if d.get("ci"):
        out += f" [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]"
    if d.get("p") is not None:
        out += f", p = {d['p']:.2g}"
    if d.get("per_seed"):
        out += " (per seed " + ", ".join(f"{100 * x:+.1f}" for x in d["per_seed"]) + ")"
    return out


def _load(r: dict[str, Any]) -> str:
    load = r.get("load")
    if load is None:
        return "not recorded"
    if isinstance(load, str):
        return load
    return f"{load[0]:g}-{load[1]:g}"


def _wall(r: dict[str, Any]) -> str:
    stages = ", ".join(f"{k} {v:g}" for k, v in (r.get("stage_min") or {}).items() if v is not None)
    wall = "-" if r.get("wall_min") is None else f"{r['wall_min']:g} min" + (" per seed" if len(r["seeds"]) > 1 else "")
    return wall + (f" ({stages})" if stages else "")


def _start(p: dict[str, Any]) -> str:
    """The untrained policy's cell: a random init's, or a pretrained model's zero-shot (marked so)."""
    if BASE in p:
        return _pct(p[BASE]) + " (base, zero-shot)"
    return _pct(p.get("random"))


def _held_out(r: dict[str, Any]) -> str:
    h = r.get("held_out") or {}
    return "; ".join(f"{k}: {_pct(v)}" for k, v in h.items()) or "-"


def table(records: list[dict[str, Any]]) -> str:
    """One row per record; a column for the tasks held out of training when any record has them."""
    held = any(r.get("held_out") for r in records)
    lines = ["| run (record) | date, commit | what | seeds | schedule | random | BC | RL | RL - BC (points) | wall | load |"
             + (" held-out tasks |" if held else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if held else "")]
    for r in records:
        p = r["policies"]
        seeds = ", ".join(map(str, r["seeds"]))
        lines.append(f"| `{r['name']}` | {r['date']}, {r['commit']} | {r['what']} | {seeds} | {r['schedule']} | "
                     f"{_start(p)} | {_pct(p.get('BC'))} | {_pct(p.get('RL'))} | {_diff(r.get('rl_minus_bc'))} | "
                     f"{_wall(r)} | {_load(r)} |" + (f" {_held_out(r)} |" if held else ""))
    return "\n".join(lines)


def headline(records: list[dict[str, Any]]) -> str:
    """README's table: the newest main-job run of >= HEADLINE_SEEDS seeds, else the newest single runs."""
    main = [r for r in records if r["table"] == "main-job"]
    multi = [r for r in main if len(r["seeds"]) >= HEADLINE_SEEDS]
    if multi:
        chosen = multi[-1:]
        note = (f"The newest main-job run over {len(chosen[0]['seeds'])} seeds (mean over seeds; 95% interval over "
                "seeds and episodes, `jaxwebrl/evaluation/seeds.py`). Every run: RESULTS.md, \"Runs\".")
    else:
        chosen = main[-3:]
        note = (f"No main-job run over {HEADLINE_SEEDS} or more seeds is recorded yet: these are the newest single "
                "runs, each one draw (two RL stages from the same BC weights have differed by 16 points; intervals "
                "are over episodes only). `python scripts/seeds.py --config configs/grpo_local.py --seeds 3` makes "
                "the multi-seed run. Every run: RESULTS.md, \"Runs\".")
    return table(chosen) + "\n\n" + note


def render(name: str, records: list[dict[str, Any]], doc: Path) -> str:
    if doc.name == "README.md" and name == "main-job":
        body = headline(records)
    else:
        chosen = [r for r in records if r["table"] == name]
        if not chosen:
            raise SystemExit(f"{doc.name}: table {name!r} has no record (benchmarks/measured/results/*.json with \"table\": {name!r})")
        body = table(chosen)
    return (f"<!-- generated by scripts/results_tables.py from benchmarks/measured/results/*.json; do not edit by hand -->\n"
            f"{body}\n")


def rewrite(doc: Path, records: list[dict[str, Any]]) -> str:
    text = doc.read_text()
    return MARKER.sub(lambda m: m.group(1) + render(m.group("name"), records, doc) + m.group(4), text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a table differs from its records")
    parser.add_argument("--add", metavar="WORKDIR", help="record a run (its summary.json or seeds_summary.json)")
    parser.add_argument("--name", help="the record's name (default: <table>-<date>-<commit>)")
    parser.add_argument("--table", default="main-job", help="which table the record belongs to")
    parser.add_argument("--what", default="", help="what the run was, in a few words")
    parser.add_argument("--records", default=str(RECORDS), help="the records directory")
    args = parser.parse_args()
    records_dir = Path(args.records)
    if args.add:
        record = record_from_run(Path(args.add), args.table, args.what or Path(args.add).name)
        name = args.name or f"{args.table}-{record['date']}-{record['commit']}"
        records_dir.mkdir(parents=True, exist_ok=True)
        (records_dir / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded {records_dir / (name + '.json')}")
    records = load_records(records_dir)
    stale = []
    for doc in DOCS:
        new = rewrite(doc, records)
        if new != doc.read_text():
            stale.append(doc.name)
            if not args.check:
                doc.write_text(new)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/results_tables.py", file=sys.stderr)
        return 1
    print("tables " + ("checked" if args.check else "written") + f" from {len(records)} records")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
