"""The visual local run: the main job's stages with a vision-language policy that sees only pixels.

    python scripts/train.py --config configs/grpo_local_vl.py                    # full run
    python scripts/train.py --config configs/grpo_local_vl.py --config.quick=true  # smoke run (the test)

A tiny Qwen3-VL (the main job's 4-layer text decoder under a 2-block vision tower with DeepStack taps, its own
BPE tokenizer with the Qwen vision tokens and a transformers Qwen-VL image processor, all built here) sees
MiniWoB++ only as a 160 x 210 screenshot of the task area (`env.screenshot`, `env.text_mode='none'`: no HTML,
no accessibility tree; the goal is the task text, as in OpenWebRL's prompt) and acts with OpenWebRL's tools
at 0..1000 coordinates. Stages (jaxwebrl/main_job/stages.py): the scripted solvers' steps written as
box-centre clicks (demos/actions.py) -> tokenizer, processor and initial model -> behaviour cloning
on the demonstrations with their screenshots -> MM-GRPO (OpenWebRL's recipe: per-turn samples with the
exact rollout context, asymmetric clip, PPO epochs, dynamic sampling; the last screenshot as an image,
`last_k_screenshots` with K = 1) with the JaxEngine running the vision encoder in prefill -> greedy
evaluation of random / BC / RL on held-out seeds with the main job's report (paired tests).

From the main job it keeps what made RL a gain at this scale (RESULTS.md): a KL anchor to the BC policy,
a warmup, the page tokens at a tenth of the weight in BC, and demonstrations replayed in every RL batch.
Measured runs: RESULTS.md ("The visual local run").
"""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import SMALL_QWEN3

# Tasks with a scripted solver whose targets a coordinate click reaches on one screen, in one to three steps.
TASKS = "click-button,click-link,click-tab,focus-text,click-option"


def get_config():
    c = default_config()
    c.recipe = "openwebrl"
    c.workdir = "runs/grpo_local_vl"
    c.seed = 0
    c.mesh = {"data": 1, "fsdp": -1, "tensor": 1}

    c.model.source = "inline"  # replaced by the BC policy's export once behaviour cloning ran
    c.model.shape = dict(SMALL_QWEN3, max_position_embeddings=2048)
    c.model.vision = dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=16,
                          num_position_embeddings=64, deepstack_visual_indexes=[0, 1])
    c.model.scan_layers = False

    c.tasks.suite = "miniwob"
    c.tasks.train = TASKS
    c.tasks.eval_seeds = 20
    c.env.action_space = "openwebrl"
    c.env.text_mode = "none"  # pixels only
    c.env.screenshot = True
    c.env.viewport_width, c.env.viewport_height = 160, 210  # the MiniWoB++ task area
    c.env.page_metadata = False  # one-page tasks: the URL line would only carry the server's port
    c.env.contexts_per_browser = 8
    c.env.step_timeout_s = 15.0

    c.agent.strategy = "last_k_screenshots"
    c.agent.last_k = 1
    c.agent.prompt_format = "openwebrl"
    c.agent.system_prompt = "You are a web agent. Answer with your next action."
    c.agent.max_steps = 6
    c.agent.max_context_tokens = 512  # = train.seq_len: a VL row is never cut (its image tokens must stay whole)
    c.agent.max_new_tokens = 48
    c.agent.max_format_errors = 2
    c.agent.temperature = 1.0
    c.agent.episode_timeout_s = 180.0

    c.data.kind = "online"
    c.data.per = "turn"
    c.data.norm = "per_turn"
    c.train.seq_len = 512  # a turn holds 35 image tokens and every earlier response (~35 tokens) and feedback
    c.train.micro_batch = 8
    c.train.epochs = 2
    c.train.old_logprobs = "recompute"

    c.rollout.group_size = 4
    c.rollout.groups_per_iteration = 8
    c.rollout.max_groups_per_iteration = 16
    c.rollout.max_concurrent_groups = 2
    c.rollout.task_sampling = "learnability"
    c.train.dynamic_sampling = True
    c.engine.num_slots = 8
    c.engine.max_len = 1024

    c.loss.kind = "grpo"
    c.loss.eps_low, c.loss.eps_high = 0.2, 0.28
    c.loss.beta = 0.04
    c.optim.lr = 2e-4
    c.optim.schedule = "warmup_constant"
    c.optim.warmup_steps = 40
    c.optim.b1, c.optim.b2 = 0.9, 0.98
    c.optim.weight_decay = 0.1
    c.optim.max_grad_norm = 1.0

    c.bc.enabled = True
    c.bc.demonstration_seeds = 60
    c.bc.vocab_size = 1024
    c.bc.steps = 400
    c.bc.lr = 2e-3
    c.bc.micro_batch = 12
    c.bc.context_loss_weight = 0.1
    c.bc.seq_len = 256  # VL rows are not packed: one turn per row (the longest demonstration turn is ~200)

    c.rl.iterations = 12
    c.rl.schedule = "deterministic"  # the same seed gives the same run whatever the machine's load (grpo_local.py)
    c.rl.replay_demonstrations = 8
    c.rl.eval_every = 0
    c.report.enabled = True
    c.report.eval_seeds = 20
    c.viewer.max_episodes = 1000

    q = c.quick_overrides
    q.workdir = "runs/grpo_local_vl_quick"
    q.tasks = dict(train="focus-text,click-button", eval_seeds=2)
    q.bc = dict(demonstration_seeds=4, steps=30, micro_batch=4)
    q.rl = dict(iterations=1)
    # 30 BC steps do not teach the tool-call format: every sampled episode ends in format errors (reward -1,
    # groups without variance). The smoke run keeps them, so the iteration trains on its rollouts and on the
    # replayed demonstrations (what it checks: the visual pipeline runs end to end).
    q.train = dict(dynamic_sampling=False)
    q.optim = dict(schedule="constant", warmup_steps=0)
    q.agent = dict(temperature=0.5, max_steps=3)
    q.rollout = dict(group_size=4, groups_per_iteration=1, max_groups_per_iteration=6)
    q.report = dict(eval_seeds=2)
    q.model = dict(shape=dict(c.model.shape.to_dict(), num_layers=2, hidden_size=64, intermediate_size=128, head_dim=16))
    return c
