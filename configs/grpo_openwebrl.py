"""OpenWebRL MM-GRPO (text part; the model is the Qwen3 family here): per-turn samples with the exact rollout
context, no 1/|tau| normalisation, asymmetric clip (0.2, 0.28), no KL, PPO epochs 2, dynamic sampling,
Adam(0.9, 0.98), weight decay 0.1, constant lr 1e-6, 256 turn samples per step."""

from jaxwebrl.train.config import default_config


def get_config():
    c = default_config()
    c.recipe = "openwebrl"
    c.workdir = "runs/grpo_openwebrl"
    c.model.source = "hf"
    c.model.path = "checkpoints/Qwen3-4B"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "trajectories"
    c.data.demo = False
    c.data.train_files = "data/openwebrl_rollouts.jsonl"
    c.data.per = "turn"
    c.data.norm = "per_turn"
    c.train.groups_per_step = 48
    c.train.seq_len = 32768
    c.train.micro_batch = 64
    c.train.accum_steps = 4
    c.train.epochs = 2
    c.train.dynamic_sampling = True
    c.train.old_logprobs = "engine"
    c.train.logits_chunk = 2048
    c.loss.kind = "grpo"
    c.loss.eps_low = 0.2
    c.loss.eps_high = 0.28
    c.loss.beta = 0.0
    c.optim.lr = 1e-6
    c.optim.b1, c.optim.b2 = 0.9, 0.98
    c.optim.weight_decay = 0.1
    return c
