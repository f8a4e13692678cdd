"""The local variant of a paper config: the paper's recipe at laptop scale, trained from scratch on MiniWoB++.

A paper config (`configs/grpo_openwebrl.py`, ...) describes the paper's run: a 3-8B model, 16-32k contexts,
an SGLang fleet, hundreds of iterations; it is checked here by the dry run. Its local variant
(`--config.local=true`) keeps what makes it that paper — recipe, context strategy, prompt format, action
space, loss, normalisation, sample cut, epochs, dynamic sampling, replay, horizons — and swaps the scale:
a small Qwen3-style model and BPE tokenizer built from scratch, behaviour-cloned on the scripted solvers'
demonstrations written in the paper's own action grammar (`jaxwebrl.demos.actions`), then a few
iterations of the paper's online loop with the JaxEngine and real Chromium, then greedy evaluation of
random / BC / RL on held-out seeds (the main job's stages, `jaxwebrl.main_job.stages`).

    python -m jaxwebrl --config configs/grpo_openwebrl.py --config.local=true
    python -m jaxwebrl --config configs/grpo_openwebrl.py --config.local=true --config.quick=true   # smoke
    python -m jaxwebrl --config configs/grpo_openwebrl.py --config.local=true --config.model.pretrained=smollm2

`local_overrides(name, **paper)` returns the shared overlay with the paper's own local settings merged in
(each config passes what must be scaled rather than dropped, e.g. a horizon schedule at iteration 3
instead of 100). The fields it sets are the only difference between a paper config and its local run.

With `model.pretrained` (a model the package index ships, e.g. SmolLM2-135M-Instruct) the local run starts
from that model, as the papers start from theirs: `pretrained_local_overrides` is applied after the local
(and quick) overlay. The model's own tokenizer and chat template render the prompts, the paper's own system
prompt comes back (a pretrained model reads instructions; the short one only suits a model that learns the
syntax from demonstrations), every target is named before its id (the page lists ids after names, and each
demonstration's think names its target), and the budget is sized for a 135M model on CPU: only its top
layers train, smaller learning rates, fewer BC steps.
"""

from __future__ import annotations

from typing import Any

import ml_collections

# One-page tasks with a scripted solver in every grammar, over three difficulties (envs/miniwob.py
# DIFFICULTY: WebGym's ratio and per-difficulty horizons need all three).
LOCAL_TASKS = "click-button,click-link,focus-text,click-checkboxes,login-user"

SMALL_QWEN3 = dict(architecture="qwen3", vocab_size=1024, hidden_size=128, intermediate_size=384, num_layers=4,
                   num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True, tie_word_embeddings=True,
                   max_position_embeddings=4096, rope_theta=10000.0)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "shape" else value
    return out


def local_overrides(name: str, **paper: Any) -> ml_collections.ConfigDict:
    """The local variant's changed fields for the paper config `name` (its workdir is runs/<name>_local);
    `paper` holds section dicts merged over the shared overlay, e.g. `rollout=dict(horizon_schedule="0:4,3:6")`."""
    base: dict[str, Any] = dict(
        workdir=f"runs/{name}_local",
        multihost=False,
        mesh={"data": 1, "fsdp": -1, "tensor": 1},
        model=dict(source="inline", shape=SMALL_QWEN3, dtype="float32", param_dtype="float32", remat=False,
                   scan_layers=False, attention="xla"),
        tasks=dict(suite="miniwob", train=LOCAL_TASKS, eval_seeds=10),
        # axtree for every paper: a from-scratch model reads it in the fewest tokens (the paper's text mode
        # stays in its config; `--config.env.text_mode=html` runs WebAgent-R1's locally too, at ~3x the tokens)
        # step and episode limits are safety limits a slow machine does not reach (the defaults, 45 s and 600 s):
        # a limit that fires changes the outcome, and is counted in the run's records (issue 39)
        env=dict(text_mode="axtree", text_budget_chars=1200, page_metadata=False, relative_urls=True,
                 num_browsers=1, contexts_per_browser=8),
        # A model trained from scratch learns the response format from the demonstrations; the paper's long
        # system prompt (tool lists, format rules) would only cost tokens at every turn (the main job's choice).
        agent=dict(max_context_tokens=3072, max_new_tokens=96,
                   system_prompt="You are a web agent. Answer with your next action."),
        engine=dict(type="jax", launch=False, num_slots=8, max_len=4096, prefill_chunk=128),
        train=dict(seq_len=4096, micro_batch=4, accum_steps=1, logits_chunk=0, groups_per_step=4),
        rollout=dict(groups_per_iteration=4, max_concurrent_groups=2, max_groups_per_iteration=16),
        # a model trained from scratch in minutes needs a larger step than a pretrained 3-8B model's 1e-6
        optim=dict(lr=2e-4, schedule="constant", warmup_steps=0, max_grad_norm=1.0),
        bc=dict(enabled=True, demonstration_seeds=20, vocab_size=1024, steps=200, lr=2e-3, micro_batch=8,
                context_loss_weight=0.1, seq_len=1024),
        # the same seed gives the same run whatever the machine's load (the main job's choice)
        rl=dict(iterations=6, eval_every=0, schedule="deterministic"),
        report=dict(enabled=True, eval_seeds=10),
        checkpoint=dict(every=0, keep=2, export_every=0),
        viewer=dict(max_episodes=400),
    )
    return ml_collections.ConfigDict(_merge(base, paper))


def quick_overrides(name: str, **paper: Any) -> ml_collections.ConfigDict:
    """The smoke run of a local variant (`--config.local=true --config.quick=true`; what the tests run): a
    2-layer model on two easy tasks, a few demonstrations and BC steps, two short iterations."""
    base: dict[str, Any] = dict(
        workdir=f"runs/{name}_local_quick",
        model=dict(shape=dict(SMALL_QWEN3, num_layers=2, hidden_size=64, intermediate_size=128, head_dim=16)),
        # the main job's smoke tasks (a 2-layer model learns focus-text from a few demonstrations, click-button
        # only partly: groups mix successes and failures); WebGym's difficulty ratio needs all three levels,
        # so it is off here
        tasks=dict(train="focus-text,click-button", eval_seeds=2, difficulty_ratio=""),
        bc=dict(demonstration_seeds=8, steps=160, lr=3e-3, micro_batch=4, seq_len=1024),
        rl=dict(iterations=2),
        rollout=dict(groups_per_iteration=2, max_groups_per_iteration=8),
        report=dict(eval_seeds=2),
    )
    return ml_collections.ConfigDict(_merge(base, paper))


# The budget of a pretrained local run (`--config.model.pretrained=NAME` with `--config.local=true`), sized for
# SmolLM2-135M on 2 CPU cores (~100 trained tokens/s with every layer, ~2.5x that with the top 6).
# Every target is named before its id, as in the SmolLM2 main job (`configs/grpo_local_smollm2_named.py`): the
# page lists ids after names and each demonstration's think names its target first, which took BC 18.3% -> 29.2% and RL
# 45.8% -> 51.7% on the twelve tasks there (RESULTS.md, "The target named before its id"). Each paper's own
# format keeps its think, so this changes no recipe. BC packs rows of seq_len tokens: 60 steps of 2 rows are
# 246k tokens, 2.3-3.2 passes over the ~100 demonstrations' 78k (WebAgent-R1's format) to 108k (OpenWebRL's)
# tokens, as the named main job's 90 steps of 4 x 1,024 are 3.1 passes over its 239 demonstrations' 120k.
PRETRAINED_LOCAL = dict(
    model=dict(source="hf", path="", shape={}, scan_layers=True),
    env=dict(ids_after_names=True),
    agent=dict(system_prompt="", max_context_tokens=2048),
    engine=dict(max_len=2048),
    train=dict(seq_len=2048, micro_batch=2, trainable_layers=6, logits_chunk=256),  # 49k-token vocabulary
    optim=dict(lr=2e-5),
    bc=dict(lr=1e-4, steps=60, micro_batch=2, seq_len=2048, context_loss_weight=0.0, rationale=True),
)
# A paper whose RL iteration does not fit that budget gets a smaller one here; what makes it that paper (epochs,
# group size, dynamic sampling, per-turn samples) stays. OpenWebRL trains two epochs over every turn of every
# episode, each with its whole history: from SmolLM2's BC its iteration 0 drew 5 groups of 5 (dynamic sampling
# past the 4 asked for), 86 turns of 55k tokens (646 a turn on average, 1,146 the longest), and that first
# update, 2 x 55k trained tokens at ~110 tokens/s on the shared 2-core machine, had not finished after 30 min
# (RESULTS.md, "From SmolLM2-135M-Instruct (issue 40 item 3)"). Two groups an iteration, at most four with
# dynamic sampling, bring it to about 10-20 episodes: half to a quarter of that update.
PRETRAINED_BY_RECIPE: dict[str, dict[str, Any]] = {
    "openwebrl": dict(rollout=dict(groups_per_iteration=2, max_groups_per_iteration=4)),
}
PRETRAINED_QUICK = dict(
    bc=dict(demonstration_seeds=3, steps=3, micro_batch=1),
    train=dict(micro_batch=1, trainable_layers=2),
    rl=dict(iterations=1),
    rollout=dict(groups_per_iteration=1, max_groups_per_iteration=2),
    agent=dict(max_steps=2, max_new_tokens=48),
    report=dict(eval_seeds=1),
)


def pretrained_local_overrides(workdir: str, pretrained: str, quick: bool, recipe: str = "") -> ml_collections.ConfigDict:
    """The overlay a local variant of the paper `recipe` gets when it starts from the pretrained model
    `pretrained`; its workdir is the local variant's (`workdir`) with the model's name appended."""
    base: dict[str, Any] = dict(_merge(PRETRAINED_LOCAL, PRETRAINED_BY_RECIPE.get(recipe, {})), workdir=f"{workdir}_{pretrained}")
    return ml_collections.ConfigDict(_merge(base, PRETRAINED_QUICK) if quick else base)
