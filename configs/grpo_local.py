"""The main job on the embedded default: a small policy learns MiniWoB++ on CPU, no downloads.

    python scripts/train.py --config configs/grpo_local.py                    # full run (<= 30 min, 2 cores)
    python scripts/train.py --config configs/grpo_local.py --config.quick=true  # smoke run (<= 5 min)

Stages (jaxwebrl/main_job/stages.py): scripted solvers make demonstrations on training seeds -> a BPE
tokenizer and a small Qwen3-style model are built from scratch -> behaviour cloning (SFT) -> WebAgent-R1
M-GRPO with real Chromium, the JaxEngine and asynchronous group rollouts -> greedy evaluation of random / BC
/ RL on held-out seeds -> report.md, plots, TensorBoard logs, HF export. An interrupted run resumes per stage.
Measured runs and the studies behind each choice below: RESULTS.md.
"""

from jaxwebrl.config import default_config

# Six tasks with a scripted solver (BC demonstrates them) and six without (RL learns them from reward alone);
# the report splits RL - BC by the two.
DEMONSTRATED = "click-button,click-link,click-option,click-tab,click-checkboxes,focus-text"
TASKS = DEMONSTRATED + ",click-test,click-test-2,click-dialog,click-dialog-2,focus-text-2,click-widget"


def get_config():
    c = default_config()
    c.recipe = "webagent_r1"
    c.workdir = "runs/grpo_local"
    c.seed = 0
    c.mesh = {"data": 1, "fsdp": -1, "tensor": 1}

    c.model.source = "inline"  # replaced by the BC policy's export once behaviour cloning ran
    c.model.shape = dict(architecture="qwen3", vocab_size=1024, hidden_size=128, intermediate_size=384,
                         num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32, qk_norm=True,
                         tie_word_embeddings=True, max_position_embeddings=2048, rope_theta=10000.0)

    c.tasks.suite = "miniwob"
    c.tasks.train = TASKS
    c.tasks.eval_seeds = 20
    c.env.action_space = "bid"
    c.env.text_mode = "axtree"
    c.env.text_budget_chars = 1200
    c.env.page_metadata = False  # MiniWoB++ tasks are one page: the URL line would only carry the server's port
    c.env.relative_urls = True  # links as paths: the server's per-process port stays out of the prompts
    c.env.contexts_per_browser = 8

    c.agent.strategy = "compress_past"
    c.agent.prompt_format = "bid"
    # A model trained from scratch learns the action syntax from the demonstrations; the format's own
    # 21-action system prompt only costs tokens at every turn.
    c.agent.system_prompt = "You are a web agent. Answer with exactly one action, e.g. click('12')"
    c.agent.max_steps = 6
    c.agent.max_context_tokens = 2048
    c.agent.max_new_tokens = 24
    c.agent.max_format_errors = 2
    c.agent.temperature = 1.0

    c.data.kind = "online"
    # M-GRPO's objective and normalisation (1 / (G |tau_i| |a_ij|)), each turn scored on the exact context it
    # was sampled from (the paper's per-trajectory cut, configs/grpo_tpu.py, scores earlier actions after
    # their page was compressed away: a policy without reasoning text cannot see why it acted).
    c.data.per = "turn"
    c.data.norm = "webagent_r1"
    c.train.seq_len = 1024
    c.train.micro_batch = 8
    c.train.epochs = 2  # rollouts cost ~18 s per iteration, a pass over their samples ~4 s: use them twice
    c.train.old_logprobs = "recompute"

    c.rollout.group_size = 4
    c.rollout.groups_per_iteration = 8
    c.rollout.max_groups_per_iteration = 16  # dynamic sampling: train on groups whose rewards differ
    c.rollout.max_concurrent_groups = 2
    # Draw tasks by p(1 - p) of their recent success, so the rollout budget goes where GRPO has a signal.
    c.rollout.task_sampling = "learnability"
    c.train.dynamic_sampling = True
    c.engine.num_slots = 8
    c.engine.max_len = 2048
    c.engine.prefill_chunk = 128  # deterministic prefill: prompts cut on a grid of 128, reused in whole chunks

    c.loss.kind = "grpo"
    c.loss.eps_low = c.loss.eps_high = 0.2
    # A KL anchor to the BC policy and a smaller step than the paper's (beta 0.001) keep what BC knows.
    c.loss.beta = 0.04
    c.optim.lr = 2e-4
    # A fresh Adam's first steps move every weight by about lr whatever its gradient: warm up.
    c.optim.schedule = "warmup_constant"
    c.optim.warmup_steps = 40  # of ~140 RL optimizer steps
    c.optim.b1, c.optim.b2 = 0.9, 0.99
    c.optim.max_grad_norm = 1.0

    c.bc.enabled = True
    c.bc.demonstration_seeds = 100  # ~600 demonstrations in ~150 s
    c.bc.vocab_size = 1024
    c.bc.steps = 400
    c.bc.lr = 2e-3
    c.bc.micro_batch = 12
    c.bc.context_loss_weight = 0.1  # next-token prediction on the page tokens too, at a tenth of an action's weight
    c.bc.seq_len = 640  # the longest demonstration turn is ~570 tokens; rows of 1024 made BC steps 1.27x slower

    c.rl.iterations = 20
    # Same config and seed, same run: rounds follow the logical schedule (seed, iteration, group), the engine
    # is batch-invariant, so rollouts, batches and weights do not depend on machine load (RESULTS.md, issue 39).
    # 'async' is the throughput mode (groups train in completion order).
    c.rl.schedule = "deterministic"
    # Eight demonstrations ride in every RL batch as groups of one with advantage 1 (an SFT term at ratio ~1),
    # so the demonstrated tasks keep what BC taught while RL learns the others.
    c.rl.replay_demonstrations = 8
    c.rl.eval_every = 0
    c.report.enabled = True
    c.report.eval_seeds = 20  # 240 held-out episodes per policy (12 tasks)
    c.viewer.max_episodes = 1000  # all 720 evaluated episodes and the sampled rollouts (~2 KB each)
    c.checkpoint.every = 0
    c.checkpoint.keep = 2

    # Smoke variant (what the tests run): two tasks, a 2-layer model, one M-GRPO iteration on MiniWoB's own
    # reward (-1 wrong submit, 0 nothing done, +1 solved: failures differ, so a barely trained policy's groups
    # still carry a signal), collecting (dynamic sampling) until a group has reward variance.
    q = c.quick_overrides
    q.workdir = "runs/grpo_local_quick"
    q.tasks = dict(train="focus-text,click-button")
    q.reward = dict(source="raw")
    q.bc = dict(demonstration_seeds=8, steps=60, micro_batch=4)
    q.rl = dict(iterations=1)
    q.optim = dict(schedule="constant", warmup_steps=0)  # one iteration of a few steps: no room for a warmup
    q.agent = dict(temperature=0.5)  # a barely trained policy samples mostly noise at T=1
    q.rollout = dict(group_size=6, groups_per_iteration=1, max_groups_per_iteration=12)
    q.train = dict(dynamic_sampling=True)
    q.report = dict(eval_seeds=3)
    q.model = dict(shape=dict(c.model.shape.to_dict(), num_layers=2, hidden_size=64, intermediate_size=128, head_dim=16))
    return c
