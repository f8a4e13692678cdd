"""WebAgent-R1 stage 1, behaviour cloning: L_BC = -E[log pi(a_t | h_t)] on action tokens only.

RECIPES.md: lr 5e-5, batch 128, cosine schedule with 5% warmup. Per-turn samples (the context the agent saw),
token-mean loss. Set model.path to a local Qwen2.5-3B(-Instruct) or Llama-3.1-8B HF dir and data.train_files
to the demonstration JSONL (Trajectory records)."""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "webagent_r1"
    c.workdir = "runs/sft_webagent_r1"
    c.mesh = {"data": 1, "fsdp": -1, "tensor": 1}
    c.model.source = "hf"
    c.model.path = "checkpoints/Qwen2.5-3B-Instruct"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "sft"
    c.data.synthetic = False
    c.data.train_files = "data/webagent_r1_bc.jsonl"
    c.data.per = "turn"
    c.data.norm = "token_mean"
    c.train.steps = 1000
    c.train.seq_len = 16384
    c.train.micro_batch = 32
    c.train.accum_steps = 4  # 128 sequences per step
    c.train.logits_chunk = 1024
    c.loss.kind = "sft"
    c.optim.lr = 5e-5
    c.optim.schedule = "warmup_cosine"
    c.optim.warmup_ratio = 0.05
    c.optim.weight_decay = 0.0

    # The local variant (--config.local=true): this recipe trained from scratch on MiniWoB++ on a laptop
    # (jaxwebrl/recipes/local.py); the demonstrations come from the scripted solvers (data.kind='online' with bc.enabled runs that stage; no RL).
    c.local_overrides = local_overrides("sft_webagent_r1", data=dict(kind="online", train_files=""), rl=dict(iterations=0), bc=dict(lr=2e-3))
    c.quick_overrides = quick_overrides("sft_webagent_r1", rl=dict(iterations=0))
    return c
