"""The training config schema (`default_config`) and its start-up validation.

`configs/*.py` start from `default_config()` and change values; every field a config may set exists here
with its default, so `validate_config` can reject unknown fields (typos) by comparing against it. Bad
values stop the run at start with one `ConfigError` that names the field and the fix (DESIGN principle 8).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
from typing import Any, Collection, Sequence

import ml_collections

from jaxwebrl.models.config import ModelConfig

RECIPES = ("sft", "webagent_r1", "openwebrl", "webgym", "browseragent", "nnetnav")


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field and the fix."""


def default_config() -> ml_collections.ConfigDict:
    """Every field, with defaults that train a tiny model by SFT on generated demo data."""
    c = ml_collections.ConfigDict()
    c.recipe = "sft"
    c.seed = 0
    c.workdir = "runs/default"
    c.multihost = False  # True: jax.distributed.initialize() (auto-detect on Cloud TPU)
    c.mesh = ml_collections.ConfigDict({"data": 1, "fsdp": -1, "tensor": 1})

    c.model = ml_collections.ConfigDict()
    c.model.source = "tiny"  # tiny (generated, with tokenizer) | hf (a local HF dir) | inline (shape below)
    c.model.path = ""  # hf: the checkpoint dir; tiny: where to write it ('' = <workdir>/tiny_model)
    c.model.arch = "qwen3"  # tiny: architecture family
    c.model.shape = ml_collections.ConfigDict()  # inline (or overrides for tiny): ModelConfig fields
    c.model.dtype = "float32"  # activation dtype
    c.model.param_dtype = "float32"  # master weights
    c.model.remat = False
    c.model.scan_layers = True
    c.model.ref_path = ""  # frozen reference model (beta > 0); '' = the initial policy

    c.data = ml_collections.ConfigDict()
    c.data.kind = "sft"  # sft: trajectories are demonstrations | trajectories: rewarded rollouts for GRPO
    c.data.train_files = ""  # comma-separated .jsonl / .array_record trajectory files
    c.data.demo = True  # no files: generate a demo JSONL with the tiny tokenizer into the workdir
    c.data.demo_records = 64
    c.data.per = "turn"  # turn | trajectory (how trajectories become samples)
    c.data.norm = "token_mean"  # webagent_r1 | per_turn | token_mean | seq_mean_token_mean | traj_sum
    c.data.mode = "pack"  # pack | pad
    c.data.shuffle = True

    c.train = ml_collections.ConfigDict()
    c.train.steps = 100  # optimizer steps (SFT) / rollout batches (GRPO from records)
    c.train.seq_len = 256
    c.train.micro_batch = 8  # rows per micro-batch (global); divisible by data x fsdp
    c.train.accum_steps = 1  # micro-batches per optimizer step
    c.train.epochs = 1  # PPO epochs over one rollout batch
    c.train.groups_per_step = 4  # GRPO from records: task groups per rollout batch
    c.train.old_logprobs = "engine"  # engine (from the rollout) | recompute (trainer forward, once per batch)
    c.train.logits_chunk = 0  # compute logprobs in length chunks of this size (0 = all at once)
    c.train.scale_adv_by_std = True
    c.train.adv_eps = 1e-6
    c.train.dynamic_sampling = False  # drop zero-variance groups

    c.loss = ml_collections.ConfigDict()
    c.loss.kind = "sft"  # sft | grpo
    c.loss.eps_low = 0.2
    c.loss.eps_high = 0.2
    c.loss.dual_clip = 0.0
    c.loss.beta = 0.0
    c.loss.kl_estimator = "k3"

    c.optim = ml_collections.ConfigDict()
    c.optim.lr = 1e-3
    c.optim.schedule = "constant"  # constant | warmup_cosine | warmup_constant
    c.optim.warmup_steps = 0
    c.optim.warmup_ratio = 0.0
    c.optim.final_lr_ratio = 0.0
    c.optim.b1 = 0.9
    c.optim.b2 = 0.999
    c.optim.eps = 1e-8
    c.optim.weight_decay = 0.0
    c.optim.max_grad_norm = 1.0

    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.dir = ""  # '' = <workdir>/checkpoints
    c.checkpoint.every = 50
    c.checkpoint.keep = 3  # keep the last N
    c.checkpoint.best_metric = ""  # also keep the best checkpoint by this metric ('' = off)
    c.checkpoint.best_mode = "min"
    c.checkpoint.async_save = True
    c.checkpoint.resume = False
    c.checkpoint.export_every = 0  # HF export every N steps (0 = only at the end)
    c.checkpoint.export_dir = ""  # '' = <workdir>/hf

    c.log = ml_collections.ConfigDict()
    c.log.every = 1
    c.log.dir = ""  # '' = <workdir>/logs
    c.log.tensorboard = True
    c.log.progress = True

    c.hardware = ml_collections.ConfigDict()
    c.hardware.peak_flops = 0.0  # per chip; 0 = from the table by device kind

    # ---- online RL (data.kind='online'): browsers, agent, rollout, engine ----------------------------
    c.env = ml_collections.ConfigDict()
    c.env.suite = "miniwob"  # miniwob | local_sites
    c.env.tasks = ""  # comma-separated task names ('' = the suite's train split)
    c.env.eval_tasks = ""  # held-out tasks for evaluation ('' = the training tasks, on held-out seeds)
    c.env.action_space = "webagent_r1"  # webarena | webagent_r1 | openwebrl | bid
    c.env.text_mode = "html"  # axtree | html | both | none
    c.env.text_budget_chars = 16000
    c.env.page_metadata = True  # url/tabs/scroll/focus with each observation (the URL line in text prompts)
    c.env.relative_urls = False  # same-origin link urls as paths (keeps a local server's port out of prompts)
    c.env.num_browsers = 1
    c.env.contexts_per_browser = 8
    c.env.train_seeds = 1000  # task instances to draw training episodes from
    c.env.eval_seeds = 10  # held-out instances per evaluation task
    c.env.difficulty_ratio = ""  # e.g. 'easy:2,medium:5,hard:3' (WebGym); '' = uniform over tasks
    c.env.step_timeout_s = 45.0
    c.env.episode_timeout_s = 600.0
    c.env.reward = "success"  # success (binary, the papers) | raw (the environment's own reward, e.g. MiniWoB -1..1)

    c.agent = ml_collections.ConfigDict()
    c.agent.strategy = "compress_past"  # compress_past | last_k_screenshots | memory | current_plus_history
    c.agent.prompt_format = "webagent_r1"  # webagent_r1 | openwebrl | webgym | browseragent | bid
    c.agent.max_steps = 15
    c.agent.max_context_tokens = 16384
    c.agent.max_new_tokens = 1024
    c.agent.max_format_errors = 3
    c.agent.last_k = 1
    c.agent.temperature = 1.0
    c.agent.top_p = 1.0
    c.agent.system_prompt = ""  # '' = the prompt format's own (action list + output format)

    c.rollout = ml_collections.ConfigDict()
    c.rollout.group_size = 4  # G trajectories per task instance
    c.rollout.mode = "async"  # async | lockstep (benchmark baseline)
    c.rollout.max_concurrent_groups = 2
    c.rollout.max_policy_lag = 1  # drop groups more than this many policy versions old
    c.rollout.groups_per_iteration = 4  # accepted groups per update
    c.rollout.max_groups_per_iteration = 0  # give up after this many tried (0 = 4x groups_per_iteration)
    c.rollout.limit_navigate = 0  # per-operation concurrency (0 = unlimited)
    c.rollout.limit_execute = 0
    c.rollout.limit_evaluate = 0
    c.rollout.limit_generate = 0
    c.rollout.task_sampling = "uniform"  # uniform | learnability (draw tasks by p(1-p) of recent success)
    c.rollout.horizon_per_difficulty = ""  # e.g. 'easy:10,medium:20,hard:30' (WebGym)
    c.rollout.replay_iterations = 0  # WebGym replay: keep the last N iterations' samples (0 = off)
    c.rollout.replay_power = 1.0
    c.rollout.replay_samples = 0  # samples drawn per update from the replay buffer

    c.engine = ml_collections.ConfigDict()
    c.engine.type = "jax"  # jax | sglang
    c.engine.num_slots = 8
    c.engine.max_len = 4096
    c.engine.seed = 0
    c.engine.checkpoint = ""
    c.engine.url = ""
    c.engine.launch = False
    c.engine.weight_sync = "disk"  # disk | restart (sglang)
    c.engine.export_dir = ""
    c.engine.request_timeout = 600.0
    c.engine.retries = 3

    c.rl = ml_collections.ConfigDict()
    c.rl.iterations = 10
    c.rl.eval_every = 0  # greedy evaluation on held-out seeds every N iterations (0 = off)
    # Demonstrations mixed into every iteration's batch, each its own group with a fixed advantage: at ratio ~1
    # that is an SFT term on demonstrated tasks beside the policy gradient (0 = off).
    c.rl.demo_replay = 0
    c.rl.demo_advantage = 1.0
    c.rl.demo_file = ""  # trajectories to replay ('' = the run's BC demonstrations, when bc.enabled)

    # ---- behaviour cloning from scripted demonstrations before RL (the local main job) ---------------
    c.bc = ml_collections.ConfigDict()
    c.bc.enabled = False
    c.bc.demo_seeds = 40  # training instances per task played by the scripted solver
    # Tasks to demonstrate ('' = every run task with a scripted solver); RL learns the others from reward alone.
    c.bc.tasks = ""
    c.bc.vocab_size = 1024  # tokenizer trained on the demonstrations
    c.bc.steps = 200
    c.bc.lr = 1e-3
    c.bc.micro_batch = 8
    # Also train next-token prediction on the page/prompt tokens, each weighted this much relative to an action
    # token (0 = actions only): a denser signal for a model learning to read pages from scratch.
    c.bc.context_loss_weight = 0.0
    c.bc.seq_len = 0  # packed row length for the demonstrations (0 = train.seq_len); attention costs ~T^2 per row

    c.report = ml_collections.ConfigDict()
    c.report.enabled = False  # evaluate random / BC / RL and write report.md + plots
    c.report.eval_seeds = 20
    c.quick = False  # true: apply `quick_overrides` (the config's smoke variant) before the run
    c.quick_overrides = ml_collections.ConfigDict()  # same structure as the config, only the changed fields
    return c


def command_line_fields(argv: Sequence[str]) -> set[str]:
    """Dotted config fields set on the command line (`--config.a.b=1` or `--config.a.b 1`)."""
    return {a[len("--config."):].split("=", 1)[0] for a in argv if a.startswith("--config.")}


def apply_quick(cfg: ml_collections.ConfigDict, explicit: Collection[str] = ()) -> ml_collections.ConfigDict:
    """With `quick=True`, overlay `quick_overrides` on the config (so `--config.quick=true` works even though
    absl applies command-line overrides after get_config()). Fields in `explicit` (those set on the command
    line) keep their value: `--config.quick=true --config.workdir=X` runs the quick variant in X."""
    if not cfg.quick:
        return cfg
    _unknown_fields(cfg.quick_overrides, default_config(), prefix="quick_overrides.")
    out = ml_collections.ConfigDict(cfg.to_dict())
    keep = set(explicit)

    def overlay(dst: ml_collections.ConfigDict, src: ml_collections.ConfigDict, prefix: str) -> None:
        for key, value in src.items():
            name = prefix + key
            if name in keep:
                continue
            if isinstance(value, ml_collections.ConfigDict):
                overlay(dst[key], value, name + ".")
            else:
                dst[key] = value

    overlay(out, cfg.quick_overrides, "")
    return out


# ---- validation ------------------------------------------------------------------------------------


def _fail(field: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"config.{field}: {problem}; {fix}")


def _unknown_fields(cfg: Any, schema: Any, prefix: str = "") -> None:
    for key in cfg.keys():
        path = f"{prefix}{key}"
        if path in ("model.shape", "quick_overrides.model.shape"):
            fields = {f.name for f in dataclasses.fields(ModelConfig)}
            for k in cfg[key].keys():
                if k not in fields:
                    near = difflib.get_close_matches(k, fields, 1)
                    raise _fail(f"model.shape.{k}", "is not a ModelConfig field",
                                f"did you mean model.shape.{near[0]}?" if near else f"use one of {sorted(fields)}")
            continue
        if path == "quick_overrides":  # checked against the whole schema by apply_quick
            continue
        if key not in schema:
            near = difflib.get_close_matches(key, list(schema.keys()), 1)
            hint = f"did you mean config.{prefix}{near[0]}?" if near else f"known fields: {sorted(schema.keys())}"
            raise _fail(path, "is not a known field", hint)
        if isinstance(schema[key], ml_collections.ConfigDict):
            _unknown_fields(cfg[key], schema[key], path + ".")


def _choice(cfg: Any, field: str, options: tuple[str, ...]) -> None:
    obj = cfg
    for part in field.split("."):
        obj = obj[part]
    if obj not in options:
        raise _fail(field, f"{obj!r} is not allowed", f"use one of {options}")


def mesh_sizes(mesh: Any, num_devices: int) -> dict[str, int]:
    """Resolve -1 in config.mesh against the device count (raising ConfigError when it cannot fit)."""
    sizes = {a: int(mesh.get(a, 1)) for a in ("data", "fsdp", "tensor")}
    for k in mesh.keys():
        if k not in sizes:
            raise _fail(f"mesh.{k}", "is not a mesh axis", "use data, fsdp and tensor")
    fixed = math.prod(v for v in sizes.values() if v != -1)
    if list(sizes.values()).count(-1) > 1:
        raise _fail("mesh", f"{dict(sizes)} has more than one -1", "set at most one axis to -1")
    if any(v == 0 or v < -1 for v in sizes.values()):
        raise _fail("mesh", f"{dict(sizes)} has a non-positive size", "use positive sizes or one -1")
    if fixed > num_devices:
        raise _fail("mesh", f"{dict(sizes)} needs {fixed} devices but only {num_devices} exist",
                    "shrink the mesh or set one axis to -1 (all remaining devices)")
    for k, v in sizes.items():
        if v == -1:
            if num_devices % fixed:
                raise _fail(f"mesh.{k}", f"-1 cannot fill {num_devices} devices with the other axes {fixed}",
                            "make the other axes divide the device count")
            sizes[k] = num_devices // fixed
    return sizes


def validate_config(cfg: ml_collections.ConfigDict, num_devices: int, check_paths: bool = True) -> dict[str, int]:
    """Raise ConfigError for the first bad value; returns the resolved mesh sizes."""
    _unknown_fields(cfg, default_config())
    _choice(cfg, "recipe", RECIPES)
    _choice(cfg, "model.source", ("tiny", "hf", "inline"))
    _choice(cfg, "data.kind", ("sft", "trajectories", "online"))
    _choice(cfg, "env.suite", ("miniwob", "local_sites"))
    _choice(cfg, "env.action_space", ("webarena", "webagent_r1", "openwebrl", "bid"))
    _choice(cfg, "env.text_mode", ("axtree", "html", "both", "none"))
    _choice(cfg, "env.reward", ("success", "raw"))
    _choice(cfg, "agent.strategy", ("compress_past", "last_k_screenshots", "memory", "current_plus_history"))
    _choice(cfg, "agent.prompt_format", ("webagent_r1", "openwebrl", "webgym", "browseragent", "bid"))
    _choice(cfg, "rollout.mode", ("async", "lockstep"))
    _choice(cfg, "rollout.task_sampling", ("uniform", "learnability"))
    _choice(cfg, "engine.type", ("jax", "sglang"))
    _choice(cfg, "data.per", ("turn", "trajectory"))
    _choice(cfg, "data.norm", ("webagent_r1", "per_turn", "token_mean", "seq_mean_token_mean", "traj_sum"))
    _choice(cfg, "data.mode", ("pack", "pad"))
    _choice(cfg, "loss.kind", ("sft", "grpo"))
    _choice(cfg, "loss.kl_estimator", ("k1", "k2", "k3"))
    _choice(cfg, "optim.schedule", ("constant", "warmup_cosine", "warmup_constant"))
    _choice(cfg, "train.old_logprobs", ("engine", "recompute"))
    _choice(cfg, "checkpoint.best_mode", ("min", "max"))
    for field in ("model.dtype", "model.param_dtype"):
        _choice(cfg, field, ("float32", "bfloat16", "float16"))
    for field in ("train.steps", "train.seq_len", "train.micro_batch", "train.accum_steps", "train.epochs"):
        section, key = field.split(".")
        if int(cfg[section][key]) < 1:
            raise _fail(field, f"{cfg[section][key]} must be >= 1", "set a positive integer")
    if cfg.loss.dual_clip and cfg.loss.dual_clip <= 1:
        raise _fail("loss.dual_clip", f"{cfg.loss.dual_clip} must be > 1", "use e.g. 3.0, or 0 to disable")
    if cfg.rl.demo_replay < 0:
        raise _fail("rl.demo_replay", f"{cfg.rl.demo_replay} must be >= 0", "set how many demonstrations each RL batch replays, or 0")
    if cfg.bc.context_loss_weight < 0:
        raise _fail("bc.context_loss_weight", f"{cfg.bc.context_loss_weight} must be >= 0",
                    "use 0 (actions only) or a positive weight for the page tokens, e.g. 0.1")
    if cfg.optim.lr <= 0:
        raise _fail("optim.lr", f"{cfg.optim.lr} must be > 0", "set a positive learning rate")
    if cfg.train.logits_chunk and cfg.train.seq_len % cfg.train.logits_chunk:
        raise _fail("train.logits_chunk", f"{cfg.train.logits_chunk} does not divide train.seq_len={cfg.train.seq_len}",
                    "use a divisor of seq_len, or 0")

    sizes = mesh_sizes(cfg.mesh, num_devices)
    dp = sizes["data"] * sizes["fsdp"]
    if cfg.train.micro_batch % dp:
        raise _fail("train.micro_batch", f"{cfg.train.micro_batch} is not divisible by the data-parallel size {dp} "
                    f"(mesh data={sizes['data']} x fsdp={sizes['fsdp']})",
                    f"set it to a multiple of {dp} (e.g. {dp * max(1, cfg.train.micro_batch // dp)}) or change config.mesh")
    if cfg.model.source == "inline":
        for k in ("vocab_size", "hidden_size", "num_layers"):
            if k not in cfg.model.shape:
                raise _fail(f"model.shape.{k}", "is required for model.source='inline'", "give the model shape inline")

    if check_paths:
        if cfg.model.source == "hf":
            if not cfg.model.path:
                raise _fail("model.path", "is empty but model.source='hf'", "point it at a HuggingFace checkpoint dir")
            if not os.path.isfile(os.path.join(cfg.model.path, "config.json")):
                raise _fail("model.path", f"{cfg.model.path!r} has no config.json",
                            "point it at a HuggingFace checkpoint directory (config.json + safetensors)")
        if cfg.model.ref_path and not os.path.isfile(os.path.join(cfg.model.ref_path, "config.json")):
            raise _fail("model.ref_path", f"{cfg.model.ref_path!r} has no config.json",
                        "point it at a HuggingFace checkpoint dir, or '' to use the initial policy")
        for f in data_files(cfg) if cfg.data.kind != "online" else []:
            if not os.path.exists(f):
                raise _fail("data.train_files", f"{f!r} does not exist", "fix the path, or leave it empty with data.demo=True")
        if cfg.data.kind != "online" and not data_files(cfg) and not cfg.data.demo:
            raise _fail("data.train_files", "is empty and data.demo=False", "give .jsonl/.array_record files or set data.demo=True")
        if cfg.checkpoint.resume:
            d = checkpoint_dir(cfg)
            if not os.path.isdir(d) or not any(n.isdigit() for n in os.listdir(d)):
                raise _fail("checkpoint.resume", f"is true but {d!r} holds no checkpoint",
                            "set checkpoint.dir (or workdir) to a run that saved one, or resume=false")
    return sizes


def data_files(cfg: ml_collections.ConfigDict) -> list[str]:
    return [f.strip() for f in str(cfg.data.train_files).split(",") if f.strip()]


def checkpoint_dir(cfg: ml_collections.ConfigDict) -> str:
    return os.path.abspath(cfg.checkpoint.dir or os.path.join(cfg.workdir, "checkpoints"))


def model_config_from(cfg: ml_collections.ConfigDict, base: ModelConfig | None = None) -> ModelConfig:
    """ModelConfig for `inline` (or `base` from a checkpoint) with the config's numerics applied."""
    shape = dict(cfg.model.shape.to_dict()) if cfg.model.shape else {}
    for k in ("rope_scaling", "hf_extra"):
        if k in shape and shape[k] is not None:
            shape[k] = tuple(tuple(x) for x in shape[k])
    numerics = dict(dtype=cfg.model.dtype, param_dtype=cfg.model.param_dtype, remat=cfg.model.remat,
                    scan_layers=cfg.model.scan_layers)
    if base is None:
        return ModelConfig(**shape, **numerics)
    return base.replace(**shape, **numerics)
