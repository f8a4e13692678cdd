"""An online run from a config (`data.kind='online'`), in stages that each resume where they stopped:

1. `bc.enabled`: scripted solvers play the training instances in real Chromium; their successful episodes
   become demonstrations in the agent's own prompt format; a BPE tokenizer is trained on them; a small
   model (config.model.shape) is initialised (`<workdir>/policy_init`, the "random" policy) and behaviour-
   cloned by SFT through the Grain pipeline (`<workdir>/bc`).
2. RL (`rl.iterations` of the recipe's online loop) from the BC policy or from config.model
   (`<workdir>/rl`), checkpointed after every iteration and resumed from the last one.
3. `report.enabled`: greedy evaluation of random / BC / RL on held-out seeds (and held-out tasks if
   named), `report.md` with a per-task table and 95% intervals, PNG plots, the final HF export loaded back
   with `transformers` to show it generates.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import ml_collections
import numpy as np
from tqdm.auto import tqdm

from jaxwebrl.models import export_hf, init_params, load_tokenizer
from jaxwebrl.models.tokenizer import train_tokenizer
from jaxwebrl.train.config import model_config_from


def _stage_config(cfg: ml_collections.ConfigDict, **changes: Any) -> ml_collections.ConfigDict:
    """A copy of `cfg` with dotted fields changed (e.g. {'loss.kind': 'sft'})."""
    out = ml_collections.ConfigDict(cfg.to_dict())
    for dotted, value in changes.items():
        node = out
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return out


def _log(msg: str) -> None:
    print(f"[jaxwebrl] {msg}", flush=True)


# ---- stage 1: behaviour cloning --------------------------------------------------------------------


DEMO_FILE = "bc_demos.jsonl"  # in the workdir: the solvers' demonstrations BC trains on and RL replays


def demo_task_ids(cfg: ml_collections.ConfigDict, train_ids: list[str]) -> list[str]:
    """The training tasks the scripted solvers demonstrate: `bc.tasks`, or every one that has a solver. The
    others have no demonstrations: BC meets them first at evaluation and RL learns them from reward alone."""
    from envs.miniwob_solvers import SOLVABLE
    from jaxwebrl.recipes.online import comma_list

    named = [t if "." in t else f"miniwob.{t}" for t in comma_list(cfg.bc.tasks)]
    if not named:
        return [t for t in train_ids if t.split(".", 1)[-1] in SOLVABLE]
    for t in named:
        if t not in train_ids:
            raise ValueError(f"bc.tasks names {t!r}, which is not among the run's tasks (env.tasks): add it there "
                             f"or drop it from bc.tasks")
        if t.split(".", 1)[-1] not in SOLVABLE:
            raise ValueError(f"bc.tasks names {t!r}, which has no scripted solver (envs/miniwob_solvers.py has "
                             f"{', '.join(SOLVABLE)}): drop it from bc.tasks and RL learns it from reward alone")
    return named


async def _collect_demos(cfg: ml_collections.ConfigDict) -> list[Any]:
    from envs.miniwob_solvers import plan
    from jaxwebrl.browser.config import PoolConfig
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.recipes.demos import collect_demonstrations
    from jaxwebrl.recipes.online import env_config_from, make_suite, split_tasks

    suite = make_suite(cfg)
    try:
        train_tasks, _, _, _ = split_tasks(suite, cfg)
        wanted = demo_task_ids(cfg, [t.task_id for t in train_tasks])
        if not wanted:
            raise ValueError(f"none of the run's tasks ({cfg.env.tasks or 'the train split'}) has a scripted solver, "
                             "so there is nothing to behaviour-clone: add solvable tasks or set bc.enabled=False")
        train_tasks = [t for t in train_tasks if t.task_id in wanted]
        seeds = suite.seeds("train", int(cfg.bc.demo_seeds))
        env_cfg = env_config_from(cfg)
        pool_cfg = PoolConfig(num_browsers=int(cfg.env.num_browsers), contexts_per_browser=int(cfg.env.contexts_per_browser))
        bar = tqdm(total=len(train_tasks) * len(seeds), desc="demonstrations", unit="ep", disable=not cfg.log.progress)
        async with BrowserPool(pool_cfg, env_cfg) as pool:
            demos = await collect_demonstrations(pool, env_cfg, train_tasks, seeds, plan, cfg.agent.prompt_format,
                                                 concurrency=pool_cfg.capacity, on_done=lambda: bar.update(1))
        bar.close()
        return demos
    finally:
        suite.stop()


def behaviour_cloning(cfg: ml_collections.ConfigDict) -> str:
    """Demonstrations -> tokenizer -> initial model -> SFT. Returns the BC policy's HF directory."""
    from jaxwebrl.data.pipeline import DataIterator, PipelineConfig, make_dataset, trajectory_files_dataset
    from jaxwebrl.data.records import write_jsonl
    from jaxwebrl.recipes.demos import demo_texts, render_demonstrations
    from jaxwebrl.recipes.online import agent_config_from
    from jaxwebrl.train.trainer import Trainer

    work = Path(cfg.workdir)
    init_dir, bc_dir, demo_file = work / "policy_init", work / "bc", work / DEMO_FILE
    final = bc_dir / "hf"
    if (final / "config.json").exists():
        _log(f"BC policy found at {final}; skipping behaviour cloning")
        return str(final)
    if not demo_file.exists() or not (init_dir / "config.json").exists():
        t0 = time.time()
        demos = asyncio.run(_collect_demos(cfg))
        if not demos:
            raise RuntimeError("the scripted solvers produced no successful demonstration; check env.tasks")
        agent = agent_config_from(cfg)
        tok = train_tokenizer(demo_texts(demos, agent), vocab_size=int(cfg.bc.vocab_size), out_dir=init_dir)
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        model_cfg = model_config_from(cfg).replace(vocab_size=int(cfg.bc.vocab_size), eos_token_id=eos,
                                                   pad_token_id=tok.pad_token_id)
        export_hf(model_cfg, init_params(model_cfg, jax.random.key(int(cfg.seed))), init_dir, tokenizer_dir=init_dir)
        trajs = render_demonstrations(demos, tok, agent)
        write_jsonl(demo_file, trajs)
        lengths = [len(t.turns[-1].prompt_ids) + len(t.turns[-1].response_ids) for t in trajs]
        _log(f"{len(trajs)} demonstrations in {time.time() - t0:.0f}s; tokens per demo: median "
             f"{int(np.median(lengths))}, max {max(lengths)}")
    seq_len = int(cfg.bc.seq_len) or int(cfg.train.seq_len)
    source = trajectory_files_dataset([str(demo_file)], cfg.data.per, "token_mean", float(cfg.bc.context_loss_weight))
    longest = max(len(s) for s in source)
    if longest > seq_len:  # packing would cut the response off the end of the longest samples
        raise ValueError(f"bc.seq_len={seq_len} is shorter than the longest demonstration sample ({longest} tokens): "
                         f"set bc.seq_len to at least {longest}")
    sft = _stage_config(
        cfg, **{"loss.kind": "sft", "optim.lr": float(cfg.bc.lr), "train.steps": int(cfg.bc.steps), "train.seq_len": seq_len,
                "train.micro_batch": int(cfg.bc.micro_batch), "train.accum_steps": 1, "model.source": "hf",
                "model.path": str(init_dir), "checkpoint.dir": str(bc_dir / "checkpoints"), "log.dir": str(bc_dir / "logs"),
                "data.norm": "token_mean", "optim.schedule": "warmup_cosine", "optim.warmup_ratio": 0.05,
                "optim.warmup_steps": 0, "optim.max_grad_norm": 1.0, "loss.beta": 0.0})  # RL's warmup is not BC's
    sft.checkpoint.resume = os.path.isdir(sft.checkpoint.dir) and any(n.isdigit() for n in os.listdir(sft.checkpoint.dir))
    trainer = Trainer(sft, total_steps=int(cfg.bc.steps))
    pipe = PipelineConfig(seq_len=seq_len, rows=trainer.rows, seed=int(cfg.seed), mode="pack")
    it = DataIterator(make_dataset(source, pipe))
    trainer.attach_data(it)
    bar = tqdm(range(trainer.step, int(cfg.bc.steps)), initial=trainer.step, total=int(cfg.bc.steps),
               desc="behaviour cloning", unit="step", disable=not cfg.log.progress)
    for _ in bar:
        m = trainer.train_on_batch(next(it))
        trainer.log(m, prefix="bc")
        bar.set_postfix(loss=f"{m['loss']:.4f}")
        trainer.maybe_save()
    trainer.save(force=True)
    trainer.export(str(final))
    trainer.close()
    return str(final)


# ---- stage 2: RL -------------------------------------------------------------------------------------


async def _rl(cfg: ml_collections.ConfigDict, trainer: Any, history_file: Path) -> list[dict[str, Any]]:
    from jaxwebrl.recipes.online import OnlineRL

    history = [json.loads(line) for line in history_file.read_text().splitlines()] if history_file.exists() else []
    # The checkpoint says how many iterations its state includes; a record written after it (the process
    # died before the next save) is dropped and that iteration runs again.
    history = history[: int(trainer.run_meta.get("rl_iterations", 0))]
    history_file.write_text("".join(json.dumps(r) + "\n" for r in history))
    async with OnlineRL(cfg, trainer) as rl:
        n = int(cfg.rl.iterations)
        bar = tqdm(range(len(history), n), initial=len(history), total=n, desc=f"{cfg.recipe} RL", unit="iter",
                   disable=not cfg.log.progress)
        for it in bar:
            log = await rl.iteration(it)
            record = {"iteration": log.iteration, "metrics": log.metrics, "eval": log.eval}
            history.append(record)
            with history_file.open("a") as f:
                f.write(json.dumps(record) + "\n")
            trainer.run_meta["rl_iterations"] = it + 1
            trainer.save(force=True)
            bar.set_postfix(success=f"{log.metrics.get('rollout/success_rate', 0):.2f}",
                            loss=f"{log.metrics.get('train/loss', float('nan')):.3f}")
    return history


def reinforcement_learning(cfg: ml_collections.ConfigDict, start_dir: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The recipe's online loop; returns the final policy's HF dir and the per-iteration history."""
    from jaxwebrl.train.trainer import Trainer

    rl_dir = Path(cfg.workdir) / "rl"
    changes: dict[str, Any] = {"checkpoint.dir": str(rl_dir / "checkpoints"), "log.dir": str(rl_dir / "logs")}
    if start_dir:
        changes.update({"model.source": "hf", "model.path": start_dir})
    demo_file = Path(cfg.workdir) / DEMO_FILE
    if int(cfg.rl.demo_replay) > 0 and not cfg.rl.demo_file and bool(cfg.bc.enabled) and demo_file.exists():
        changes["rl.demo_file"] = str(demo_file)
    rl_cfg = _stage_config(cfg, **changes)
    ck = rl_cfg.checkpoint.dir
    rl_cfg.checkpoint.resume = os.path.isdir(ck) and any(n.isdigit() for n in os.listdir(ck))
    iters = int(cfg.rl.iterations)
    trainer = Trainer(rl_cfg, total_steps=max(1, iters * int(cfg.train.epochs) * 4))
    if rl_cfg.checkpoint.resume:
        _log(f"resuming RL from step {trainer.step} in {ck}")
    rl_dir.mkdir(parents=True, exist_ok=True)
    history = asyncio.run(_rl(rl_cfg, trainer, rl_dir / "history.jsonl"))
    final = trainer.export(str(rl_dir / "hf"))
    trainer.close()
    return final, history


# ---- stage 3: report ---------------------------------------------------------------------------------


async def evaluate_checkpoints(cfg: ml_collections.ConfigDict, policies: dict[str, str], eval_seeds: int) -> dict[str, Any]:
    """Greedy evaluation of HF policy directories on the config's held-out tasks and `eval_seeds` test seeds."""
    from jaxwebrl.browser.config import PoolConfig
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.recipes.evaluate import evaluate
    from jaxwebrl.recipes.online import agent_config_from, env_config_from, make_suite, split_tasks

    suite = make_suite(cfg)
    reports = {}
    try:
        _, _, eval_tasks, _ = split_tasks(suite, cfg)
        seeds = suite.seeds("test", eval_seeds)
        env_cfg = env_config_from(cfg)
        pool_cfg = PoolConfig(num_browsers=int(cfg.env.num_browsers), contexts_per_browser=int(cfg.env.contexts_per_browser))
        async with BrowserPool(pool_cfg, env_cfg) as pool:
            for name, path in policies.items():
                tokenizer = load_tokenizer(path)
                engine = JaxEngine.from_checkpoint(path, num_slots=int(cfg.engine.num_slots), max_len=int(cfg.engine.max_len),
                                                   tokenizer=tokenizer)
                bar = tqdm(total=len(eval_tasks) * len(seeds), desc=f"evaluate {name}", unit="ep",
                           disable=not cfg.log.progress)
                try:
                    t0 = time.time()
                    reports[name] = await evaluate(engine, tokenizer, pool, env_cfg, eval_tasks, seeds,
                                                   agent_config_from(cfg), concurrency=pool_cfg.capacity,
                                                   on_done=lambda: bar.update(1))
                    _log(f"eval {name}: success {reports[name].success_rate:.1%} over {reports[name].episodes} "
                         f"episodes ({time.time() - t0:.0f}s)")
                finally:
                    bar.close()
                    await engine.close()
    finally:
        suite.stop()
    return reports


def transformers_check(path: str) -> str:
    """Load the exported policy with transformers and generate greedily: the proof the export is usable."""
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prompt = tok.apply_chat_template([{"role": "user", "content": 'Task: Click on the "OK" button.'}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    return (f"`transformers.AutoModelForCausalLM.from_pretrained({path!r})` loaded "
            f"{sum(p.numel() for p in model.parameters()):,} parameters ({type(model).__name__}); greedy "
            f"`generate` on a chat prompt returned: `{text!r}`")


class StageClock:
    """Seconds spent per stage, summed over every process that worked on this run directory, so a resumed
    run reports its whole wall time (kept in <workdir>/stage_seconds.json)."""

    def __init__(self, work: Path):
        self.path = work / "stage_seconds.json"
        self.seconds: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self._t = time.time()

    def lap(self, stage: str) -> float:
        """Adds the time since the last lap to `stage`; returns the stage's total."""
        now = time.time()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._t
        self._t = now
        self.path.write_text(json.dumps(self.seconds))
        return self.seconds[stage]


def demo_subsets(demo_file: Path, reports: dict[str, Any]) -> dict[str, set[str]] | None:
    """The evaluated tasks split by whether BC had demonstrations of them (None when every task had)."""
    with demo_file.open() as f:
        demonstrated = {json.loads(line)["task_id"] for line in f if line.strip()}
    evaluated = {t for r in reports.values() for t in r.per_task}
    if evaluated <= demonstrated:
        return None
    return {"tasks with demonstrations": evaluated & demonstrated, "tasks without demonstrations": evaluated - demonstrated}


def run_online(cfg: ml_collections.ConfigDict) -> dict[str, Any]:
    """Stages 1-3 per the config; returns a summary dict (also written to <workdir>/summary.json)."""
    work = Path(cfg.workdir)
    work.mkdir(parents=True, exist_ok=True)
    clock = StageClock(work)
    start = behaviour_cloning(cfg) if bool(cfg.bc.enabled) else None
    t_bc = clock.lap("bc")
    final, history = reinforcement_learning(cfg, start)
    t_rl = clock.lap("rl")
    summary: dict[str, Any] = {"final_policy": final, "iterations": len(history), "bc_s": t_bc, "rl_s": t_rl}
    if bool(cfg.report.enabled):
        from jaxwebrl.recipes.report import write_report

        policies = {"random": str(work / "policy_init"), "BC": start, "RL": final} if start else {"RL": final}
        reports = asyncio.run(evaluate_checkpoints(cfg, policies, int(cfg.report.eval_seeds)))
        summary["eval"] = {k: r.to_dict() for k, r in reports.items()}
        t_eval = clock.lap("eval")
        wall = t_bc + t_rl + t_eval
        summary["wall_s"] = wall
        context = f", page tokens trained at weight {cfg.bc.context_loss_weight}" if cfg.bc.context_loss_weight else ""
        replay = f", each batch replaying {cfg.rl.demo_replay} demonstrations" if cfg.rl.demo_replay else ""
        sections = {
            "Run": (f"recipe `{cfg.recipe}`, suite `{cfg.env.suite}`, tasks `{cfg.env.tasks or 'train split'}`; "
                    f"{len(history)} RL iterations x {cfg.rollout.groups_per_iteration} groups of "
                    f"{cfg.rollout.group_size}; wall time {wall / 60:.1f} min (demonstrations + BC {t_bc / 60:.1f}, "
                    f"RL {t_rl / 60:.1f}, evaluation {t_eval / 60:.1f}; summed over resumed segments)."),
            "Policies": (f"random: the freshly initialised model (same tokenizer and size, never trained); BC: "
                         f"{cfg.bc.steps} SFT steps on the scripted solvers' demonstrations "
                         f"({cfg.bc.demo_seeds} training seeds per task{context}); RL: BC plus {len(history)} "
                         f"{cfg.recipe} iterations{replay}. All play the same {cfg.report.eval_seeds} held-out test "
                         "seeds per task with greedy decoding."),
            "Exported policy": transformers_check(final),
            "Logs": f"TensorBoard: `tensorboard --logdir {work}` (bc/logs, rl/logs).",
        }
        subsets = demo_subsets(work / DEMO_FILE, reports) if start else None
        if subsets:
            sections["Policies"] += (" Tasks without demonstrations: "
                                     f"{', '.join(sorted(subsets['tasks without demonstrations']))}; BC meets them "
                                     "first here and RL learns them from reward alone.")
        path = write_report(work, reports, history, sections, subsets=subsets)
        _log(f"report: {path}")
        from jaxwebrl.recipes.report import paired_table, success_table

        print(success_table(reports))
        print(paired_table(reports, subsets))
    (work / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary
