"""A report over several seeds of one config: per policy the mean success, the spread across seeds and a 95%
interval that accounts for both the seeds and the episodes; RL - BC per seed; configs compared seed by seed.

Why this interval. One run is one draw of the whole pipeline (demonstrations, BC, RL, evaluation): two RL
runs from bit-identical BC weights differed by 16 points (RESULTS.md). The quantity of interest is the mean
success over seeds, and its uncertainty has two parts, the run-to-run (seed) variance and the binomial noise
of each run's held-out episodes. Each seed's success rate already carries its own episode noise, so the
variance of the per-seed rates estimates both parts together (between-seed variance + episode variance / n
episodes). The interval is therefore the t interval on the per-seed rates with (seeds - 1) degrees of
freedom: the seeds are the independent units (clusters of episodes), which is the cluster-robust interval
with one cluster per seed, exact for normal per-seed rates. A bootstrap over seeds then episodes was not
chosen: with 3 seeds it sees at most 10 distinct resamples of the seeds and its interval is far too narrow;
the t interval's width at 3 seeds (t = 4.30) is the honest price of three draws. With one seed there is no
seed variance to estimate and the report gives the episodes-only Wilson interval, marked as such.

RL - BC is paired twice: within a seed on the same held-out episodes (every seed evaluates the same test
instances), then the per-seed differences get the same t interval. Two configs are compared the same way,
and only on the same seeds (`compare`).
"""

from __future__ import annotations

import math
from typing import Any, Collection, Mapping, Sequence

import numpy as np
from scipy import stats

from jaxwebrl.evaluation.evaluate import EvalReport, paired_difference, wilson_interval

POLICIES = ("random", "BC", "RL")


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The t interval of the mean of `values` (one per seed), (seeds - 1) degrees of freedom."""
    x = np.asarray(values, np.float64)
    if x.size < 2:
        raise ValueError("a t interval over seeds needs at least 2 seeds")
    half = stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def report_from_dict(d: Mapping[str, Any]) -> EvalReport:
    """An `EvalReport` back from its `to_dict()` form (summary.json's `eval` entries)."""
    return EvalReport({k: (v["successes"], v["episodes"]) for k, v in d["per_task"].items()}, d.get("terminations", {}),
                      d.get("mean_steps", 0.0), dict(d["outcomes"]))


def per_seed(summaries: Mapping[int, Mapping[str, Any]], key: str = "eval") -> dict[str, dict[int, EvalReport]]:
    """policy -> seed -> its evaluation, from each seed's summary.json (`eval`, or `held_out_eval`: the tasks
    held out of training)."""
    out: dict[str, dict[int, EvalReport]] = {}
    for seed, summary in sorted(summaries.items()):
        for name, d in (summary.get(key) or {}).items():
            out.setdefault(name, {})[seed] = report_from_dict(d)
    return out


def policy_rows(by_policy: Mapping[str, Mapping[int, EvalReport]]) -> list[dict[str, Any]]:
    """Per policy (`per_seed`'s result): per-seed success, mean, SD and range over seeds, the 95% interval
    (above) and its kind."""
    rows = []
    for name, by_seed in by_policy.items():
        rates = [r.success_rate for r in by_seed.values()]
        row: dict[str, Any] = {"policy": name, "seeds": list(by_seed), "per_seed": rates, "mean": float(np.mean(rates)),
                               "episodes_per_seed": [r.episodes for r in by_seed.values()]}
        if len(rates) >= 2:
            row.update(sd=float(np.std(rates, ddof=1)), min=min(rates), max=max(rates), interval="t over seeds")
            lo, hi = t_interval(rates)  # a rate lies in [0, 1]; with few seeds the t interval can reach past it
            row["ci_low"], row["ci_high"] = max(0.0, lo), min(1.0, hi)
        else:
            (only,) = by_seed.values()
            row.update(sd=None, min=rates[0], max=rates[0], interval="Wilson, episodes only (1 seed)")
            row["ci_low"], row["ci_high"] = wilson_interval(only.successes, only.episodes)
        rows.append(row)
    return rows


def difference_row(a: Mapping[int, EvalReport], b: Mapping[int, EvalReport], label: str) -> dict[str, Any]:
    """b - a per seed (paired on the same episodes), and over seeds (mean, t interval); same seeds only."""
    if set(a) != set(b):
        raise ValueError(f"{label}: the two sides ran different seeds ({sorted(a)} vs {sorted(b)}); compare runs of "
                         "the same seeds (scripts/seeds.py --seeds)")
    seeds = sorted(a)
    diffs = {s: paired_difference(a[s], b[s]) for s in seeds}
    values = [diffs[s].diff for s in seeds]
    row: dict[str, Any] = {"comparison": label, "seeds": seeds, "per_seed": values,
                           "per_seed_ci": [(diffs[s].ci_low, diffs[s].ci_high) for s in seeds],
                           "per_seed_p": [diffs[s].p_value for s in seeds], "mean": float(np.mean(values))}
    if len(seeds) >= 2:
        row["ci_low"], row["ci_high"] = t_interval(values)
        row["interval"] = "t over seeds"
    else:
        row["ci_low"], row["ci_high"] = diffs[seeds[0]].ci_low, diffs[seeds[0]].ci_high
        row["interval"] = "paired, episodes only (1 seed)"
    return row


Subsets = Mapping[str, Collection[str]]  # a name ("tasks with demonstrations") -> its tasks


def common_subsets(subsets: Mapping[int, Subsets | None]) -> dict[str, frozenset[str]]:
    """The named task subsets every seed has with the same tasks (the seeds of one config demonstrate the same
    tasks; a subset that differs between seeds would mix two questions, so it is left out)."""
    per = [{k: frozenset(v) for k, v in (s or {}).items()} for s in subsets.values()]
    if not per:
        return {}
    return {k: v for k, v in per[0].items() if all(p.get(k) == v for p in per[1:])}


def _on(by_seed: Mapping[int, EvalReport], tasks: Collection[str]) -> dict[int, EvalReport]:
    return {s: r.on_tasks(tasks) for s, r in by_seed.items()}


def seeds_summary(summaries: Mapping[int, Mapping[str, Any]],
                  subsets: Mapping[int, Subsets | None] | None = None) -> dict[str, Any]:
    """The multi-seed figures of one config (what seeds_summary.json holds besides provenance): the policies
    on the trained tasks, BC - random and RL - BC, RL - BC again on each task subset the seeds share (`subsets`:
    seed -> name -> tasks, e.g. the tasks with and without demonstrations), and, when every seed evaluated
    tasks held out of training, the policies and RL - BC there."""
    by = per_seed(summaries)
    diffs = [difference_row(by[a], by[b], f"{b} - {a}") for a, b in (("random", "BC"), ("BC", "RL")) if a in by and b in by]
    if "BC" in by and "RL" in by:
        for name, tasks in common_subsets(subsets or {}).items():
            diffs.append(difference_row(_on(by["BC"], tasks), _on(by["RL"], tasks), f"RL - BC, {name}"))
    out = {"seeds": sorted(summaries), "policies": policy_rows(by), "differences": diffs,
           "schedules": sorted({str(s.get("schedule")) for s in summaries.values()})}
    if all(s.get("held_out_eval") for s in summaries.values()):
        held = per_seed(summaries, "held_out_eval")
        out["held_out"] = {"tasks": sorted({t for r in held.get("RL", {}).values() for t in r.per_task}),
                           "policies": policy_rows(held),
                           "differences": [difference_row(held["BC"], held["RL"], "RL - BC")]
                           if "BC" in held and "RL" in held else []}
    return out


def compare(a: Mapping[int, Mapping[str, Any]], b: Mapping[int, Mapping[str, Any]], policy: str = "RL",
            label: str = "B - A") -> dict[str, Any]:
    """Config B against config A on `policy`'s success, seed by seed (refused unless the seeds are the same)."""
    return difference_row(per_seed(a)[policy], per_seed(b)[policy], f"{label} ({policy})")


def compare_all(a: Mapping[int, Mapping[str, Any]], b: Mapping[int, Mapping[str, Any]], label: str = "B - A",
                subsets_a: Mapping[int, Subsets | None] | None = None,
                subsets_b: Mapping[int, Subsets | None] | None = None, policy: str = "RL") -> list[dict[str, Any]]:
    """Config B against config A seed by seed: on every trained task (`compare`), on each task subset both
    configs share with the same tasks, and on the tasks held out of training when both evaluated the same
    ones. Both must have evaluated the same episodes for the pairing to mean anything: refused otherwise."""
    pa, pb = per_seed(a)[policy], per_seed(b)[policy]
    for s in set(pa) & set(pb):
        if set(pa[s].outcomes) != set(pb[s].outcomes):
            raise ValueError(f"{label}: seed {s} evaluated different episodes on the two sides ({len(pa[s].outcomes)} "
                             f"vs {len(pb[s].outcomes)} task@seed outcomes); run both with the same report.eval_seeds "
                             "and tasks")
    rows = [difference_row(pa, pb, f"{label} ({policy})")]
    sa, sb = common_subsets(subsets_a or {}), common_subsets(subsets_b or {})
    for name in sorted(set(sa) & set(sb)):
        if sa[name] == sb[name]:
            rows.append(difference_row(_on(pa, sa[name]), _on(pb, sa[name]), f"{label} ({policy}, {name})"))
    ha, hb = per_seed(a, "held_out_eval").get(policy), per_seed(b, "held_out_eval").get(policy)
    if ha and hb and all(set(ha[s].outcomes) == set(hb[s].outcomes) for s in set(ha) & set(hb)):
        rows.append(difference_row(ha, hb, f"{label} ({policy}, tasks held out of training)"))
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _policy_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| policy | mean success | 95% interval | SD over seeds | min - max | per seed | episodes per seed |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        sd = "-" if r["sd"] is None else f"{100 * r['sd']:.1f} pts"
        lines.append(f"| {r['policy']} | {_pct(r['mean'])} | [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] | {sd} | "
                     f"{_pct(r['min'])} - {_pct(r['max'])} | {', '.join(_pct(x) for x in r['per_seed'])} | "
                     f"{r['episodes_per_seed'][0]} |")
    return lines


def difference_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown rows of `difference_row` results: mean over seeds, its interval, and each seed's paired figure."""
    lines = ["| comparison | mean over seeds (points) | 95% interval | per seed, paired on the same episodes "
             "(95% CI, McNemar p) |", "|---|---|---|---|"]
    for d in rows:
        per = "; ".join(f"seed {s}: {_pts(v)} [{_pts(lo)}, {_pts(hi)}], p = {p:.2g}"
                        for s, v, (lo, hi), p in zip(d["seeds"], d["per_seed"], d["per_seed_ci"], d["per_seed_p"]))
        lines.append(f"| {d['comparison']} | {_pts(d['mean'])} | [{_pts(d['ci_low'])}, {_pts(d['ci_high'])}] | {per} |")
    return lines


def seeds_markdown(result: Mapping[str, Any], title: str = "Over seeds") -> str:
    """The report's tables: policies (mean, spread, interval) and differences (per seed and over seeds), then
    the same on the tasks held out of training where the seeds evaluated them."""
    seeds = result["seeds"]
    lines = [f"# {title}", "", f"Seeds {', '.join(map(str, seeds))} (schedule: {', '.join(result['schedules'])}). "
             "Interval: " + ("the t interval over the per-seed success rates (seeds are the independent units; "
                             "each seed's rate carries its own episode noise, so the interval covers both; "
                             "jaxwebrl/evaluation/seeds.py says why not a bootstrap)." if len(seeds) > 1 else
                             "one seed: episodes only (no seed variance can be estimated)."), ""]
    lines += _policy_table(result["policies"])
    if result["differences"]:
        lines += [""] + difference_table(result["differences"])
    held = result.get("held_out")
    if held:
        lines += ["", f"## Tasks held out of training ({', '.join(held['tasks'])})", ""] + _policy_table(held["policies"])
        if held["differences"]:
            lines += [""] + difference_table(held["differences"])
    return "\n".join(lines) + "\n"
