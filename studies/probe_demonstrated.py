"""Teacher-forced probe of policies on the demonstrated tasks' held-out seeds: does a policy find the goal's
element in the page? Seconds per policy, no browser episode per policy (the RL - BC question of issue 27).

The scripted solvers play the evaluation's test seeds of the run's demonstrated tasks once (cached in
--cache), and every policy is scored on those demonstrations' own prompts, rendered with its tokenizer and
the run's agent settings: a turn passes when the policy's greedy token equals the demonstration's at every
response position, i.e. greedy decoding would write the demonstrated action. On single-step tasks that is
greedy success (up to equivalent targets, see below); on multi-step ones, success along the demonstrated
path. For the first action it also says which element the greedy answer points at: another with the same
role and name (equally right on click-button, whose duplicate buttons all count) or only the same role. A
policy that does not read the page answers each task's frequent ids whatever the page; `ids` shows them.

    python studies/probe_demonstrated.py --policy runs/grpo_local/bc/hf --policy runs/grpo_local/rl/hf
    python studies/probe_demonstrated.py --policy runs/grpo_local/rl/checkpoints --seeds 20 --json probe.json

`--free` also decodes each first turn greedily from its prompt alone (JaxEngine) and counts the answers that
act on the goal's element: the number to compare across response formats, since teacher forcing hands a
policy that names its target first the right name.

--policy takes a HuggingFace directory or a run's Orbax checkpoint directory (its latest step is exported
beside it); the paired table compares each policy with the ones before it on the same demonstrations.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import pickle
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from absl import app, flags
from ml_collections import config_flags

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
_CONFIG = config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "grpo_local.py"),
                                          "The run config: suite, demonstrated tasks, agent and env settings.")
_POLICY = flags.DEFINE_multi_string("policy", None, "HF dir or Orbax checkpoint dir; repeatable.", required=True)
_SEEDS = flags.DEFINE_integer("seeds", 20, "Held-out (test) seeds per demonstrated task.")
_CACHE = flags.DEFINE_string("cache", None, "Demonstrations cache (default: probe_demonstrations_<seeds>.pkl "
                             "beside the first policy).")
_JSON = flags.DEFINE_string("json", None, "Also write the per-policy results here.")
_FREE = flags.DEFINE_bool("free", False, "Also decode each first turn greedily from its prompt alone (JaxEngine) "
                          "and say which element the answer acts on: teacher forcing gives a policy its own "
                          "earlier tokens right, which flatters a response that names its target first.")
_BATCH = 8
ID = re.compile(r"\('(\d+)'")


def collect(run: Any, seeds: int) -> list[Any]:
    """The solvers' successful demonstrations on the test seeds of the run's demonstrated tasks."""
    from jaxwebrl.browser.pool import BrowserPool
    from jaxwebrl.demos.collect import collect_demonstrations
    from jaxwebrl.main_job.stages import demonstrated_task_ids
    from jaxwebrl.rollout.suites import make_suite, split_tasks
    from jaxwebrl.rollout.suites import get_solvers

    suite = make_suite(run)
    try:
        train, _, _, _ = split_tasks(suite, run)
        wanted = demonstrated_task_ids(run, [t.task_id for t in train])
        tasks = [t for t in train if t.task_id in wanted]
        env_cfg, pool_cfg = run.browser_env(), run.env.pool_config()

        async def play() -> list[Any]:
            async with BrowserPool(pool_cfg, env_cfg) as pool:
                return await collect_demonstrations(pool, env_cfg, tasks, suite.seeds("test", seeds),
                                                    get_solvers(run.tasks.suite).plan, run.agent.prompt_format,
                                                    concurrency=pool_cfg.capacity, rationale=run.bc.rationale,
                                                    rationale_form=run.bc.rationale_form)
        demos = asyncio.run(play())
    finally:
        suite.stop()
    for d in demos:  # the cache keeps what scoring reads
        for s in d.steps:
            s.observation.screenshot = None
    return demos


def greedy_tokens(cfg: Any, params: Any, sequences: Sequence[Sequence[int]]) -> list[Any]:
    """Per sequence, the argmax next token at every position (teacher forcing), batched and padded to powers
    of two so a few shapes compile."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxwebrl.models import forward

    step = jax.jit(lambda p, t, pos: jnp.argmax(forward(cfg, p, t, pos)[0], axis=-1))
    out: list[Any] = [None] * len(sequences)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    for start in range(0, len(order), _BATCH):
        idx = order[start:start + _BATCH]
        width = 1 << (max(len(sequences[i]) for i in idx) - 1).bit_length()
        toks = np.zeros((_BATCH, width), np.int32)
        for row, i in enumerate(idx):
            toks[row, :len(sequences[i])] = sequences[i]
        pos = np.broadcast_to(np.arange(width, dtype=np.int32), toks.shape)
        pred = np.asarray(step(params, jnp.asarray(toks), jnp.asarray(pos)))
        for row, i in enumerate(idx):
            out[i] = pred[row, :len(sequences[i])]
    return out


def score(demos: Sequence[Any], policy: str, agent: Any) -> dict[str, Any]:
    """Per demonstration ("task@seed"): each turn right, every turn right, the greedy answer tokens per turn,
    and where the first answer points."""
    from jaxwebrl.demos.collect import render_demonstrations
    from jaxwebrl.models import load_hf, load_tokenizer

    tok = load_tokenizer(policy)
    cfg, params = load_hf(policy)
    trajs = render_demonstrations(demos, tok, agent)
    turns = [(d, k, t) for d, tr in zip(demos, trajs) for k, t in enumerate(tr.turns)]
    preds = greedy_tokens(cfg, params, [t.prompt_ids + t.response_ids for _, _, t in turns])
    episodes: dict[str, dict[str, Any]] = {}
    for (d, k, turn), pred in zip(turns, preds):
        key = f"{d.task_id}@{d.seed}"
        p = len(turn.prompt_ids)
        answer = [int(x) for x in pred[p - 1:p - 1 + len(turn.response_ids)]]
        ok = answer == list(turn.response_ids)
        e = episodes.setdefault(key, {"task": d.task_id, "every": True, "turns": [], "answers": []})
        e["every"] &= ok
        e["turns"].append(ok)
        e["answers"].append(answer)
        if k == 0:
            e.update(first=ok, **points_at(d, tok.decode(answer)))
    return episodes


def points_at(demo: Any, text: str) -> dict[str, Any]:
    """Where a first answer `text` points on the demonstration's first page: the id it names, and whether that
    element has the goal element's role, and its name too (any of click-button's duplicates)."""
    elements = {str(el.id): el for el in demo.steps[0].observation.elements}
    want, m = ID.search(demo.steps[0].action), ID.search(text)
    target = elements.get(want.group(1)) if want else None
    got = elements.get(m.group(1)) if m else None
    same_role = bool(got and target and got.role == target.role)
    return {"id": m.group(1) if m else "?", "same_role": same_role,
            "same_element": same_role and (got.name or got.text) == (target.name or target.text)}


RATIONALE = re.compile(r"<think>(\S+) '(.*)' \[(\d+)\]</think>\w+\('(\d+)'")
COPIES = ("role", "name", "think id", "action id")


def copies(demos: Sequence[Any], policy: str, episodes: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """With `bc.rationale` (`<think>button 'No' [12]</think>click('12')`): per part of the first response, the
    turns whose greedy tokens are all right given the right tokens before them. The name is a copy from the
    goal, the think's id a lookup of that name on the page, the action's id a copy from the think."""
    from jaxwebrl.models import load_tokenizer

    tok = load_tokenizer(policy)
    counts = {c: [0, 0] for c in COPIES}
    for d in demos:
        truth = d.steps[0].response_text
        m = RATIONALE.match(truth)
        if m is None:
            continue
        enc = tok(truth, add_special_tokens=False, return_offsets_mapping=True)
        answer = episodes[f"{d.task_id}@{d.seed}"]["answers"][0]
        for k, part in enumerate(COPIES, start=1):
            a, b = m.span(k)
            if a == b:  # an element without a name
                continue
            pos = [i for i, (s, t) in enumerate(enc["offset_mapping"]) if s < b and t > a]
            counts[part][0] += all(i < len(answer) and answer[i] == enc["input_ids"][i] for i in pos)
            counts[part][1] += 1
    return {c: (k, n) for c, (k, n) in counts.items()}


def free_running(demos: Sequence[Any], policy: str, agent: Any) -> dict[str, dict[str, Any]]:
    """Per demonstration, the first turn decoded greedily by the JaxEngine from the prompt alone: the text, and
    whether the element it acts on has the goal element's role and name (any of click-button's duplicates)."""
    from jaxwebrl.demos.collect import render_demonstrations
    from jaxwebrl.engines.base import SamplingParams
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.models import load_tokenizer

    tok = load_tokenizer(policy)
    trajs = render_demonstrations(demos, tok, agent)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=agent.max_new_tokens)

    async def decode() -> list[Any]:
        engine = JaxEngine.from_checkpoint(policy, num_slots=_BATCH, max_len=agent.max_context_tokens + agent.max_new_tokens)
        try:
            return await asyncio.gather(*(engine.generate(t.turns[0].prompt_ids, greedy) for t in trajs))
        finally:
            await engine.close()

    out: dict[str, dict[str, Any]] = {}
    for d, gen in zip(demos, asyncio.run(decode())):
        text = tok.decode(gen.token_ids, skip_special_tokens=True)
        out[f"{d.task_id}@{d.seed}"] = {"task": d.task_id, "text": text, "tokens": list(gen.token_ids),
                                         "right_element": points_at(d, text)["same_element"]}
    return out


def report(episodes: dict[str, dict[str, Any]], passed: str = "every") -> Any:
    """An EvalReport of `passed` ('every turn right', or `--free`'s 'right_element') per (task, seed), for the
    run report's tables and pairing."""
    from jaxwebrl.evaluation.evaluate import EvalReport

    per_task: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for e in episodes.values():
        per_task[e["task"]][0] += int(e[passed])
        per_task[e["task"]][1] += 1
    return EvalReport(per_task={t: (s, n) for t, (s, n) in per_task.items()}, terminations={}, mean_steps=0.0,
                      outcomes={k: bool(e[passed]) for k, e in episodes.items()})


def details(name: str, episodes: dict[str, dict[str, Any]]) -> str:
    by_task: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in episodes.values():
        by_task[e["task"]].append(e)
    lines = [f"{name}: first action right / same role and name / same role; the ids it answers"]
    for t, es in sorted(by_task.items()):
        n = len(es)
        ids = collections.Counter(e["id"] for e in es).most_common(4)
        lines.append(f"  {t:28s} {sum(e['first'] for e in es) / n:.2f} / {sum(e['same_element'] for e in es) / n:.2f} / "
                     f"{sum(e['same_role'] for e in es) / n:.2f}  ids {ids}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    del argv
    sys.path.insert(0, ROOT)
    from jaxwebrl.config import apply_variants, parse_config
    from jaxwebrl.evaluation.report import paired_table, success_table

    run = parse_config(apply_variants(_CONFIG.value))
    policies: dict[str, str] = {}
    for path in _POLICY.value:
        hf = path
        if not (Path(path) / "config.json").exists():
            from jaxwebrl.train.export import export_checkpoint
            hf = export_checkpoint(path, os.path.join(path, "hf_probe"))
        name = Path(path).name if Path(path).name not in ("hf", "checkpoints") else f"{Path(path).parent.name}/{Path(path).name}"
        policies[name] = hf
    cache = Path(_CACHE.value or Path(_POLICY.value[0]).resolve().parent / f"probe_demonstrations_{_SEEDS.value}.pkl")
    if cache.exists():
        demos = pickle.loads(cache.read_bytes())
    else:
        demos = collect(run, _SEEDS.value)
        cache.write_bytes(pickle.dumps(demos))
    if not demos:
        raise SystemExit("the solvers produced no demonstration on the test seeds; check tasks.train and bc.tasks")
    results = {name: score(demos, path, run.agent) for name, path in policies.items()}
    print(f"{len(demos)} demonstrations of held-out seeds ({cache}); a turn passes when greedy decoding writes "
          "the demonstrated action")
    reports = {name: report(eps) for name, eps in results.items()}
    print(success_table(reports))
    print(paired_table(reports))
    for name, eps in results.items():
        print(details(name, eps))
        parts = copies(demos, policies[name], eps)
        if any(n for _, n in parts.values()):
            print(f"  {name} teacher-forced copies (all tokens right given the ones before): "
                  + ", ".join(f"{c} {k}/{n}" for c, (k, n) in parts.items()))
    free = {}
    if _FREE.value:
        free = {name: free_running(demos, path, run.agent) for name, path in policies.items()}
        print("free-running greedy first turns: the answer acts on the goal's element (same role and name)")
        free_reports = {name: report(eps, "right_element") for name, eps in free.items()}
        print(success_table(free_reports))
        print(paired_table(free_reports))
        for name, eps in free.items():
            for key, e in list(eps.items())[::10]:
                print(f"  {name} {key}: {e['text']!r}")
    if _JSON.value:
        Path(_JSON.value).write_text(json.dumps({"teacher_forced": results, "free_running": free} if free else results,
                                                indent=1))


if __name__ == "__main__":
    app.run(main)
