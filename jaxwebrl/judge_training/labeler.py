"""A trajectory labeler trained here (NNetNav's summaries -> instruction, issue 23 item 3), built like the verifier
judge of `jaxwebrl.judge_training.verifier`:

    python scripts/train_judge.py --config configs/labeler_local.py [--config.quick=true]

1. Collect: the scripted solvers play the run's demonstrated MiniWoB++ tasks on training seeds and on held-out
   (test) seeds in real Chromium; each step's page before, action and page after are kept, and the rule
   summariser (`jaxwebrl.nnetnav.summary.PageDiffSummarizer`, what exploration uses with `nnetnav.summarizer='page_diff'`)
   writes its state-change summary.
2. Examples: NNetNav's labeler prompt (`judges.nnetnav.TrajectoryLabeler.messages`: the summaries as the
   trajectory) rendered with the policy tokenizer's chat template -> "Instruction: <the task's own utterance>".
3. Fine-tune: the BC policy's weights (they read these pages and these utterances already) with the project's
   SFT loss on the answer tokens.
4. Evaluate on the held-out episodes, through the JaxEngine and `TrajectoryLabeler` exactly as exploration calls
   it: exact match of the instruction with the true utterance (normalised), and softer measures: the same task
   template (the utterance with its arguments masked) and the same template with the same key arguments (the
   words that are not template words, as a set); 95% Wilson intervals; paired against two baselines that do
   not read arguments: the most frequent training utterance, and the utterance of the nearest training
   episode by summary words. Writes report.md, metrics.json, labels.jsonl and labeler_hf/ (usable as
   `nnetnav.labeler_path`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from jaxwebrl.evaluation.evaluate import EvalReport, paired_difference, wilson_interval
from jaxwebrl.fields import FieldError, at_least, positive
from jaxwebrl.judges.parsing import normalize_answer

EPISODES_FILE = "labeler_episodes.jsonl"
RESET_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class LabelerTrainingConfig:
    policy: str = "runs/grpo_local/bc/hf"  # the main job's BC policy (HF dir): its tokenizer and starting weights
    workdir: str = "runs/labeler_local"
    train_seeds: int = 60  # training instances per demonstrated task (the suite's train seeds)
    heldout_seeds: int = 20  # held-out instances per task (the suite's test seeds)
    steps: int = 300
    batch: int = 8
    lr: float = 5e-4
    seq_len: int = 1024
    max_new_tokens: int = 48  # the longest utterance + "Instruction: " + EOS
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("train_seeds", "heldout_seeds", "steps", "batch", "seq_len", "max_new_tokens"):
            at_least(name, getattr(self, name), 1)
        positive("lr", self.lr)
        if self.heldout_seeds < 2:
            raise FieldError("heldout_seeds", f"{self.heldout_seeds} held-out instances per task measure nothing",
                             "use at least 2 (the local run: 20)")


@dataclasses.dataclass
class LabeledEpisode:
    task_id: str
    seed: int
    split: str  # train | heldout
    goal: str  # the task's own utterance
    summaries: list[str]


# ---- 1. collect --------------------------------------------------------------------------------------


class _RecordingEnv:
    """A BrowserEnv that keeps the page each action led to (the scripted player reads the env's own fields)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.after: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    async def step(self, text: str) -> Any:
        res = await self.env.step(text)
        self.after.append(res.observation.text)
        return res


async def collect(run: Any, cfg: LabelerTrainingConfig) -> tuple[list[LabeledEpisode], dict[str, int]]:
    """The scripted solvers on the demonstrated tasks' train and test seeds: the successful episodes, summarised,
    and why the others were left out (counts by reason)."""
    from jaxwebrl.browser.env import EnvError
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.demos.collect import play_plan, settled
    from jaxwebrl.main_job.stages import demonstrated_task_ids
    from jaxwebrl.nnetnav.summary import PageDiffSummarizer
    from jaxwebrl.rollout.suites import get_solvers, make_suite, split_tasks

    solvers = get_solvers(run.tasks.suite)
    if solvers is None:
        raise ValueError(f"suite {run.tasks.suite!r} has no scripted solvers: the labeler learns from their episodes")
    summarizer = PageDiffSummarizer(run.env.action_space)
    suite = make_suite(run)
    try:
        train_tasks, _, _, _ = split_tasks(suite, run)
        wanted = set(demonstrated_task_ids(run, [t.task_id for t in train_tasks]))
        tasks = [t for t in train_tasks if t.task_id in wanted]
        plan = [(t, s, "train") for s in suite.seeds("train", cfg.train_seeds) for t in tasks]
        plan += [(t, s, "heldout") for s in suite.seeds("test", cfg.heldout_seeds) for t in tasks]
        env_cfg = run.browser_env()
        async with BrowserPool(run.env.pool_config(), env_cfg) as pool:
            sem = asyncio.Semaphore(pool.config.capacity)

            async def one(task: Any, seed: int, split: str) -> LabeledEpisode | str:
                async with sem:
                    env = _RecordingEnv(await pool.new_env(env_cfg))
                    try:
                        for attempt in range(RESET_ATTEMPTS):  # a loaded machine times page loads out now and then
                            try:
                                obs = await env.reset(task, seed)
                                break
                            except EnvError:
                                if attempt == RESET_ATTEMPTS - 1:
                                    return "page did not load"
                                await asyncio.sleep(1.0 + attempt)
                        try:
                            steps = solvers.plan(task.task_id.split(".", 1)[-1], obs.goal, obs.elements)
                        except (LookupError, KeyError):
                            return "no plan"
                        records, error = await play_plan(env, obs, steps, env_cfg, run.agent.prompt_format)
                        await settled(env)
                        if error is not None or not records:
                            return "plan failed"
                        if not (await env.evaluate()).success:
                            return "not solved"
                        pages = [r.observation.text for r in records] + [env.after[-1]]
                        return LabeledEpisode(task.task_id, seed, split, obs.goal,
                                              summarizer.summaries(pages, [r.action for r in records]))
                    finally:
                        await env.close()

            found = await asyncio.gather(*(one(t, s, split) for t, s, split in plan))
        left_out = collections.Counter(f for f in found if isinstance(f, str))
        return [e for e in found if isinstance(e, LabeledEpisode)], dict(left_out)
    finally:
        suite.stop()


# ---- 2. examples -------------------------------------------------------------------------------------


def labeler_messages(summaries: Sequence[str], action_space: str) -> list[Any]:
    """NNetNav's labeler prompt, exactly what `TrajectoryLabeler` sends during exploration."""
    from jaxwebrl.judges.nnetnav import TrajectoryLabeler

    return TrajectoryLabeler(None, action_space=action_space).messages(list(summaries))  # type: ignore[arg-type]


def answer_text(goal: str) -> str:
    return f"Instruction: {goal}"


def examples(episodes: Sequence[LabeledEpisode], tokenizer: Any, cfg: LabelerTrainingConfig,
             action_space: str) -> tuple[list[Any], int]:
    """judge_training.Example records (prompt -> "Instruction: <goal>" + EOS) that fit `seq_len`."""
    from jaxwebrl.judge_training.verifier import Example
    from jaxwebrl.judges.backends import render_prompt_ids

    out, dropped = [], 0
    for e in episodes:
        ids = render_prompt_ids(tokenizer, labeler_messages(e.summaries, action_space))
        target = tokenizer.encode(answer_text(e.goal), add_special_tokens=False) + [tokenizer.eos_token_id]
        if len(ids) + len(target) > cfg.seq_len:
            dropped += 1
            continue
        out.append(Example(ids, target, True, e.task_id, e.seed))
    return out, dropped


# ---- 4. how close a label is to the true utterance ---------------------------------------------------------


def _words(text: str) -> list[str]:
    return normalize_answer(text).split()


@dataclasses.dataclass(frozen=True)
class Templates:
    """The template words of the training utterances: per task, the words in at least half of its utterances.
    An utterance's template is its words with every non-template run masked; its key arguments are the
    non-template words (e.g. 'Click on the "ok" button.' -> template 'click on _ button', arguments {'ok'})."""

    words: frozenset[str]

    @classmethod
    def fit(cls, utterances_by_task: dict[str, list[str]]) -> "Templates":
        common: set[str] = set()
        for utterances in utterances_by_task.values():
            counts = collections.Counter(w for u in utterances for w in set(_words(u)))
            common |= {w for w, c in counts.items() if c >= len(utterances) / 2}
        return cls(frozenset(common))

    def template(self, text: str) -> str:
        masked = [w if w in self.words else "_" for w in _words(text)]
        return re.sub(r"(_ )+_", "_", " ".join(masked))

    def arguments(self, text: str) -> frozenset[str]:
        return frozenset(w for w in _words(text) if w not in self.words)


def label_scores(predicted: Sequence[str | None], truth: Sequence[str], templates: Templates) -> dict[str, list[bool]]:
    """Per episode: exact (normalised) match, same template, same template and key arguments."""
    out: dict[str, list[bool]] = {"exact match": [], "same task template": [], "same template and arguments": []}
    for p, t in zip(predicted, truth):
        p = p or ""
        same = templates.template(p) == templates.template(t)
        out["exact match"].append(normalize_answer(p) == normalize_answer(t))
        out["same task template"].append(same)
        out["same template and arguments"].append(same and templates.arguments(p) == templates.arguments(t))
    return out


def majority_labels(train: Sequence[LabeledEpisode], n: int) -> list[str]:
    """The trivial labeler: the most frequent training utterance, whatever the trajectory."""
    return [collections.Counter(e.goal for e in train).most_common(1)[0][0]] * n


def nearest_labels(train: Sequence[LabeledEpisode], held: Sequence[LabeledEpisode]) -> list[str]:
    """A labeler without arguments: the utterance of the training episode whose summaries share the most words
    (Jaccard), i.e. it finds the task from the kind of steps but copies another instance's arguments."""
    bags = [set(_words(" ".join(e.summaries))) for e in train]
    out = []
    for e in held:
        words = set(_words(" ".join(e.summaries)))
        best = max(range(len(train)), key=lambda i: len(words & bags[i]) / max(1, len(words | bags[i])))
        out.append(train[best].goal)
    return out


async def generate_labels(path: str, held: Sequence[LabeledEpisode], action_space: str, max_new_tokens: int,
                          num_slots: int = 8) -> list[str | None]:
    """The trained labeler through the JaxEngine and `TrajectoryLabeler` (greedy), as exploration calls it;
    None where it wrote no "Instruction:" line."""
    from jaxwebrl.data.records import Trajectory, Turn
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.judges.backends import EngineBackend, JudgeOptions
    from jaxwebrl.judges.nnetnav import TrajectoryLabeler
    from jaxwebrl.models import load_tokenizer

    tok = load_tokenizer(path)
    engine = JaxEngine.from_checkpoint(path, tokenizer=tok, num_slots=num_slots, max_len=2048, name="labeler-jax")
    labeler = TrajectoryLabeler(EngineBackend(engine, tok),
                                JudgeOptions(timeout_s=600.0, retries=0, concurrency=num_slots,
                                             max_new_tokens=max_new_tokens), action_space=action_space)
    try:
        async def one(e: LabeledEpisode) -> str | None:
            turns = [Turn([], [], observation="", action="") for _ in e.summaries]
            v = await labeler.judge(Trajectory(e.task_id, turns, metadata={"state_changes": e.summaries}))
            return v.output if v.ok else None

        return list(await asyncio.gather(*(one(e) for e in held)))
    finally:
        await labeler.close()


def _as_report(hits: Sequence[bool], held: Sequence[LabeledEpisode]) -> EvalReport:
    per: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for h, e in zip(hits, held):
        per[e.task_id][0] += int(h)
        per[e.task_id][1] += 1
    return EvalReport({k: (v[0], v[1]) for k, v in per.items()}, {}, 0.0,
                      {f"{e.task_id}@{e.seed}": bool(h) for h, e in zip(hits, held)})


def report_md(scores: dict[str, dict[str, list[bool]]], held: Sequence[LabeledEpisode], meta: dict[str, Any]) -> str:
    names = list(scores)
    measures = list(scores[names[0]])
    lines = ["# A trajectory labeler trained here: held-out labels against the true utterances", "",
             f"Summaries by rule (`PageDiffSummarizer`) of the scripted solvers' successful episodes on the tasks "
             f"{meta['tasks']}; {meta['train_episodes']} training episodes (train seeds {meta['train_seeds']}), "
             f"{len(held)} held-out episodes (test seeds {meta['heldout_seeds']}, never in training). Labeler: the "
             f"BC policy `{meta['policy']}` fine-tuned {meta['steps']} steps (batch {meta['batch']}, lr {meta['lr']}) "
             "to write `Instruction: <utterance>`; greedy labels through the JaxEngine and NNetNav's labeler prompt. "
             "Exact match after normalisation (case, punctuation, articles); template = the utterance with its "
             "non-template words masked (template words: those in at least half of a task's training utterances); "
             "arguments = the non-template words. Intervals: 95% Wilson.", "",
             "| measure | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for m in measures:
        cells = []
        for n in names:
            k, total = sum(scores[n][m]), len(scores[n][m])
            lo, hi = wilson_interval(k, total)
            cells.append(f"{k}/{total} = {k / max(1, total):.1%} [{lo:.1%}, {hi:.1%}]")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "Paired against each baseline (the same held-out episodes; McNemar p):", "",
              "| measure | comparison | difference (95% CI) | p |", "|---|---|---|---|"]
    trained = names[-1]
    for m in measures:
        for base in names[:-1]:
            d = paired_difference(_as_report(scores[base][m], held), _as_report(scores[trained][m], held))
            lines.append(f"| {m} | {trained} - {base} | {d.diff:+.1%} [{d.ci_low:+.1%}, {d.ci_high:+.1%}] | {d.p_value:.2g} |")
    lines += ["", "Per task (exact match / same template and arguments, trained labeler):", "",
              "| task | exact | template + arguments |", "|---|---|---|"]
    for task in sorted({e.task_id for e in held}):
        idx = [i for i, e in enumerate(held) if e.task_id == task]
        ex = sum(scores[trained]["exact match"][i] for i in idx)
        soft = sum(scores[trained]["same template and arguments"][i] for i in idx)
        lines.append(f"| {task.split('.', 1)[-1]} | {ex}/{len(idx)} | {soft}/{len(idx)} |")
    lines += ["", f"Wall time: collect {meta['collect_s']:.0f} s, fine-tune {meta['train_s']:.0f} s, label "
              f"{meta['eval_s']:.0f} s. Examples: labels.jsonl."]
    return "\n".join(lines) + "\n"


def train_labeler(run: Any, cfg: LabelerTrainingConfig) -> dict[str, Any]:
    """All four stages; writes report.md, metrics.json, labels.jsonl, labeler_hf/ in `cfg.workdir`."""
    from jaxwebrl.judge_training.verifier import fine_tune
    from jaxwebrl.models import load_tokenizer

    work = Path(cfg.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    episodes_file = work / EPISODES_FILE
    left_out: dict[str, int] = {}
    if episodes_file.exists():  # a rerun reuses the collected episodes
        episodes = [LabeledEpisode(**json.loads(line)) for line in episodes_file.read_text().splitlines() if line]
    else:
        episodes, left_out = asyncio.run(collect(run, cfg))
        episodes_file.write_text("".join(json.dumps(dataclasses.asdict(e)) + "\n" for e in episodes))
    t1 = time.perf_counter()
    train = [e for e in episodes if e.split == "train"]
    held = [e for e in episodes if e.split == "heldout"]
    if not train or not held:
        raise ValueError(f"{len(train)} training and {len(held)} held-out episodes were collected (left out: "
                         f"{left_out}); the labeler needs both (check tasks.train has tasks with scripted solvers)")
    tok = load_tokenizer(cfg.policy)
    space = run.env.action_space
    data, dropped = examples(train, tok, cfg, space)
    trainer = fine_tune(run, cfg, data, work, name="labeler", balanced=False)
    out = trainer.export(str(work / "labeler_hf"))
    losses = list(getattr(trainer, "loss_history", []))
    trainer.close()
    t2 = time.perf_counter()
    predicted = asyncio.run(generate_labels(out, held, space, cfg.max_new_tokens, run.engine.num_slots))
    t3 = time.perf_counter()
    by_task: dict[str, list[str]] = collections.defaultdict(list)
    for e in train:
        by_task[e.task_id].append(e.goal)
    templates = Templates.fit(by_task)
    truth = [e.goal for e in held]
    scores = {"most frequent training utterance": label_scores(majority_labels(train, len(held)), truth, templates),
              "nearest training episode's utterance": label_scores(nearest_labels(train, held), truth, templates),
              "trained labeler": label_scores(predicted, truth, templates)}
    with (work / "labels.jsonl").open("w") as f:
        for e, p in zip(held, predicted):
            f.write(json.dumps({"task_id": e.task_id, "seed": e.seed, "truth": e.goal, "label": p,
                                "summaries": e.summaries}) + "\n")
    meta = {"policy": cfg.policy, "tasks": ", ".join(sorted({e.task_id.split(".", 1)[-1] for e in episodes})),
            "train_episodes": len(data), "dropped": dropped, "train_seeds": cfg.train_seeds,
            "heldout_seeds": cfg.heldout_seeds, "steps": cfg.steps, "batch": cfg.batch, "lr": cfg.lr,
            "collect_s": t1 - t0, "train_s": t2 - t1, "eval_s": t3 - t2, "left_out": left_out}
    (work / "report.md").write_text(report_md(scores, held, meta))
    summary = {"meta": meta, "loss": losses, "heldout_episodes": len(held),
               "rates": {n: {m: float(np.mean(v)) for m, v in s.items()} for n, s in scores.items()},
               "labeler": out}
    (work / "metrics.json").write_text(json.dumps(summary, indent=1))
    return summary
