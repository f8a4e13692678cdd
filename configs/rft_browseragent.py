"""BrowserAgent stage 2, rejection-sampling fine-tuning online: 4 rollouts per question, keep questions with
0 < #correct < 4, train on the longest correct rollout (SFT loss), 2 epochs, lr 1e-6. Playwright actions
(webarena grammar), context = question + current page + all previous actions + all <conclusion>s."""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "browseragent"
    c.workdir = "runs/rft_browseragent"
    c.model.source = "hf"
    c.model.path = "checkpoints/browseragent-sft"  # the stage-1 SFT policy (configs/sft_browseragent.py)
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.data.kind = "online"
    c.data.synthetic = False
    c.data.per = "turn"
    c.data.norm = "token_mean"
    c.train.seq_len = 16384
    c.train.micro_batch = 32
    c.train.epochs = 2
    c.train.logits_chunk = 1024
    c.loss.kind = "sft"
    c.optim.lr = 1e-6
    c.tasks.suite = "local_sites"
    c.env.action_space = "webarena"
    c.env.text_mode = "axtree"
    c.env.num_browsers = 8
    c.env.contexts_per_browser = 8
    c.agent.strategy = "current_plus_history"
    c.agent.prompt_format = "browseragent"
    c.agent.max_steps = 30
    c.agent.max_context_tokens = 16384
    c.agent.max_new_tokens = 1024
    c.rollout.group_size = 4
    c.rollout.groups_per_iteration = 64
    c.rollout.max_concurrent_groups = 16
    c.engine.type = "sglang"
    c.engine.launch = True
    c.engine.weight_sync = "disk"  # new weights loaded in place each iteration, no server restart
    c.rl.iterations = 50

    # The local variant (--config.local=true): this recipe trained from scratch on MiniWoB++ on a laptop
    # (jaxwebrl/recipes/local.py); the SFT stage is behaviour cloning on the scripted demonstrations, and RFT mixes in 80% of them.
    c.local_overrides = local_overrides("rft_browseragent", rl=dict(demonstration_share=0.8))
    c.quick_overrides = quick_overrides("rft_browseragent")
    return c
