"""WebGym filtered REINFORCE: sum_t log pi(a_t) * 1[R=1], steps whose observation did not change dropped; no
ratio, no KL, no baseline; per-step samples, sum over tokens and mean over trajectories; max grad norm 1."""

from jaxwebrl.train.config import default_config


def get_config():
    c = default_config()
    c.recipe = "webgym"
    c.workdir = "runs/reinforce_webgym"
    c.model.source = "hf"
    c.model.path = "checkpoints/Qwen3-8B"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "trajectories"
    c.data.demo = False
    c.data.train_files = "data/webgym_rollouts.jsonl"
    c.data.per = "turn"
    c.data.norm = "traj_sum"
    c.train.groups_per_step = 64
    c.train.seq_len = 16384
    c.train.micro_batch = 32
    c.train.accum_steps = 4
    c.train.epochs = 2  # each sample trained ~2 times
    c.train.logits_chunk = 1024
    c.loss.kind = "sft"
    c.optim.lr = 1e-6
    c.optim.max_grad_norm = 1.0
    return c
