"""A judge trained here: a small Flax generative verifier that learns the rule evaluator's verdicts.

    python scripts/train_judge.py --config configs/judge_local.py [--config.quick=true]

1. Collect: the main job's BC policy plays the run's MiniWoB++ tasks at temperature (`samples_per_seed`
   episodes per task instance) on training seeds after the ones BC was demonstrated (on those it succeeds
   every time) and on held-out seeds (the suite's test seeds: never in the judge's training data). The rule evaluator labels each episode (success or not).
2. Examples: each episode becomes the OpenWebRL judge prompt (instruction, actions with the environment's
   feedback, the final page), rendered with the judge tokenizer's chat template, and the verdict it should
   write, "SUCCESS" or "NOT SUCCESS" then EOS.
3. Fine-tune: the judge starts from the BC policy's weights (it already reads these pages) and is trained
   with the project's SFT loss on the verdict tokens only, on class-balanced batches.
4. Report: on the held-out episodes, the probability the judge gives the verdict's first token (SUCCESS vs
   NOT) is its score; accuracy, precision, recall and AUC with 95% bootstrap intervals, for the judge before
   and after fine-tuning, beside the majority-class baseline; a calibration plot; the judge exported to
   HuggingFace (`judge_hf/`), usable as `reward.judge.model_path` with `reward.judge.engine='jax'`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from jaxwebrl.data.records import Trajectory, Turn, read_trajectories, write_jsonl
from jaxwebrl.data.samples import build_samples
from jaxwebrl.fields import FieldError, at_least, positive
from jaxwebrl.judges.backends import ChatMessage, render_prompt_ids
from jaxwebrl.judges.base import JudgeInput
from jaxwebrl.judges.metrics import Agreement, agreement, calibration
from jaxwebrl.judges.verifier import VERIFIER_OBSERVATION_CHARS, VERIFIER_OBSERVATIONS, VERIFIER_SYSTEM, VerifierJudge
VERDICT_TEXT = {True: "SUCCESS", False: "NOT SUCCESS"}
EPISODES_FILE = "judge_episodes.jsonl"


@dataclasses.dataclass(frozen=True)
class JudgeTrainingConfig:
    policy: str = "runs/grpo_local/bc/hf"  # the main job's BC policy (HF dir): plays the episodes, starts the judge
    workdir: str = "runs/judge_local"
    train_seeds: int = 12  # training instances per task (the suite's train seeds)
    heldout_seeds: int = 8  # held-out instances per task (the suite's test seeds)
    samples_per_seed: int = 2  # episodes per instance, sampled at `temperature`
    temperature: float = 1.0
    # the judge's prompt: jaxwebrl.judges.VerifierJudge's (reward.judge.kind='verifier' judges with the same)
    system_prompt: str = VERIFIER_SYSTEM
    num_observations: int = VERIFIER_OBSERVATIONS
    max_observation_chars: int = VERIFIER_OBSERVATION_CHARS
    steps: int = 120
    batch: int = 8  # episodes per step, half labelled success, half not (drawn with replacement)
    lr: float = 3e-4
    seq_len: int = 1536
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("train_seeds", "heldout_seeds", "samples_per_seed", "steps", "seq_len", "num_observations"):
            at_least(name, getattr(self, name), 1)
        at_least("batch", self.batch, 2, "use at least 2 (one episode of each label per step)")
        positive("lr", self.lr)
        if self.temperature <= 0:
            raise FieldError("temperature", f"{self.temperature} must be > 0",
                             "sample the BC policy (e.g. 1.0): greedy play gives one episode per instance")


@dataclasses.dataclass
class Example:
    prompt_ids: list[int]
    target_ids: list[int]
    label: bool
    task_id: str
    seed: int


# ---- 1. collect --------------------------------------------------------------------------------------


async def collect(run: Any, cfg: JudgeTrainingConfig, only: set[tuple[str, int]] | None = None) -> list[Trajectory]:
    """The BC policy at `temperature` on train and held-out seeds; `metadata['split']` says which. `only`: play
    just these (task id, seed) instances (a rerun replaying those whose page did not load)."""
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.models import load_tokenizer
    from jaxwebrl.rollout.collector import Collector
    from jaxwebrl.rollout.config import RolloutConfig
    from jaxwebrl.rollout.suites import make_suite

    suite = make_suite(run)
    try:
        tasks = [suite.get_task(t) for t in suite.task_ids("all")]
        # training instances after the BC demonstrations' seeds (the policy memorised those: all successes)
        first = run.bc.demonstration_seeds
        plan = [(t, s, "train") for s in suite.seeds("train", cfg.train_seeds, start=first) for t in tasks]
        plan += [(t, s, "heldout") for s in suite.seeds("test", cfg.heldout_seeds) for t in tasks]
        if only is not None:
            plan = [(t, s, name) for t, s, name in plan if (t.task_id, s) in only]
        split = {(t.task_id, s): name for t, s, name in plan}
        tok = load_tokenizer(cfg.policy)
        engine = JaxEngine.from_checkpoint(cfg.policy, **run.engine.jax_kwargs(),
                                           tokenizer=tok)
        agent = dataclasses.replace(run.agent, temperature=cfg.temperature, greedy=False)
        env_cfg = run.browser_env()
        out: list[Trajectory] = []
        async with BrowserPool(run.env.pool_config(), env_cfg) as pool:
            groups = max(1, pool.config.capacity // cfg.samples_per_seed)
            col = Collector(pool, engine, tok, env_cfg, agent,
                            dataclasses.replace(run.rollout, group_size=cfg.samples_per_seed, max_concurrent_groups=groups))
            async for group in col.stream(iter([(t, s) for t, s, _ in plan])):
                for traj in group.trajectories:
                    traj.metadata["split"] = split[(group.task_id, group.seed)]
                    traj.metadata.pop("turn_info", None)  # screenshots and viewer records: not needed here
                    out.append(traj)
        await engine.close()
        return out
    finally:
        suite.stop()


# ---- 2. examples -------------------------------------------------------------------------------------


def judge_messages(traj: Trajectory, cfg: JudgeTrainingConfig, action_space: str) -> list[ChatMessage]:
    """The verifier's prompt (the OpenWebRL judge's inputs with the last `num_observations` pages), exactly what
    `VerifierJudge` sends when the trained judge scores episodes in a run."""
    judge = VerifierJudge(None, system_prompt=cfg.system_prompt, num_observations=cfg.num_observations,
                          max_observation_chars=cfg.max_observation_chars, action_space=action_space)
    return judge.messages(JudgeInput.from_trajectory(traj, action_space=action_space))


def verdict_ids(tokenizer: Any) -> dict[bool, list[int]]:
    """The two answers' ids (+ EOS); their first tokens must differ, since that token's probability is the score."""
    ids = {k: tokenizer.encode(v, add_special_tokens=False) + [tokenizer.eos_token_id] for k, v in VERDICT_TEXT.items()}
    if ids[True][0] == ids[False][0]:
        raise ValueError("the judge tokenizer encodes SUCCESS and NOT SUCCESS with the same first token")
    return ids


def examples(trajs: Sequence[Trajectory], tokenizer: Any, cfg: JudgeTrainingConfig,
             action_space: str) -> tuple[list[Example], int]:
    """Examples that fit `seq_len`, and how many episodes did not."""
    targets = verdict_ids(tokenizer)
    out, dropped = [], 0
    for t in trajs:
        label = bool(t.metadata.get("success"))
        ids = render_prompt_ids(tokenizer, judge_messages(t, cfg, action_space))
        if len(ids) + len(targets[label]) > cfg.seq_len:
            dropped += 1
            continue
        out.append(Example(ids, targets[label], label, t.task_id, int(t.metadata.get("seed", -1))))
    return out, dropped


# ---- 3. fine-tune ------------------------------------------------------------------------------------


def fine_tune(run: Any, cfg: Any, train: Sequence[Example], work: Path, *, name: str = "judge",
              balanced: bool = True) -> Any:
    """SFT on the answer tokens from `cfg.policy`'s weights; returns the Trainer (params, export). `balanced`:
    each batch holds as many examples labelled True as False (the verifier); else batches are drawn uniformly
    (the labeler). `cfg` has policy, seq_len, batch, lr, steps and seed (JudgeTrainingConfig,
    LabelerTrainingConfig)."""
    from jaxwebrl.fields import with_changes
    from jaxwebrl.train.trainer import Trainer

    pos = [e for e in train if e.label]
    neg = [e for e in train if not e.label]
    if balanced and (not pos or not neg):
        raise ValueError(f"the training episodes hold {len(pos)} successes and {len(neg)} failures; a verifier needs "
                         "both (raise train_seeds or samples_per_seed, or the temperature)")
    if not train:
        raise ValueError(f"no training example for the {name}: nothing fits seq_len={cfg.seq_len}, or nothing was collected")
    judge_run = with_changes(run, **{
        "workdir": str(work / name), "model.source": "hf", "model.path": cfg.policy, "loss.kind": "sft",
        "train.seq_len": cfg.seq_len, "train.micro_batch": max(1, cfg.batch // 2), "train.accum_steps": 1,
        "train.epochs": 1, "optim.lr": cfg.lr, "log.dir": str(work / name / "logs"),
    })
    trainer = Trainer(judge_run, total_steps=cfg.steps, checkpointing=False)
    rng = np.random.default_rng(cfg.seed)
    half = cfg.batch // 2

    def sample(e: Example, i: int) -> Trajectory:
        return Trajectory(task_id=e.task_id, turns=[Turn(prompt_ids=e.prompt_ids, response_ids=e.target_ids)],
                          group_id=f"{name}/{i}", advantage=1.0)

    losses = []
    for step in range(cfg.steps):
        if balanced:
            picks = [pos[i] for i in rng.integers(0, len(pos), half)] + [neg[i] for i in rng.integers(0, len(neg), cfg.batch - half)]
        else:
            picks = [train[i] for i in rng.integers(0, len(train), cfg.batch)]
        samples = build_samples([sample(e, i) for i, e in enumerate(picks)], per="turn", norm="token_mean",
                                max_len=cfg.seq_len)
        m = trainer.train_on_samples(samples, epochs=1)
        losses.append(m["loss"])
        if step % 20 == 0 or step == cfg.steps - 1:
            trainer.log({"loss": m["loss"]}, prefix=name)
    trainer.loss_history = losses  # type: ignore[attr-defined]
    return trainer


# ---- 4. evaluate and report --------------------------------------------------------------------------


def verdict_scores(model_cfg: Any, params: Any, data: Sequence[Example], tokenizer: Any, batch: int = 8) -> np.ndarray:
    """P(SUCCESS) from the judge's next-token distribution after the prompt, renormalised over the two
    verdicts' first tokens."""
    import jax
    import jax.numpy as jnp

    from jaxwebrl.models.decoder import forward

    ids = verdict_ids(tokenizer)
    yes, no = ids[True][0], ids[False][0]

    @jax.jit
    def last_logits(params: Any, tokens: jax.Array, lengths: jax.Array) -> jax.Array:
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        segments = (positions < lengths[:, None]).astype(jnp.int32)
        logits, _ = forward(model_cfg, params, tokens, positions * segments, segments)
        last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0]
        return jax.nn.log_softmax(last[:, jnp.array([yes, no])], axis=-1)[:, 0]

    out = np.zeros(len(data))
    order = sorted(range(len(data)), key=lambda i: len(data[i].prompt_ids))
    for start in range(0, len(order), batch):
        idx = order[start:start + batch]
        length = max(len(data[i].prompt_ids) for i in idx)
        width = 1 << (length - 1).bit_length()
        tokens = np.zeros((batch, width), np.int32)
        lengths = np.ones(batch, np.int32)
        for row, i in enumerate(idx):
            p = data[i].prompt_ids
            tokens[row, :len(p)] = p
            lengths[row] = len(p)
        lp = np.asarray(last_logits(params, jnp.asarray(tokens), jnp.asarray(lengths)))
        out[idx] = np.exp(lp[:len(idx)])
    return out


def prior_corrected(p_balanced: np.ndarray, prior: float) -> np.ndarray:
    """P(SUCCESS) of a judge trained on balanced batches, moved to the training episodes' success rate `prior`
    (Bayes: odds x prior / (1 - prior)); the ranking (AUC) is unchanged, the 0.5 threshold becomes fair."""
    p = np.clip(p_balanced, 1e-9, 1 - 1e-9)
    return p * prior / (p * prior + (1 - p) * (1 - prior))


def exported_judge_check(path: str, data: Sequence[Example], scores: np.ndarray, prior: float, tokenizer: Any) -> str:
    """The HF export loaded by transformers gives the judge's scores: the proof the export is the judge."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = verdict_ids(tokenizer)
    theirs = []
    for e in data:
        with torch.no_grad():
            logits = model(torch.tensor([e.prompt_ids])).logits[0, -1].double()
        theirs.append(float(torch.softmax(logits[[ids[True][0], ids[False][0]]], 0)[0]))
    diff = float(np.max(np.abs(prior_corrected(np.array(theirs), prior) - np.asarray(scores))))
    return (f"Judge exported to `judge_hf/` ({type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} "
            f"parameters): transformers gives the same P(SUCCESS) on {len(data)} held-out prompts (max |diff| "
            f"{diff:.1e}).")


def plot_calibration(curves: dict[str, tuple[Sequence[bool], Sequence[float]]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], "k:", label="perfect calibration")
    for name, (labels, scores) in curves.items():
        table = calibration(labels, scores)
        ax.plot([t[0] for t in table], [t[1] for t in table], "o-", label=name)
    ax.set_xlabel("judge P(SUCCESS)")
    ax.set_ylabel("rule evaluator success rate")
    ax.set_title("held-out calibration")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def report_md(results: dict[str, Agreement], meta: dict[str, Any]) -> str:
    names = list(results)
    lines = [
        "# A judge trained here: held-out agreement with the rule evaluator", "",
        f"Policy that played: `{meta['policy']}` at temperature {meta['temperature']}; tasks: {meta['tasks']}.",
        f"Training episodes: {meta['train_episodes']} ({meta['train_positives']} successes), train seeds "
        f"{meta['train_seeds']}; held-out episodes: {meta['heldout_episodes']} ({meta['heldout_positives']} "
        f"successes), test seeds {meta['heldout_seeds']} (never in training). Episodes longer than the judge's "
        f"context: {meta['dropped']} dropped; episodes whose page did not load (env_error, played again once): "
        f"{meta.get('env_errors', 0)} left out.",
        f"Judge: the BC policy's weights fine-tuned {meta['steps']} steps (batch {meta['batch']}, lr {meta['lr']}) "
        f"to write SUCCESS / NOT SUCCESS on class-balanced batches; score = P(first verdict token), moved to the "
        f"training episodes' success rate {meta['train_positives'] / max(1, meta['train_episodes']):.2f} "
        f"(prior correction); SUCCESS when the score >= 0.5. Intervals: 95% percentile bootstrap "
        f"over held-out episodes (2000 resamples, seed 0). The first column is a baseline that reads only the "
        f"task's name: its score is the task's success rate among the training episodes.", "",
        "| metric | " + " | ".join(names) + " |", "|---|" + "---|" * len(names),
    ]
    for metric in ("accuracy", "precision", "recall", "auc"):
        lines.append(f"| {metric} | " + " | ".join(results[n].row(metric) for n in names) + " |")
    first = results[names[-1]]
    lines += [f"| majority-class accuracy | " + " | ".join(results[n].row("majority_accuracy") for n in names) + " |",
              f"| accuracy - majority (paired) | " + " | ".join(results[n].row("accuracy_minus_majority") for n in names) + " |",
              "", "![calibration](calibration.png)", "",
              f"The fine-tuned judge {'beats' if first.low['accuracy_minus_majority'] > 0 else 'does not beat'} the "
              f"majority-class baseline on held-out accuracy at 95% confidence "
              f"({first.row('accuracy_minus_majority')}); AUC {first.row('auc')} (0.5 = no signal).",
              f"Against the baseline that knows only the task: accuracy {first.row('accuracy')} vs "
              f"{results[names[0]].row('accuracy')}, AUC {first.row('auc')} vs {results[names[0]].row('auc')}.",
              f"Wall time: collect {meta['collect_s']:.0f} s{' (episodes reused from ' + EPISODES_FILE + ')' if meta['reused'] else ''}, fine-tune {meta['train_s']:.0f} s, "
              f"evaluate {meta['eval_s']:.0f} s.", "", meta["export_check"]]
    return "\n".join(lines) + "\n"


def train_judge(run: Any, cfg: JudgeTrainingConfig) -> dict[str, Any]:
    """All four stages; writes report.md, calibration.png, judge_hf/, metrics.json in `cfg.workdir`."""
    from jaxwebrl.models import load_hf, load_tokenizer

    work = Path(cfg.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    episodes_file = work / EPISODES_FILE
    reused = episodes_file.exists()
    if reused:  # a rerun reuses the collected episodes and plays again the instances whose page did not load
        trajs = read_trajectories(str(episodes_file))
        lost = {(t.task_id, int(t.metadata.get("seed", -1))) for t in trajs if t.termination == "env_error"}
        if lost:
            trajs = [t for t in trajs if (t.task_id, int(t.metadata.get("seed", -1))) not in lost]
            trajs += asyncio.run(collect(run, cfg, only=lost))
            write_jsonl(str(episodes_file), trajs)
    else:
        trajs = asyncio.run(collect(run, cfg))
        write_jsonl(str(episodes_file), trajs)
    # an episode whose browser failed (env_error: the page did not load) shows the judge nothing to judge
    env_errors = sum(t.termination == "env_error" for t in trajs)
    trajs = [t for t in trajs if t.termination != "env_error"]
    t1 = time.perf_counter()
    tok = load_tokenizer(cfg.policy)
    space = run.env.action_space
    train, d1 = examples([t for t in trajs if t.metadata["split"] == "train"], tok, cfg, space)
    held, d2 = examples([t for t in trajs if t.metadata["split"] == "heldout"], tok, cfg, space)
    if not held:
        raise ValueError("no held-out episode fits the judge's context; raise seq_len or lower max_observation_chars")
    base_cfg, base_params = load_hf(cfg.policy)
    labels = [e.label for e in held]
    before = verdict_scores(base_cfg, base_params, held, tok)
    trainer = fine_tune(run, cfg, train, work)
    t2 = time.perf_counter()
    prior = float(np.mean([e.label for e in train]))
    after = prior_corrected(verdict_scores(trainer.model_cfg, trainer.params, held, tok), prior)
    t3 = time.perf_counter()
    export_check = exported_judge_check(trainer.export(str(work / "judge_hf")), held[:8], after[:8], prior, tok)
    # a baseline that knows only which task it is: the task's success rate among the training episodes
    rates = {t: float(np.mean([e.label for e in train if e.task_id == t] or [prior])) for t in {e.task_id for e in held}}
    by_task = np.array([rates[e.task_id] for e in held])
    results = {"task's training success rate": agreement(labels, by_task),
               "BC policy as judge (no fine-tuning)": agreement(labels, before),
               "fine-tuned judge": agreement(labels, after)}
    plot_calibration({"before fine-tuning": (labels, before), "fine-tuned": (labels, after)}, work / "calibration.png")
    tasks = sorted({e.task_id for e in held})
    meta = {"policy": cfg.policy, "temperature": cfg.temperature, "tasks": ", ".join(tasks),
            "train_episodes": len(train), "train_positives": sum(e.label for e in train),
            "heldout_episodes": len(held), "heldout_positives": sum(labels), "train_seeds": cfg.train_seeds,
            "heldout_seeds": cfg.heldout_seeds, "dropped": d1 + d2, "env_errors": env_errors, "steps": cfg.steps,
            "batch": cfg.batch,
            "lr": cfg.lr, "collect_s": t1 - t0, "train_s": t2 - t1, "eval_s": t3 - t2}
    meta["export_check"], meta["reused"] = export_check, reused
    (work / "report.md").write_text(report_md(results, meta))
    summary = {"meta": meta, "loss": list(getattr(trainer, "loss_history", [])),
               "results": {k: dataclasses.asdict(v) for k, v in results.items()}}
    (work / "metrics.json").write_text(json.dumps(summary, indent=1))
    trainer.close()
    return summary
