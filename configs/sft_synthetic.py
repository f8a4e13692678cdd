"""Behaviour cloning of a tiny generated Qwen3 on the synthetic click tasks (jaxwebrl/data/synthetic.py) (runs anywhere in a minute)."""

from jaxwebrl.config import default_config


def get_config():
    c = default_config()
    c.recipe = "sft"
    c.workdir = "runs/sft_synthetic"
    c.model.source = "tiny"
    c.model.arch = "qwen3"
    c.data.kind = "sft"
    c.data.synthetic = True
    c.data.synthetic_records = 64
    c.data.per = "turn"
    c.data.norm = "token_mean"
    c.train.steps = 60
    c.train.seq_len = 128
    c.train.micro_batch = 4
    c.loss.kind = "sft"
    c.optim.lr = 3e-3
    c.optim.schedule = "warmup_cosine"
    c.optim.warmup_ratio = 0.05
    c.checkpoint.every = 20
    return c
