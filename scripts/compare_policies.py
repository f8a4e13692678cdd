"""Several policies on the same held-out episodes, with paired tests; optionally the judge's agreement with the
rule on runs' rollouts (issue 21 item 5) and extra report sections.

    python scripts/compare_policies.py --config configs/grpo_local.py --out runs/judge_loop \
        --policy random=runs/bc/policy_init --policy BC=runs/bc/bc/hf \
        --policy "RL rule=runs/rl_rule/rl/hf" --policy "RL judge=runs/rl_judge/rl/hf" \
        --demonstrations runs/bc/demonstrations.jsonl --eval_seeds 20 \
        --rollouts "RL judge=runs/rl_judge/rl/rollouts.jsonl" \
        --judge runs/judge/judge_hf --judge_rollouts "RL rule=runs/rl_rule/rl/rollouts.jsonl"

Each policy plays `--eval_seeds` test seeds of every task of the config greedily (the main job's evaluation;
an episode whose page did not load is played again, up to three times); its result is kept in
`<out>/evals/<name>.json` and reused by a rerun (same seeds, same weights), so a policy evaluated once is not
played again. The terminations (env_error left after the retries) are in the report. `--rollouts NAME=FILE`: a run whose rollouts the judge rewarded (agreement
read from the run's own verdicts); `--judge_rollouts NAME=FILE`: rollouts the judge at `--judge` never
rewarded, judged here (the control). `--section TITLE=FILE` adds a markdown file as a section.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from absl import app, flags
from ml_collections import config_flags

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "grpo_local.py"),
                                          "The run config whose tasks, browser and agent settings evaluate.")
_POLICY = flags.DEFINE_multi_string("policy", None, "NAME=HF_DIR; repeatable, in table order.", required=True)
_OUT = flags.DEFINE_string("out", None, "Report directory.", required=True)
_SEEDS = flags.DEFINE_integer("eval_seeds", 20, "Held-out test seeds per task.")
_DEMOS = flags.DEFINE_string("demonstrations", None, "BC's demonstrations.jsonl: split tasks by whether BC saw them.")
_ROLLOUTS = flags.DEFINE_multi_string("rollouts", [], "NAME=rollouts.jsonl of a run rewarded by the judge.")
_JUDGE = flags.DEFINE_string("judge", None, "The trained verifier's HF dir (for --judge_rollouts).")
_JUDGE_ROLLOUTS = flags.DEFINE_multi_string("judge_rollouts", [], "NAME=rollouts.jsonl the judge never rewarded.")
_SECTION = flags.DEFINE_multi_string("section", [], "TITLE=markdown file, added to the report.")
_TITLE = flags.DEFINE_string("title", "Policies on the same held-out episodes", "Report title.")


def _pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise app.UsageError(f"--{flag} {v!r}: write NAME=PATH")
        out[name] = path
    return out


async def evaluate_policies(run, policies: dict[str, str], eval_seeds: int, attempts: int = 3) -> dict:
    """The main job's greedy evaluation of each policy, playing again (up to `attempts` times in all) the
    episodes whose page did not load (env_error): on a loaded machine a page load times out now and then, and
    counting that as the policy's failure would put noise into every paired comparison. An instance that never
    loads stays a failure and is counted in `terminations['env_error']`."""
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.evaluation.evaluate import EvalReport, evaluate
    from jaxwebrl.main_job.online import run_engine_config
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.rollout.suites import make_suite, split_tasks

    suite = make_suite(run)
    reports = {}
    try:
        _, _, tasks, _ = split_tasks(suite, run)
        by_id = {t.task_id: t for t in tasks}
        seeds = suite.seeds("test", eval_seeds)
        env_cfg, pool_cfg = run.browser_env(), run.env.pool_config()
        async with BrowserPool(pool_cfg, env_cfg) as pool:
            for name, path in policies.items():
                tok = load_tokenizer(path)
                # the run's engine settings, deterministic when its schedule is (greedy outcomes then do not
                # depend on the machine's load)
                engine = JaxEngine.from_checkpoint(path, **run_engine_config(run).jax_kwargs(), tokenizer=tok)
                try:
                    report = await evaluate(engine, tok, pool, env_cfg, tasks, seeds, run.agent,
                                            concurrency=pool_cfg.capacity)
                    episodes = {f"{t.task_id}@{t.metadata.get('seed')}": t for t in report.trajectories}
                    for _ in range(attempts - 1):
                        lost = [k for k, t in episodes.items() if t.termination == "env_error"]
                        if not lost:
                            break
                        print(f"{name}: {len(lost)} episodes whose page did not load, played again")
                        for key in lost:
                            task_id, seed = key.rsplit("@", 1)
                            again = await evaluate(engine, tok, pool, env_cfg, [by_id[task_id]], [int(seed)], run.agent)
                            episodes[key] = again.trajectories[0]
                    per_task: dict[str, list[int]] = {}
                    terms: dict[str, int] = {}
                    for key, t in episodes.items():
                        c = per_task.setdefault(t.task_id, [0, 0])
                        c[0] += int(bool(t.metadata.get("success")))
                        c[1] += 1
                        terms[t.termination] = terms.get(t.termination, 0) + 1
                    reports[name] = EvalReport({k: (v[0], v[1]) for k, v in per_task.items()}, terms,
                                               sum(len(t.turns) for t in episodes.values()) / max(1, len(episodes)),
                                               {k: bool(t.metadata.get("success")) for k, t in episodes.items()},
                                               list(episodes.values()))
                    print(f"eval {name}: {reports[name].success_rate:.1%} of {reports[name].episodes} (terminations {terms})")
                finally:
                    await engine.close()
    finally:
        suite.stop()
    return reports


def main(argv: list[str]) -> None:
    del argv
    sys.path.insert(0, ROOT)
    from jaxwebrl.config import apply_variants, command_line_fields, parse_config
    from jaxwebrl.data.records import read_trajectories
    from jaxwebrl.evaluation.evaluate import EvalReport
    from jaxwebrl.evaluation.report import demonstration_subsets, paired_table, success_table, write_report
    from jaxwebrl.judge_training.judge_loop import agreement_section, judge_rollouts, offline_matches_online

    # --config.local=true / --config.quick=true / --config.model.pretrained: the variant's agent and tasks
    run = parse_config(apply_variants(_CONFIG.value, command_line_fields(sys.argv[1:])))
    out = Path(_OUT.value)
    (out / "evals").mkdir(parents=True, exist_ok=True)
    policies = _pairs(_POLICY.value, "policy")
    reports: dict[str, EvalReport] = {}
    todo = {}
    for name, path in policies.items():
        cached = out / "evals" / f"{name.replace('/', '_')}.json"
        if cached.exists():
            d = json.loads(cached.read_text())
            reports[name] = EvalReport({k: (v["successes"], v["episodes"]) for k, v in d["per_task"].items()},
                                       d["terminations"], d["mean_steps"], d["outcomes"])
            print(f"{name}: evaluation reused from {cached}")
        else:
            todo[name] = path
    if todo:
        done = asyncio.run(evaluate_policies(run, todo, int(_SEEDS.value)))
        for name, report in done.items():
            (out / "evals" / f"{name.replace('/', '_')}.json").write_text(json.dumps({**report.to_dict(), "policy": todo[name]}))
            reports[name] = report
    reports = {name: reports[name] for name in policies}
    sections = {"Policies": "\n".join(f"- {n}: `{p}`" for n, p in policies.items())
                + f"\n\nGreedy decoding, {_SEEDS.value} held-out test seeds per task, the same episodes for every policy.",
                "Terminations": "\n".join(f"- {n}: {r.terminations} (mean steps {r.mean_steps:.2f})"
                                           for n, r in reports.items())
                + "\n\nenv_error: the page never loaded in three attempts (counted as a failure)."}
    for name, path in _pairs(_ROLLOUTS.value, "rollouts").items():
        sections[f"Judge vs rule on the rollouts of {name} (rewarded by the judge)"] = agreement_section(
            name, read_trajectories(path))
    control = _pairs(_JUDGE_ROLLOUTS.value, "judge_rollouts")
    if control and not _JUDGE.value:
        raise app.UsageError("--judge_rollouts needs --judge (the verifier's HF dir)")
    for name, path in control.items():
        judged, _ = judge_rollouts(_JUDGE.value, read_trajectories(path), run.env.action_space)
        note = ""
        for rname, rpath in _pairs(_ROLLOUTS.value, "rollouts").items():  # the offline decision = the run's judge?
            own = read_trajectories(rpath)
            same, n = offline_matches_online(own, judge_rollouts(_JUDGE.value, own, run.env.action_space)[0])
            note += (f"\n\nCheck: decided offline the same way, the judge reproduces {same} of {n} verdicts it gave "
                     f"online in {rname}.")
        sections[f"Judge vs rule on the rollouts of {name} (never rewarded by the judge: the control)"] = (
            agreement_section(name, judged) + note)
    for title, path in _pairs(_SECTION.value, "section").items():
        sections[title] = Path(path).read_text()
    subsets = demonstration_subsets(Path(_DEMOS.value), reports) if _DEMOS.value else None
    path = write_report(out, reports, sections=sections, title=_TITLE.value, subsets=subsets)
    print(success_table(reports))
    print(paired_table(reports, subsets))
    print(f"report: {path}")


if __name__ == "__main__":
    app.run(main)
