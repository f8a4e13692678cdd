"""SFT on NNetNav data (papers/nnetnav.txt §4): per-step examples (instruction, current observation, previous
actions) -> (reasoning, action) from configs/nnetnav_explore.py's output; Llama-3.1-8B, 2 epochs, batch 128,
lr 2e-5 with 500 linear warm-up updates, sequences truncated at 20k.

    python scripts/train.py --config configs/sft_nnetnav.py
    python scripts/train.py --config configs/sft_nnetnav.py --config.local=true   # the local exploration's data

Demonstrations + NNetNav data (the comparison of issue 23's item 3) is two files in data.train_files; the
control trains on the demonstrations alone with the same steps and seed (RESULTS.md has the commands).
"""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "nnetnav"
    c.workdir = "runs/sft_nnetnav"
    c.model.source = "hf"
    c.model.path = "checkpoints/Llama-3.1-8B-Instruct"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "sft"
    c.data.synthetic = False
    c.data.train_files = "runs/nnetnav_explore/nnetnav/nnetnav_sft.jsonl"
    c.data.per = "turn"
    c.data.norm = "token_mean"
    c.env.action_space = "webarena"
    c.agent.prompt_format = "browseragent"
    c.agent.strategy = "current_plus_history"
    c.train.steps = 1600  # ~2 epochs of ~100k per-step examples at batch 128
    c.train.seq_len = 20480
    c.train.micro_batch = 8
    c.train.accum_steps = 16  # 128 sequences per update
    c.train.logits_chunk = 1024
    c.loss.kind = "sft"
    c.optim.lr = 2e-5
    c.optim.schedule = "warmup_cosine"
    c.optim.warmup_steps = 500

    # Local variant: SFT of the main job's BC policy on the local exploration's relabeled data (bid actions).
    c.local_overrides = local_overrides(
        "sft_nnetnav", model=dict(source="hf", path="runs/grpo_local/bc/hf"),
        data=dict(kind="sft", synthetic=False, train_files="runs/nnetnav_explore_local/nnetnav/nnetnav_sft.jsonl"),
        env=dict(action_space="bid"), agent=dict(prompt_format="bid", strategy="compress_past"),
        train=dict(steps=200, seq_len=1024, micro_batch=8), bc=dict(enabled=False), rl=dict(iterations=0),
        # a BC policy whose cosine schedule ended near 0: a short warm-up to a smaller step than BC's peak
        optim=dict(lr=3e-4, schedule="warmup_cosine", warmup_steps=20))
    c.quick_overrides = quick_overrides("sft_nnetnav", train=dict(steps=10), bc=dict(enabled=False), rl=dict(iterations=0))
    return c
