"""M-GRPO (WebAgent-R1 normalisation) on generated trajectory records with a tiny Qwen3: the GRPO path of
train.py end to end on CPU (old logprobs recomputed, KL to the frozen initial policy)."""

from jaxwebrl.config import default_config


def get_config():
    c = default_config()
    c.recipe = "webagent_r1"
    c.workdir = "runs/grpo_synthetic"
    c.model.source = "tiny"
    c.data.kind = "trajectories"
    c.data.synthetic = True
    c.data.synthetic_records = 64  # 16 tasks x G=4
    c.data.per = "trajectory"
    c.data.norm = "webagent_r1"
    c.train.steps = 10
    c.train.groups_per_step = 4
    c.train.seq_len = 128
    c.train.micro_batch = 4
    c.train.accum_steps = 1
    c.train.epochs = 1
    c.train.old_logprobs = "recompute"
    c.loss.kind = "grpo"
    c.loss.eps_low = 0.2
    c.loss.eps_high = 0.2
    c.loss.beta = 0.001
    c.loss.kl_estimator = "k3"
    c.optim.lr = 1e-4
    c.optim.b1, c.optim.b2 = 0.9, 0.99
    c.checkpoint.every = 5
    return c
