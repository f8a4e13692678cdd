"""WebAgent-R1 stage 2 (M-GRPO) for Qwen2.5-3B on a TPU pod, with the paper's / repo's hyperparameters.

RECIPES.md: lr 1e-6 constant, batch 16 tasks x G=4 trajectories, beta 0.001, eps 0.2, KL k3, Adam(0.9, 0.99),
max grad norm 0.01 (repo), max context 16,384, one sequence per trajectory with compressed history,
1/G 1/|tau| 1/|a| normalisation. FSDP over every chip, bf16 activations over fp32 master weights, remat.
Sized for a v5p-64 slice (32 chips): 64 trajectory rows per step = micro_batch 32 x accum 2. The model shape
is inline (nothing can be downloaded here); for a real run set model.source='hf' and model.path to the BC
checkpoint, which must have this shape.

Dry run (any devices): XLA_FLAGS=--xla_force_host_platform_device_count=8 python scripts/train.py \
  --config configs/grpo_tpu.py --dry_run --config.train.micro_batch=8 --config.train.accum_steps=8
"""

from jaxwebrl.config import default_config
from jaxwebrl.recipes.local import local_overrides, quick_overrides

QWEN25_3B = dict(
    architecture="qwen2", vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_layers=36,
    num_heads=16, num_kv_heads=2, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
    attention_bias=True, max_position_embeddings=32768, eos_token_id=151645, pad_token_id=151643,
)


def get_config():
    c = default_config()
    c.recipe = "webagent_r1"
    c.workdir = "runs/grpo_tpu"
    c.multihost = True  # jax.distributed.initialize() on the pod (coordinator auto-detected)
    c.mesh = {"data": 1, "fsdp": -1, "tensor": 1}
    c.model.source = "inline"
    c.model.shape = QWEN25_3B
    c.model.dtype = "bfloat16"
    c.model.param_dtype = "float32"
    c.model.remat = True
    c.model.scan_layers = True
    # TPU Pallas splash attention: 16k rows fit a v5e chip on a 32-chip slice (BUILD.md, dry-run memory)
    c.model.attention = "splash"
    c.data.kind = "online"  # rollouts from browsers (the local sites here; WebArena-Lite on a real setup)
    c.data.synthetic = False
    c.data.per = "trajectory"
    c.data.norm = "webagent_r1"
    c.train.steps = 1000
    c.train.groups_per_step = 16
    c.train.seq_len = 16384
    c.train.micro_batch = 32
    c.train.accum_steps = 2
    c.train.epochs = 1
    c.train.old_logprobs = "recompute"  # earlier turns are scored on the compressed context
    c.train.logits_chunk = 1024
    c.train.scale_adv_by_std = True
    c.loss.kind = "grpo"
    c.loss.eps_low = 0.2
    c.loss.eps_high = 0.2
    c.loss.beta = 0.001
    c.loss.kl_estimator = "k3"
    c.optim.lr = 1e-6
    c.optim.schedule = "constant"
    c.optim.b1, c.optim.b2 = 0.9, 0.99
    c.optim.weight_decay = 0.0
    c.optim.max_grad_norm = 0.01
    c.checkpoint.every = 20
    c.checkpoint.keep = 3
    c.checkpoint.best_metric = ""
    c.checkpoint.export_every = 100
    c.hardware.peak_flops = 459e12  # TPU v5p bf16 per chip

    # Rollouts: simplified HTML with ids, do()/exit() actions, compressed history, G=4, 15 steps (repo).
    c.tasks.suite = "local_sites"
    c.env.action_space = "webagent_r1"
    c.env.text_mode = "html"
    c.env.text_budget_chars = 48000
    c.env.num_browsers = 4
    c.env.contexts_per_browser = 16
    c.agent.strategy = "compress_past"
    c.agent.prompt_format = "webagent_r1"
    c.agent.max_steps = 15
    c.agent.max_context_tokens = 16384
    c.agent.max_new_tokens = 1024
    c.agent.temperature = 1.0
    c.agent.top_p = 1.0
    c.rollout.group_size = 4
    c.rollout.groups_per_iteration = 16  # batch 16 tasks
    c.rollout.max_concurrent_groups = 16
    c.engine.type = "sglang"  # SGLang servers (sgl_jax on TPU) behind engine.url(s); 'jax' runs the built-in sampler
    c.engine.launch = True
    c.engine.weight_sync = "disk"  # new weights loaded in place each iteration, no server restart
    c.rl.iterations = 1000
    c.rl.eval_every = 20

    # The local variant (--config.local=true): this recipe trained from scratch on MiniWoB++ on a laptop
    # (jaxwebrl/recipes/local.py); the paper's G=4, per-trajectory samples with compressed history.
    c.local_overrides = local_overrides("grpo_tpu")
    c.quick_overrides = quick_overrides("grpo_tpu")
    return c
