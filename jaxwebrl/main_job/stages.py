"""An online run from a config (`data.kind='online'`), in stages that each resume where they stopped:

1. `bc.enabled`: the suite's scripted solvers play the training instances in real Chromium; their successful
   episodes become demonstrations in the agent's own prompt format; a BPE tokenizer is trained on them; a
   small model (`model.shape`) is initialised (`<workdir>/policy_init`, the "random" policy) and behaviour-
   cloned by SFT (`<workdir>/bc`). With `model.pretrained` the pretrained checkpoint is the start instead:
   the demonstrations are rendered with its own tokenizer and chat template, and it is the "base (zero-shot)"
   policy of the report.
2. RL: `rl.iterations` of the recipe's online loop from the BC policy or from `model` (`<workdir>/rl`),
   checkpointed after every iteration and resumed from the last one.
3. `report.enabled`: greedy evaluation of random (or base) / BC / RL on held-out seeds (and held-out tasks if
   named), then on `report.held_out_tasks` (tasks never demonstrated nor trained on), and the run report
   (`jaxwebrl.evaluation.report.write_run_report`).

Stages 1 and 2 are sources of the one training loop (`jaxwebrl.train.loop.fit`).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.pipeline import DataIterator, PipelineConfig, make_dataset, trajectory_files_dataset
from jaxwebrl.data.records import write_jsonl
from jaxwebrl.demos.collect import collect_demonstrations, demo_texts, render_demonstrations
from jaxwebrl.evaluation import provenance
from jaxwebrl.evaluation.evaluate import EvalReport, evaluate
from jaxwebrl.evaluation.report import write_run_report
from jaxwebrl.fields import with_changes
from jaxwebrl.main_job.online import ROLLOUTS, OnlineRL, run_engine_config
from jaxwebrl.main_job.stage_clock import StageClock
from jaxwebrl.main_job.vl_bc import init_vl_policy, vl_demonstration_batches
from jaxwebrl.models import export_hf, init_params
from jaxwebrl.models.tokenizer import train_tokenizer
from jaxwebrl.models.vl_or_text import load_tokenizer_or_processor
from jaxwebrl.rollout.suites import get_solvers, get_suite, make_suite, split_tasks
from jaxwebrl.train.checkpoint import has_checkpoint
from jaxwebrl.train.loop import BatchSource, fit, run_fit
from jaxwebrl.train.trainer import Trainer

if TYPE_CHECKING:  # the run config composes this package's sections, so only its type is named here
    from jaxwebrl.config import RunConfig

DEMONSTRATIONS_FILE = "demonstrations.jsonl"  # in the workdir: what BC trains on and RL replays
BASE_POLICY = "base (zero-shot)"  # the report's name for a pretrained start evaluated before any training
DEMONSTRATION_TIMEOUTS = "demonstrations_timeouts.json"  # beside it: demonstration episodes a time limit ended
SUMMARY = "summary.json"  # in the workdir: what the run produced and where it ran (scripts/results_tables.py)


def log(msg: str) -> None:
    print(f"[jaxwebrl] {msg}", flush=True)


# ---- stage 1: behaviour cloning --------------------------------------------------------------------


def demonstrated_task_ids(run: RunConfig, train_ids: list[str]) -> list[str]:
    """The training tasks the scripted solvers demonstrate: `bc.tasks`, or every one that has a solver. The
    others have no demonstrations: BC meets them first at evaluation and RL learns them from reward alone."""
    solvers = get_solvers(run.tasks.suite)
    solvable = tuple(getattr(solvers, "SOLVABLE", ()))
    prefix = f"{run.tasks.suite}."
    named = [t if "." in t else prefix + t for t in run.bc.task_names]
    if not named:
        return [t for t in train_ids if t.split(".", 1)[-1] in solvable]
    for t in named:
        if t not in train_ids:
            raise ValueError(f"bc.tasks names {t!r}, which is not among the run's tasks (tasks.train): add it there "
                             f"or drop it from bc.tasks")
        if t.split(".", 1)[-1] not in solvable:
            raise ValueError(f"bc.tasks names {t!r}, which has no scripted solver (the {run.tasks.suite} solvers have "
                             f"{', '.join(solvable) or 'none'}): drop it from bc.tasks and RL learns it from reward alone")
    return named


async def _collect_demonstrations(run: RunConfig) -> list[Any]:
    solvers = get_solvers(run.tasks.suite)
    if solvers is None:
        raise ValueError(f"bc.enabled=True but suite {run.tasks.suite!r} has no scripted solvers (a `jaxwebrl.solvers` "
                         "entry point): set bc.enabled=False or train from demonstration files (data.kind='sft')")
    suite = make_suite(run)
    try:
        train_tasks, _, _, _ = split_tasks(suite, run)
        wanted = demonstrated_task_ids(run, [t.task_id for t in train_tasks])
        if not wanted:
            raise ValueError(f"none of the run's tasks ({run.tasks.train or 'the train split'}) has a scripted solver, "
                             "so there is nothing to behaviour-clone: add solvable tasks or set bc.enabled=False")
        train_tasks = [t for t in train_tasks if t.task_id in wanted]
        seeds = suite.seeds("train", run.bc.demonstration_seeds)
        env_cfg, pool_cfg = run.browser_env(), run.env.pool_config()
        bar = tqdm(total=len(train_tasks) * len(seeds), desc="demonstrations", unit="ep", disable=not run.log.progress)
        async with BrowserPool(pool_cfg, env_cfg) as pool:
            played = await collect_demonstrations(pool, env_cfg, train_tasks, seeds, solvers.plan, run.agent.prompt_format,
                                                  concurrency=pool_cfg.capacity, on_done=lambda: bar.update(1),
                                                  only_successful=False, rationale=run.bc.rationale,
                                                  rationale_form=run.bc.rationale_form)
        bar.close()
        failed = [d for d in played if d.error and d.error.startswith("reset failed")]
        if failed:
            log(f"{len(failed)} of {len(played)} demonstration episodes could not load their page (first: "
                f"{failed[0].task_id} seed {failed[0].seed}: {failed[0].error[:200]}); they are left out")
        replayed = [d for d in played if d.earlier_errors]
        if replayed:
            log(f"{len(replayed)} demonstration episodes were played again after a failed play "
                f"({sum(d.success for d in replayed)} then succeeded; first: {replayed[0].task_id} seed "
                f"{replayed[0].seed}: {replayed[0].earlier_errors[0][:200]})")
        errors = [e for d in played for e in (*d.earlier_errors, d.error) if e]
        timed_out = sum(e.startswith("timeout") or "Timeout" in e for e in errors)
        (Path(run.workdir) / DEMONSTRATION_TIMEOUTS).write_text(json.dumps({"episode": timed_out}))
        return [d for d in played if d.success]
    finally:
        suite.stop()


def initial_policy_dir(run: RunConfig) -> Path:
    """The policy BC starts from: the pretrained checkpoint (`model.pretrained`, resolved) or the model built
    here from scratch (`<workdir>/policy_init`)."""
    if run.model.pretrained:
        if not run.model.path:
            raise ValueError("model.pretrained is not resolved to its checkpoint; run the config through "
                             "jaxwebrl.main.train or jaxwebrl.config.resolve_pretrained first")
        return Path(run.model.path)
    return Path(run.workdir) / "policy_init"


def behaviour_cloning(run: RunConfig, clock: StageClock | None = None) -> str:
    """Demonstrations -> tokenizer -> initial model (or the pretrained one) -> SFT. Returns the BC policy's HF
    directory. `clock` times the demonstrations' collection as its own stage."""
    work = Path(run.workdir)
    init_dir, bc_dir, demo_file = initial_policy_dir(run), work / "bc", work / DEMONSTRATIONS_FILE
    final = bc_dir / "hf"
    if (final / "config.json").exists():
        log(f"BC policy found at {final}; skipping behaviour cloning")
        return str(final)
    if not demo_file.exists() or not (init_dir / "config.json").exists():
        if clock is not None:
            clock.now_in("demonstrations")
        t0 = time.time()
        demos = asyncio.run(_collect_demonstrations(run))
        if not demos:
            raise RuntimeError("the scripted solvers produced no successful demonstration; check tasks.train")
        if run.model.pretrained:  # its own tokenizer and chat template render the demonstrations
            tok = load_tokenizer_or_processor(str(init_dir))
        elif run.model.vision:  # a vision-language policy: tokenizer + processor + Qwen3-VL params (main_job.vl_bc)
            tok = init_vl_policy(run, demo_texts(demos, run.agent), init_dir)
        else:
            tok = train_tokenizer(demo_texts(demos, run.agent), vocab_size=run.bc.vocab_size, out_dir=init_dir)
            eos = tok.convert_tokens_to_ids("<|im_end|>")
            model_cfg = run.model.model_config().replace(vocab_size=run.bc.vocab_size, eos_token_id=eos,
                                                         pad_token_id=tok.pad_token_id)
            export_hf(model_cfg, init_params(model_cfg, jax.random.key(run.seed)), init_dir, tokenizer_dir=init_dir)
        trajs = render_demonstrations(demos, tok, run.agent)
        write_jsonl(demo_file, trajs)
        lengths = [len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) for t in trajs]
        log(f"{len(trajs)} demonstrations in {time.time() - t0:.0f}s; tokens per demo: median "
            f"{int(np.median(lengths))}, max {max(lengths)}")
        if clock is not None:
            clock.lap("demonstrations")
            clock.now_in("bc")
    seq_len = run.bc.seq_len or run.train.seq_len
    if not run.model.vision:
        source = trajectory_files_dataset([str(demo_file)], run.data.per, "token_mean", run.bc.context_loss_weight)
        longest = max(len(s) for s in source)
        if longest > seq_len:  # packing would cut the response off the end of the longest samples
            raise ValueError(f"bc.seq_len={seq_len} is shorter than the longest demonstration sample ({longest} tokens): "
                             f"set bc.seq_len to at least {longest}")
    ckpt = bc_dir / "checkpoints"
    sft = with_changes(run, **{
        "loss.kind": "sft", "loss.beta": 0.0, "optim.lr": run.bc.lr, "optim.schedule": "warmup_cosine",
        "optim.warmup_ratio": 0.05, "optim.warmup_steps": 0, "optim.max_grad_norm": 1.0,  # RL's warmup is not BC's
        "train.steps": run.bc.steps, "train.seq_len": seq_len, "train.micro_batch": run.bc.micro_batch,
        "train.accum_steps": 1, "model.source": "hf", "model.path": str(init_dir), "model.vision": {},
        "model.pretrained": "",
        "checkpoint.dir": str(ckpt), "checkpoint.resume": has_checkpoint(str(ckpt)), "log.dir": str(bc_dir / "logs"),
        "data.norm": "token_mean",
        "train.logits_chunk": run.train.logits_chunk if run.train.logits_chunk and seq_len % run.train.logits_chunk == 0 else 0})
    trainer = Trainer(sft, total_steps=run.bc.steps)
    if run.model.vision:  # one sample per row with its screenshots
        it: Any = vl_demonstration_batches(run, trainer, demo_file, seq_len)
    else:
        it = DataIterator(make_dataset(source, PipelineConfig(seq_len=seq_len, rows=trainer.rows, seed=run.seed, mode="pack")))
    trainer.attach_data(it)
    run_fit(trainer, BatchSource(it, name="behaviour cloning", log_prefix="bc"), run.bc.steps,
            progress=run.log.progress, save_every=run.checkpoint.every)
    trainer.export(str(final))
    trainer.close()
    return str(final)


# ---- stage 2: RL -------------------------------------------------------------------------------------


def reinforcement_learning(run: RunConfig, start_dir: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The recipe's online loop; returns the final policy's HF dir and the per-iteration history."""
    rl_dir = Path(run.workdir) / "rl"
    ckpt = rl_dir / "checkpoints"
    changes: dict[str, Any] = {"checkpoint.dir": str(ckpt), "log.dir": str(rl_dir / "logs"),
                               "checkpoint.resume": has_checkpoint(str(ckpt))}
    if start_dir:
        changes.update({"model.source": "hf", "model.path": start_dir, "model.vision": {}, "model.pretrained": ""})
    demo_file = Path(run.workdir) / DEMONSTRATIONS_FILE
    if run.rl.mixes_demonstrations and not run.rl.demonstrations_file and run.bc.enabled and demo_file.exists():
        changes["rl.demonstrations_file"] = str(demo_file)
    rl_run = with_changes(run, **changes)
    trainer = Trainer(rl_run, total_steps=max(1, run.rl.iterations * run.train.epochs * 4))
    if rl_run.checkpoint.resume:
        log(f"resuming RL from step {trainer.step} in {ckpt}")
    rl_dir.mkdir(parents=True, exist_ok=True)

    async def loop() -> list[dict[str, Any]]:
        async with OnlineRL(rl_run, trainer, rl_dir / "history.jsonl") as rl:
            await fit(trainer, rl, run.rl.iterations, progress=run.log.progress, log_every=run.log.every)
            return rl.history

    history = asyncio.run(loop())
    final = trainer.export(str(rl_dir / "hf"))
    trainer.close()
    return final, history


# ---- stage 3: evaluation ------------------------------------------------------------------------------


def held_out_task_run(run: RunConfig) -> RunConfig:
    """`run` evaluating `report.held_out_tasks` (its suite holds those tasks only)."""
    return with_changes(run, **{"tasks.train": run.report.held_out_tasks, "tasks.eval": ""})


def check_held_out_tasks(run: RunConfig) -> None:
    """`report.held_out_tasks` names tasks of the run's suite that the run neither demonstrates nor trains on."""
    held = run.report.held_out_task_names
    if not held:
        return
    prefix = f"{run.tasks.suite}."
    bare = {t.removeprefix(prefix) for t in held}
    trained = {t.removeprefix(prefix) for t in run.tasks.train_names}
    if not trained:
        raise ValueError("report.held_out_tasks needs the run's tasks named (tasks.train), so that they can be kept "
                         "apart from the held-out ones")
    if bare & trained:
        raise ValueError(f"report.held_out_tasks {sorted(bare & trained)} are also training tasks (tasks.train): a "
                         "held-out task is never demonstrated nor trained on; drop them from one of the two")
    get_suite(run.tasks.suite, tasks=sorted(bare))  # an unknown task name stops the run here, not after training


async def evaluate_checkpoints(run: RunConfig, policies: dict[str, str], eval_seeds: int) -> dict[str, EvalReport]:
    """Greedy evaluation of HF policy directories on the run's held-out tasks and `eval_seeds` test seeds."""
    from jaxwebrl.engines.jax_engine import JaxEngine  # imported when used: it registers a JAX compile listener

    suite = make_suite(run)
    reports = {}
    try:
        _, _, eval_tasks, _ = split_tasks(suite, run)
        seeds = suite.seeds("test", eval_seeds)
        env_cfg, pool_cfg = run.browser_env(), run.env.pool_config()
        async with BrowserPool(pool_cfg, env_cfg) as pool:
            for name, path in policies.items():
                tokenizer = load_tokenizer_or_processor(path)  # a VL policy's processor renders the screenshots
                engine = JaxEngine.from_checkpoint(path, **run_engine_config(run).jax_kwargs(),
                                                   tokenizer=tokenizer)
                bar = tqdm(total=len(eval_tasks) * len(seeds), desc=f"evaluate {name}", unit="ep",
                           disable=not run.log.progress)
                try:
                    t0 = time.time()
                    reports[name] = await evaluate(engine, tokenizer, pool, env_cfg, eval_tasks, seeds, run.agent,
                                                   concurrency=pool_cfg.capacity, on_done=lambda: bar.update(1))
                    log(f"eval {name}: success {reports[name].success_rate:.1%} over {reports[name].episodes} "
                        f"episodes ({time.time() - t0:.0f}s)")
                finally:
                    bar.close()
                    await engine.close()
    finally:
        suite.stop()
    return reports


def save_episodes(out: Path, reports: dict[str, EvalReport]) -> None:
    """Every evaluated episode of each policy, with its rule outcome (`metadata['success']`), as trajectory
    JSONL in `out/<policy>.jsonl`: what a judge is checked against afterwards (studies/judges_pretrained.py)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, report in reports.items():
        write_jsonl(out / f"{episode_file_name(name)}.jsonl", report.trajectories)


def episode_file_name(policy: str) -> str:
    """'base (zero-shot)' -> 'base_zero-shot'."""
    return "_".join("".join(c if c.isalnum() or c == "-" else " " for c in policy).split())


def run_timeouts(work: Path, history: list[dict[str, Any]], reports: dict[str, EvalReport]) -> dict[str, dict[str, int]]:
    """Every safety-limit timeout that fired in the run, by stage and kind: demonstrations, RL rollouts (all
    iterations, resumed segments included), evaluation. Empty dicts when none fired."""
    demo_file = work / DEMONSTRATION_TIMEOUTS
    demos = {k: v for k, v in json.loads(demo_file.read_text()).items() if v} if demo_file.exists() else {}
    rl: dict[str, int] = {}
    for record in history:
        for key, value in record["metrics"].items():
            if key.startswith("timeouts/") and value:
                rl[key.split("/", 1)[1]] = rl.get(key.split("/", 1)[1], 0) + int(value)
    evals: dict[str, int] = {}
    for report in reports.values():
        for kind, n in report.timeouts.items():
            evals[kind] = evals.get(kind, 0) + n
    return {"demonstrations": demos, "rl": rl, "eval": evals}


def run_main_job(run: RunConfig) -> dict[str, Any]:
    """Stages 1-3 per the config; returns a summary dict (also written to <workdir>/summary.json): what the
    run produced, its seed and schedule, every timeout that fired, and where and when it ran (commit, date,
    command, machine load at start and end; `jaxwebrl.evaluation.provenance`)."""
    work = Path(run.workdir)
    work.mkdir(parents=True, exist_ok=True)
    started = provenance.run_start()
    if run.model.pretrained:  # which bits the run started from: the conversion runs on each machine
        from jaxwebrl.models.pretrained import conversion_record

        started["base_model"] = {"name": run.model.pretrained, **conversion_record(initial_policy_dir(run))}
    if run.report.enabled:
        check_held_out_tasks(run)
    with StageClock(work) as clock:
        return _run_stages(run, work, started, clock)


def _run_stages(run: RunConfig, work: Path, started: dict[str, Any], clock: StageClock) -> dict[str, Any]:
    """`run_main_job`'s stages, each timed by `clock` while it runs."""
    clock.now_in("bc")
    start = behaviour_cloning(run, clock) if run.bc.enabled else None
    t_bc = clock.lap("bc")
    clock.now_in("rl")
    if run.rl.iterations == 0 and start:  # an SFT paper config's local variant: BC is the whole training
        final, history = start, []
    else:
        final, history = reinforcement_learning(run, start)
    t_rl = clock.lap("rl")
    summary: dict[str, Any] = {"final_policy": final, "iterations": len(history), "bc_s": t_bc, "rl_s": t_rl,
                               "seed": run.seed, "schedule": run.rl.schedule, "recipe": run.recipe,
                               "tasks": run.tasks.train, "eval_seeds": run.report.eval_seeds}
    reports: dict[str, EvalReport] = {}
    held_out: dict[str, EvalReport] = {}
    if run.report.enabled:
        first = BASE_POLICY if run.model.pretrained else "random"
        policies = {first: str(initial_policy_dir(run)), "BC": start, "RL": final} if start else {"RL": final}
        if not start and run.model.pretrained:
            policies = {BASE_POLICY: run.model.path, "RL": final}
        if not history and start:
            del policies["RL"]
        clock.now_in("eval")
        reports = asyncio.run(evaluate_checkpoints(run, policies, run.report.eval_seeds))
        summary["eval"] = {k: r.to_dict() for k, r in reports.items()}
        save_episodes(work / "episodes", reports)
        clock.lap("eval")
        if run.report.held_out_task_names:
            clock.now_in("eval_held_out")
            held_out = asyncio.run(evaluate_checkpoints(held_out_task_run(run), policies, run.report.eval_seeds))
            summary["held_out_eval"] = {k: r.to_dict() for k, r in held_out.items()}
            save_episodes(work / "episodes" / "held_out_tasks", held_out)
            clock.lap("eval_held_out")
        summary["stage_s"] = dict(clock.seconds)
        summary["wall_s"] = sum(clock.seconds.values())
    summary["timeouts"] = run_timeouts(work, history, reports)
    summary["provenance"] = provenance.run_end(started)
    if run.report.enabled:
        path = write_run_report(run, work, reports, history, clock.seconds, final,
                                work / DEMONSTRATIONS_FILE if start else None, held_out=held_out, summary=summary,
                                rollouts=work / "rl" / ROLLOUTS)
        log(f"report: {path}")
    (work / SUMMARY).write_text(json.dumps(summary, indent=2, default=str))
    return summary
