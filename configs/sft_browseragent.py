"""BrowserAgent SFT (and RFT with data.kind='trajectories': keep tasks with 0 < #correct < 4, the longest
correct rollout): lr 5e-6 SFT (1e-6 RFT), 2 epochs, per-step samples (question, current observation,
previous actions and conclusions) -> (think, conclusion, action)."""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "browseragent"
    c.workdir = "runs/sft_browseragent"
    c.model.source = "hf"
    c.model.path = "checkpoints/Qwen2.5-7B-Instruct"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "sft"
    c.data.synthetic = False
    # The released SFT set converted to our records: python -m jaxwebrl.importers browseragent IN OUT --tokenizer DIR
    c.data.train_files = "data/browseragent_sft.jsonl"
    # The format the policy is trained to speak (as in configs/rft_browseragent.py).
    c.env.action_space = "webarena"
    c.agent.prompt_format = "browseragent"
    c.agent.strategy = "current_plus_history"
    c.data.per = "turn"
    c.data.norm = "token_mean"
    c.train.steps = 2000  # ~2 epochs of the set; set from its size
    c.train.seq_len = 8192
    c.train.micro_batch = 16
    c.train.accum_steps = 4
    c.train.logits_chunk = 1024
    c.loss.kind = "sft"
    c.optim.lr = 5e-6
    c.optim.schedule = "warmup_cosine"
    c.optim.warmup_ratio = 0.03

    # The local variant (--config.local=true): this recipe trained from scratch on MiniWoB++ on a laptop
    # (jaxwebrl/recipes/local.py); the demonstrations come from the scripted solvers (data.kind='online' with bc.enabled runs that stage; no RL).
    c.local_overrides = local_overrides("sft_browseragent", data=dict(kind="online", train_files=""), rl=dict(iterations=0), bc=dict(lr=2e-3))
    c.quick_overrides = quick_overrides("sft_browseragent", rl=dict(iterations=0))
    return c
