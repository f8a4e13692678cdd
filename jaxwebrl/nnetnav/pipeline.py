"""Run the NNetNav pipeline from a run config + the `nnetnav` section: explore -> relabel -> report.

Outputs in `nnetnav.output_dir` (default `<workdir>/nnetnav`):
  demonstrations.jsonl   accepted (instruction, prefix) pairs, written the moment the ORM accepts them
  dropped.jsonl          prefixes a judge failure dropped, with the reason
  nnetnav_sft.jsonl      per-step SFT data (Trajectory records) for `data.kind='sft'` (configs/sft_nnetnav.py)
  report.json            exploration and relabeling statistics

The driver is `scripts/nnetnav.py --config configs/nnetnav_explore.py` (a script because the `nnetnav`
section is not yet composed into jaxwebrl.config; see that script's doc).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import write_jsonl
from jaxwebrl.judges.backends import EngineBackend, JudgeOptions
from jaxwebrl.nnetnav.config import NNetNavConfig
from jaxwebrl.nnetnav.explore import explore, exploration_report, label_accuracy, write_report
from jaxwebrl.nnetnav.judges import NNetNavJudges
from jaxwebrl.nnetnav.prompts import load_personas
from jaxwebrl.nnetnav.relabel import best_of_k, relabel
from jaxwebrl.nnetnav.store import DemoStore, read_demos

STAGES = ("explore", "relabel")


def judge_options(nn: NNetNavConfig) -> JudgeOptions:
    return JudgeOptions(timeout_s=nn.judge_timeout_s, retries=nn.judge.retries, concurrency=nn.judge.concurrency,
                        max_new_tokens=nn.judge_max_new_tokens, temperature=0.0)


def make_judges(nn: NNetNavConfig, engine: Any, tokenizer: Any, action_space: str) -> NNetNavJudges:
    """The paper's single model (`judge_uses_policy`), else the judge model `nn.judge` describes (jax / sglang /
    openai), shared by summariser, labeler and ORM; then the parts trained here or written by rule replace
    theirs: `summarizer='page_diff'`, `labeler_path` (its own in-process JaxEngine), `judge.kind='verifier'`."""
    from jaxwebrl.judges.config import JudgeConfig, make_backend
    from jaxwebrl.judges.nnetnav import TrajectoryLabeler
    from jaxwebrl.judges.verifier import VerifierJudge
    from jaxwebrl.nnetnav.summary import PageDiffSummarizer

    opts = judge_options(nn)
    backend = (EngineBackend(engine, tokenizer, owns_engine=False) if nn.judge_uses_policy
               else make_backend(nn.judge))
    judges = NNetNavJudges.on(backend, opts, action_space=action_space, pass_score=nn.pass_score)
    if nn.summarizer == "page_diff":
        judges.summarizer = PageDiffSummarizer(action_space)  # type: ignore[assignment]
    if nn.labeler_path:
        labeler = make_backend(JudgeConfig(kind="nnetnav_labeler", engine="jax", model_path=nn.labeler_path,
                                           jax_num_slots=nn.judge.jax_num_slots, jax_max_len=nn.judge.jax_max_len))
        judges.labeler = TrajectoryLabeler(labeler, opts, action_space=action_space)
    if nn.judge.kind == "verifier":
        judges.orm = VerifierJudge(backend, opts, action_space=action_space)  # type: ignore[assignment]
    return judges


async def run_pipeline(run: Any, nn: NNetNavConfig, *, stages: Sequence[str] = STAGES,
                       log: Callable[[str], None] = print) -> dict[str, Any]:
    """`run` is a parsed RunConfig (model via `engine.checkpoint`, suite via `tasks`, browser via `env`, agent
    prompt via `agent`); returns the report (also written to report.json)."""
    from jaxwebrl.engines.factory import make_engine
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.rollout.suites import make_suite

    unknown = set(stages) - set(STAGES)
    if unknown:
        raise ValueError(f"nnetnav stages {sorted(unknown)} are unknown; use {STAGES}")
    if not run.engine.checkpoint:
        raise ValueError("the NNetNav explorer needs a policy: set engine.checkpoint to a HF model directory "
                         "(the local run: the main job's BC policy, e.g. runs/<job>/bc/policy)")
    out_dir = Path(nn.output_dir or os.path.join(run.workdir, "nnetnav"))
    tokenizer = load_tokenizer(run.engine.checkpoint)
    engine = make_engine(run.engine, tokenizer=tokenizer)
    space = run.env.action_space
    judges = make_judges(nn, engine, tokenizer, space)
    store = DemoStore(out_dir)
    report: dict[str, Any] = {}
    try:
        suite = make_suite(run)
        try:
            ids = nn.task_list() or suite.task_ids("train")
            tasks = {t: suite.get_task(t if "." in t else f"{suite.name}.{t}") for t in ids}
            tasks = {task.task_id: task for task in tasks.values()}
            env_cfg, pool_cfg = run.browser_env(), run.env.pool_config()
            async with BrowserPool(pool_cfg, env_cfg) as pool:
                if "explore" in stages:
                    personas = load_personas(nn.personas_file)
                    outcomes = await explore(pool, env_cfg, engine, tokenizer, list(tasks.values()), nn.seed_list(),
                                             run.agent, nn, judges, store, personas=personas,
                                             on_done=lambda o: log(f"explored {o.task_id}@{o.seed}: {o.steps} steps, "
                                                                   f"{o.termination}"))
                    report["explore"] = exploration_report(outcomes, store)
                    log(f"exploration: {report['explore']}")
                if "relabel" in stages:
                    demos = read_demos(store.demos_path) if store.demos_path.exists() else []
                    failures: list[dict[str, Any]] = []
                    trajs = await relabel(demos, engine, tokenizer, run.agent, judges.orm.backend,
                                          temperature=nn.relabel_temperature, options=judge_options(nn),
                                          failures=failures, actions=nn.relabel_actions, append_stop=nn.append_stop)
                    if nn.best_of_k > 1:
                        by_key = {(d.episode_id, d.prune_step): d for d in demos}
                        trajs = [await best_of_k(by_key[(t.metadata["episode_id"], t.metadata["prune_step"])], t,
                                                 nn.best_of_k, pool, env_cfg, tasks, engine, tokenizer, run.agent,
                                                 judges) for t in trajs]
                    path = out_dir / "nnetnav_sft.jsonl"
                    write_jsonl(path, trajs)
                    steps = [t for traj in trajs for t in traj.turns]
                    report["relabel"] = {
                        "demonstrations": len(trajs), "sft_steps": len(steps), "file": str(path),
                        "failed": len(failures), "failures": failures[:20],
                        "format_ok": sum(t.format_ok for t in steps) / max(1, len(steps)),
                        "stop_sources": dict(collections.Counter(t.metadata["stop_source"] for t in trajs)),
                        "best_of_k": dict(collections.Counter(t.metadata["best_of_k"] for t in trajs)),
                    }
                    if any(d.env_goal for d in demos):
                        report["relabel"]["label_accuracy_vs_task_utterance"] = label_accuracy(demos)
                    log(f"relabel: {report['relabel']}")
        finally:
            suite.stop()
    finally:
        await judges.close()
        await engine.close()
    write_report(out_dir / "report.json", report)
    return report


def nnetnav_section(values: dict[str, Any]) -> NNetNavConfig:
    """NNetNavConfig from a plain dict (a config file's `nnetnav` ConfigDict), its `judge` a JudgeConfig."""
    from jaxwebrl.judges.config import JudgeConfig

    values = dict(values)
    if isinstance(values.get("judge"), dict):
        values["judge"] = JudgeConfig(**values["judge"])
    known = {f.name for f in dataclasses.fields(NNetNavConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config.nnetnav has unknown field(s) {unknown}; the fields are {sorted(known)}")
    return NNetNavConfig(**values)
