"""Which turns an RL run's policy gradient pushed up: well-formed or malformed ones (issue 40, the OpenWebRL
local run's collapse to format-error aborts).

    python studies/format_credit.py runs/grpo_openwebrl_local/rl/rollouts.jsonl [more rollouts.jsonl ...]

Reads a run's `rl/rollouts.jsonl` (every episode played, rewarded, with its iteration and whether its group
trained), recomputes each trained group's advantages as the recipe does (`group_norm`: reward minus the group
mean, over the group's std; every turn of a trajectory gets its trajectory's advantage), and counts per
iteration: episodes by termination, and the turns of the trained groups by format (`Turn.format_ok`: a
closed thinking block and a parsable action) and by the sign of their advantage. A malformed turn with a
positive advantage is one the update made more likely.
"""

from __future__ import annotations

import collections
import json
import sys
from typing import Any

import numpy as np


def iteration_rows(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rollouts:
        groups[(int(r["metadata"]["iteration"]), r["group_id"])].append(r)
    rows: dict[int, dict[str, Any]] = {}
    for (it, _), members in sorted(groups.items()):
        row = rows.setdefault(it, {"iteration": it, "episodes": 0, "terminations": collections.Counter(),
                                   "groups": 0, "trained": 0, "malformed+": 0, "malformed-": 0, "wellformed+": 0,
                                   "wellformed-": 0})
        row["groups"] += 1
        row["episodes"] += len(members)
        row["terminations"].update(m["termination"] for m in members)
        if not members[0]["metadata"].get("group_kept"):
            continue
        row["trained"] += 1
        rewards = np.array([m["reward"] for m in members], float)
        std = rewards.std()
        adv = (rewards - rewards.mean()) / (std + 1e-6) if std > 0 else np.zeros_like(rewards)
        for m, a in zip(members, adv):
            if a == 0:
                continue
            sign = "+" if a > 0 else "-"
            for t in m["turns"]:
                row[("wellformed" if t["format_ok"] else "malformed") + sign] += 1
    return [rows[k] for k in sorted(rows)]


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path) as f:
            rollouts = [json.loads(line) for line in f if line.strip()]
        print(f"{path}: {len(rollouts)} episodes")
        print("| iteration | episodes | format-error aborts | terminations | groups trained / played | turns "
              "with advantage > 0: malformed / well-formed | advantage < 0: malformed / well-formed |")
        print("|---|---|---|---|---|---|---|")
        for r in iteration_rows(rollouts):
            aborts = r["terminations"].get("format_errors", 0)
            terms = ", ".join(f"{k} {v}" for k, v in r["terminations"].most_common())
            print(f"| {r['iteration']} | {r['episodes']} | {aborts} ({aborts / max(1, r['episodes']):.0%}) | {terms} | "
                  f"{r['trained']} / {r['groups']} | {r['malformed+']} / {r['wellformed+']} | "
                  f"{r['malformed-']} / {r['wellformed-']} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
