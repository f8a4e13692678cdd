#!/usr/bin/env python3
"""Policies of different runs (different models, configs, tokenizers) on the episodes they share: the
pretrained main job against the from-scratch one (issue 40), from each run's saved evaluations, without
playing anything again.

    python studies/compare_runs.py \
        --policy "scratch BC=runs/grpo_local/eval.json:BC" --policy "scratch RL=runs/grpo_local/eval.json:RL" \
        --policy "SmolLM2 BC=runs/grpo_local_smollm2/eval.json:BC" --policy "SmolLM2 RL=runs/grpo_local_smollm2/eval.json:RL" \
        --demonstrated click-button,click-link,click-option,click-tab,click-checkboxes,focus-text

Each `--policy NAME=FILE:KEY` is one policy's evaluation in a run's eval.json (or eval_held_out.json, or
scripts/eval.py's report JSON): its outcome per (task, seed) episode; `FILE:KEY+FILE:KEY` joins evaluations of
one policy on different tasks. Only the episodes every policy played are
kept (a run with 20 test seeds per task and one with 10 share the first 10, since test seeds are drawn in
order), so the success rates, their 95% Wilson intervals and the paired differences (exact McNemar test) are
on identical episodes. `--demonstrated` adds the paired differences on those tasks and on the others.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jaxwebrl.evaluation.evaluate import EvalReport
from jaxwebrl.evaluation.report import paired_table, success_table


def load(spec: str) -> tuple[str, dict[str, bool]]:
    """NAME=FILE:KEY[+FILE:KEY...] -> (NAME, that policy's outcomes). Several parts join one policy's
    evaluations of different tasks (e.g. scripts/eval.py run on two task lists); an episode two parts both
    played must have the same outcome in each."""
    name, _, rest = spec.partition("=")
    outcomes: dict[str, bool] = {}
    for part in rest.split("+"):
        path, _, key = part.rpartition(":")
        if not name or not path or not key:
            raise SystemExit(f"--policy {spec!r}: expected NAME=FILE:KEY[+FILE:KEY...], e.g. 'RL=runs/x/eval.json:RL'")
        data: dict[str, Any] = json.loads(Path(path).read_text())
        if key not in data:
            raise SystemExit(f"--policy {spec!r}: {path} has policies {sorted(data)}, not {key!r}")
        for episode, ok in data[key]["outcomes"].items():
            if outcomes.get(episode, bool(ok)) != bool(ok):
                raise SystemExit(f"--policy {spec!r}: episode {episode} has different outcomes in its parts")
            outcomes[episode] = bool(ok)
    return name, outcomes


def report(outcomes: dict[str, bool]) -> EvalReport:
    per_task: dict[str, tuple[int, int]] = {}
    for key, ok in outcomes.items():
        task = key.rsplit("@", 1)[0]
        s, n = per_task.get(task, (0, 0))
        per_task[task] = (s + int(ok), n + 1)
    return EvalReport(per_task, {}, 0.0, dict(outcomes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", required=True, help="NAME=FILE:KEY (repeat)")
    ap.add_argument("--demonstrated", default="", help="comma-separated tasks with demonstrations")
    args = ap.parse_args()
    policies = dict(load(spec) for spec in args.policy)
    shared = set.intersection(*(set(o) for o in policies.values()))
    if not shared:
        raise SystemExit("the policies share no (task, seed) episode: evaluate them on the same tasks and test seeds")
    reports = {name: report({k: o[k] for k in sorted(shared)}) for name, o in policies.items()}
    tasks = sorted({k.rsplit("@", 1)[0] for k in shared})
    print(f"{len(shared)} shared episodes on {len(tasks)} tasks "
          f"({', '.join(f'{n}: {len(o)} played' for n, o in policies.items())})\n")
    print(success_table(reports) + "\n")
    demo = {f"miniwob.{t}" if "." not in t else t for t in args.demonstrated.split(",") if t}
    subsets = {}
    if demo:
        subsets = {"demonstrated tasks": [t for t in tasks if t in demo],
                   "tasks without demonstrations": [t for t in tasks if t not in demo]}
    print(paired_table(reports, subsets))


if __name__ == "__main__":
    main()
