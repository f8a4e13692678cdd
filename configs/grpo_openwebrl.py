"""OpenWebRL MM-GRPO with its Qwen3-VL-4B policy on screenshots: per-turn samples with the exact rollout
context (the last screenshot as an image, every earlier response and feedback as text), no 1/|tau|
normalisation, asymmetric clip (0.2, 0.28), no KL, PPO epochs 2, dynamic sampling, Adam(0.9, 0.98), weight
decay 0.1, constant lr 1e-6, 256 turn samples per step.

The text stand-in (a Qwen3-4B reading the accessibility tree with each element's box centre on the 0..1000
grid, what this config ran before the VL path trained end to end) is the same run with
`--config.model.path=checkpoints/Qwen3-4B --config.env.screenshot=false --config.env.text_mode=axtree
--config.env.box_centres=true`; the local variant (`--config.local=true`) uses it, with a small text model."""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides


def get_config():
    c = default_config()
    c.recipe = "openwebrl"
    c.workdir = "runs/grpo_openwebrl"
    c.model.source = "hf"
    c.model.path = "checkpoints/Qwen3-VL-4B-Instruct"
    c.model.dtype = "bfloat16"
    c.model.remat = True
    c.model.attention = "splash"  # the TPU flash kernel: dense attention does not fit 32k (BUILD.md)
    c.data.kind = "online"
    c.data.synthetic = False
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

    # Rollouts: 13 coordinate tools as JSON tool calls, all responses + feedback kept, the last K=1 screenshot
    # (1280x720) with the page metadata as text, temperature 0.8, 48 effective groups of 5, horizon 15.
    c.tasks.suite = "local_sites"
    c.env.action_space = "openwebrl"
    c.env.text_mode = "none"
    c.env.screenshot = True
    c.env.page_metadata = True
    c.env.num_browsers = 10
    c.env.contexts_per_browser = 10
    c.env.step_timeout_s = 45.0
    c.agent.episode_timeout_s = 600.0
    c.agent.strategy = "last_k_screenshots"
    c.agent.prompt_format = "openwebrl"
    c.agent.last_k = 1
    c.agent.max_steps = 15
    # The paper's rollout-length curriculum: a 15-step stage, then 30 steps (it does not give the switch
    # point; here halfway through the 200 iterations).
    c.rollout.horizon_schedule = "0:15,100:30"
    c.agent.max_context_tokens = 32768
    c.agent.max_new_tokens = 2048
    c.agent.max_format_errors = 3
    c.agent.temperature = 0.8
    c.rollout.group_size = 5
    c.rollout.groups_per_iteration = 48
    c.rollout.max_concurrent_groups = 20
    c.rollout.max_groups_per_iteration = 400
    c.engine.type = "sglang"
    c.engine.launch = True
    c.engine.weight_sync = "disk"  # new weights loaded in place each iteration, no server restart
    c.rl.iterations = 200

    # The local variant (--config.local=true): this recipe trained from scratch on MiniWoB++ on a laptop
    # (jaxwebrl/recipes/local.py); the 15 -> 30 horizon curriculum becomes 4 -> 6 steps at iteration 3 (3 -> 5 at iteration 1 in the smoke run).
    # The local policy is the text stand-in (configs/grpo_local_vl.py is the visual local run).
    c.local_overrides = local_overrides("grpo_openwebrl", rollout=dict(horizon_schedule="0:4,3:6"),
                                        env=dict(screenshot=False, box_centres=True))
    c.quick_overrides = quick_overrides("grpo_openwebrl", rollout=dict(horizon_schedule="0:3,1:5"))
    return c
