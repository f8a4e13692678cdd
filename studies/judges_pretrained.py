"""A pretrained instruct model, zero-shot, as OpenWebRL's trajectory judge and WebGym's rubric judge, against
the rule evaluator on held-out MiniWoB++ episodes (issue 40 item 4).

    python studies/judges_pretrained.py --episodes runs/grpo_local_smollm2/episodes/BC.jsonl \
        --episodes runs/grpo_local_smollm2/episodes/RL.jsonl --per_file 40 --out runs/judges_smollm2

--model is the judge's HF directory (default: SmolLM2-135M-Instruct, `python -m jaxwebrl.models.pretrained
smollm2`). The episodes are a main job's evaluated episodes (`<workdir>/episodes/<policy>.jsonl`: greedy, on
held-out test seeds, each with the rule evaluator's outcome in `metadata['success']`). Each judge is the
project's own (jaxwebrl/judges/openwebrl.py, webgym.py): its paper prompt rendered through the model's chat
template, the in-process JaxEngine, greedy, `--max_new_tokens` per call, its paper parser (NOT SUCCESS first).

MiniWoB++ episodes end when the page says the task is over (a right or a wrong final action), not with
done(answer), and MiniWoB++ tasks have no rubric, so two inputs are written in (the only adaptation):
- the final answer is NO_ANSWER (OpenWebRL's rule would skip every episode without an answer);
- WebGym's rubric is one group with one fact, the task itself (`rubric_fact`); criterion B checks the
  NO_ANSWER answer as the paper's judge does.
Only episodes the page ended (termination `done`) are judged: the others (step limit, format errors) are
decided by the papers' rules without a model call. `--per_file` draws that many of them per file (seeded).

Reported per judge: episodes judged, judge errors (no parsable verdict in `--max_new_tokens`), the share it
called SUCCESS, agreement with the rule, false-positive rate (SUCCESS on a rule failure) and false-negative
rate, with 95% Wilson intervals, and the agreement of the constant answers (always SUCCESS / always NOT
SUCCESS) beside it; a judge error counts as disagreement in "agreement, errors as wrong". Writes
`<out>/report.md` and `<out>/verdicts.jsonl` (every verdict with its text).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402

from jaxwebrl.data.records import Trajectory, read_trajectories  # noqa: E402
from jaxwebrl.evaluation.evaluate import wilson_interval  # noqa: E402
from jaxwebrl.judges.config import JudgeConfig, make_backend, make_judge  # noqa: E402

NO_ANSWER = "(none: the agent gave no answer; the web page ended the episode after its last action)"
JUDGES = ("openwebrl", "webgym_rubric")


def rubric_fact(goal: str) -> str:
    return f"The agent completed the task on the page: {goal}"


def prepared(t: Trajectory) -> Trajectory:
    """The episode as the judges read it: NO_ANSWER as its final answer, its task as its one rubric fact."""
    goal = str((t.metadata or {}).get("goal") or "")
    meta = {**(t.metadata or {}), "answer": NO_ANSWER, "rubric": [["task", [rubric_fact(goal)]]]}
    return dataclasses.replace(t, metadata=meta)


def pick(files: Sequence[str], per_file: int, seed: int) -> list[tuple[str, Trajectory]]:
    """(source, episode) for up to `per_file` page-ended episodes of each file, drawn with a fixed seed."""
    out = []
    rng = np.random.default_rng(seed)
    for f in files:
        ended = [t for t in read_trajectories(f) if t.termination == "done" and t.turns]
        idx = rng.permutation(len(ended))[:per_file] if per_file else range(len(ended))
        out += [(Path(f).stem, ended[i]) for i in sorted(idx)]
    return out


def rate(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{k}/{n} = {k / max(1, n):.0%} [{lo:.0%}, {hi:.0%}]"


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    n = len(rows)
    ok = [r for r in rows if r["verdict"] is not None]
    errors = n - len(ok)
    rule_pos = [r for r in ok if r["rule"]]
    rule_neg = [r for r in ok if not r["rule"]]
    all_pos = sum(r["rule"] for r in rows)
    return {
        "episodes (rule successes)": f"{n} ({all_pos})",
        "judge errors (no verdict)": rate(errors, n),
        "judge says SUCCESS": rate(sum(r["verdict"] for r in ok), len(ok)),
        "agreement (judged)": rate(sum(r["verdict"] == r["rule"] for r in ok), len(ok)),
        "agreement, errors as wrong": rate(sum(r["verdict"] == r["rule"] for r in ok), n),
        "false-positive rate (SUCCESS | rule failure)": rate(sum(r["verdict"] for r in rule_neg), len(rule_neg)),
        "false-negative rate (NOT SUCCESS | rule success)": rate(sum(not r["verdict"] for r in rule_pos), len(rule_pos)),
        "always SUCCESS would agree": rate(all_pos, n),
        "always NOT SUCCESS would agree": rate(n - all_pos, n),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    model = args.model
    if not model:
        from jaxwebrl.models.pretrained import fetch_pretrained

        model = str(fetch_pretrained("smollm2"))
    episodes = pick(args.episodes, args.per_file, args.seed)
    if not episodes:
        raise SystemExit("no page-ended episode (termination 'done') in the --episodes files")
    base = JudgeConfig(kind="openwebrl", engine="jax", model_path=model, action_space="bid", temperature=0.0,
                       max_new_tokens=args.max_new_tokens, concurrency=args.slots, timeout_s=3600.0, retries=0,
                       jax_num_slots=args.slots, jax_max_len=args.max_len)
    backend = make_backend(base)
    results: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[str, float] = {}
    try:
        for kind in JUDGES:
            judge = make_judge(dataclasses.replace(base, kind=kind), backend=backend)
            t0 = time.time()
            verdicts = await asyncio.gather(*(judge.judge(prepared(t)) for _, t in episodes))
            seconds[kind] = time.time() - t0
            rows = []
            for (source, t), v in zip(episodes, verdicts):
                rows.append({"source": source, "task_id": t.task_id, "seed": (t.metadata or {}).get("seed"),
                             "rule": bool((t.metadata or {}).get("success")),
                             "verdict": None if v.error else bool(v.score >= 0.5), "label": v.label,
                             "error": v.error_detail[:200] if v.error else "",
                             "calls": [{"purpose": c.purpose, "text": c.text} for c in v.calls]})
            results[kind] = rows
            print(kind, json.dumps(summary(rows), indent=1), f"{seconds[kind]:.0f}s", flush=True)
    finally:
        await backend.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "verdicts.jsonl", "w") as f:
        for kind, rows in results.items():
            for r in rows:
                f.write(json.dumps({"judge": kind, **r}) + "\n")
    tables = {kind: summary(rows) for kind, rows in results.items()}
    keys = list(next(iter(tables.values())))
    name = Path(args.model).name if args.model else "SmolLM2-135M-Instruct"
    md = [f"# {name} zero-shot as the papers' judges, against the rule evaluator", "",
          f"Judge model: `{model}`; episodes: {', '.join(args.episodes)} (page-ended episodes, up to {args.per_file} "
          f"per file, seed {args.seed}); greedy, max_new_tokens {args.max_new_tokens}. Final answer shown: "
          f"{NO_ANSWER!r}; WebGym rubric: one fact, {rubric_fact('<the task>')!r}.", "",
          "| | " + " | ".join(tables) + " |", "|---|" + "---|" * len(tables)]
    md += [f"| {k} | " + " | ".join(tables[j][k] for j in tables) + " |" for k in keys]
    md += [f"| judging time | " + " | ".join(f"{seconds[j] / 60:.1f} min" for j in tables) + " |", ""]
    for kind, rows in results.items():
        md += [f"## {kind}: the first verdicts", ""]
        for r in rows[:4]:
            for c in r["calls"]:
                md += [f"- {r['task_id']} seed {r['seed']} (rule {'success' if r['rule'] else 'failure'}), "
                       f"{c['purpose']}: `{c['text'][:300]!r}`"]
        md += [""]
    (out / "report.md").write_text("\n".join(md))
    print(f"report: {out / 'report.md'}")
    return {"tables": tables, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", action="append", required=True, help="trajectory JSONL with rule outcomes; repeatable")
    ap.add_argument("--model", default="", help="the judge's HF directory (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--per_file", type=int, default=40, help="page-ended episodes drawn per file (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max_new_tokens", type=int, default=96)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--max_len", type=int, default=4096)
    ap.add_argument("--out", default="runs/judges_pretrained")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
