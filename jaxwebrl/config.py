"""The run config: the packages' own sections composed into one tree, converted and validated once.

Users write `configs/*.py` whose `get_config()` starts from `default_config()` (an ml_collections ConfigDict,
so `--config.optim.lr=1e-4` works on the command line) and changes values. `parse_config` turns that tree
into a `RunConfig` of frozen dataclasses, one per section, each defined next to the code it configures:

| section    | class              | module                         |
|------------|--------------------|--------------------------------|
| mesh       | MeshConfig         | jaxwebrl.sharding              |
| model      | ModelSetup         | jaxwebrl.models.setup          |
| data       | DataConfig         | jaxwebrl.data.config           |
| train      | TrainConfig        | jaxwebrl.train.config          |
| loss       | LossConfig         | jaxwebrl.train.losses          |
| optim      | OptimConfig        | jaxwebrl.train.optim           |
| checkpoint | CheckpointConfig   | jaxwebrl.train.checkpoint      |
| log        | LogConfig          | jaxwebrl.train.metrics         |
| hardware   | HardwareConfig     | jaxwebrl.train.metrics         |
| tasks      | TasksConfig        | jaxwebrl.rollout.config        |
| env        | BrowserConfig      | jaxwebrl.browser.config        |
| agent      | AgentConfig        | jaxwebrl.agent.episode         |
| rollout    | RolloutConfig      | jaxwebrl.rollout.config        |
| engine     | EngineConfig       | jaxwebrl.engines.config        |
| reward     | RewardConfig       | jaxwebrl.recipes.config        |
| rl, bc, report | RLConfig, BCConfig, ReportConfig | jaxwebrl.main_job.config |
| reward.judge | JudgeConfig     | jaxwebrl.judges.config         |
| viewer     | ViewerConfig       | jaxwebrl.viewer.config         |
| nnetnav    | NNetNavConfig      | jaxwebrl.nnetnav.config        |

Each section checks its own fields (choices come from its package's registries); this module adds the
section's path to the message, rejects unknown fields with "did you mean", and checks what spans sections
(batch vs mesh, recipe vs data kind, paths). Bad values stop the run at start with one `ConfigError` that
names the field and the fix (DESIGN principle 8).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import os
import typing
from types import ModuleType
from typing import Any, Collection, Mapping, Sequence

import ml_collections

from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.browser.config import BrowserConfig, EnvConfig
from jaxwebrl.data.config import DataConfig
from jaxwebrl.engines.config import EngineConfig
from jaxwebrl.fields import ConfigError, FieldError, with_changes
from jaxwebrl.main_job.config import BCConfig, ReportConfig, RLConfig
from jaxwebrl.models.attention import check_attention_fits
from jaxwebrl.models.setup import ModelSetup
from jaxwebrl.nnetnav.config import NNetNavConfig
from jaxwebrl.recipes.config import RewardConfig
from jaxwebrl.recipes.papers import get_recipe, recipe_names
from jaxwebrl.rollout.config import RolloutConfig, TasksConfig
from jaxwebrl.sharding import MeshConfig, ShardingError
from jaxwebrl.train.checkpoint import CheckpointConfig, has_checkpoint
from jaxwebrl.train.config import TrainConfig
from jaxwebrl.train.losses import LossConfig
from jaxwebrl.train.metrics import HardwareConfig, LogConfig
from jaxwebrl.train.optim import OptimConfig
from jaxwebrl.viewer.config import ViewerConfig

__all__ = ["ConfigError", "RunConfig", "SECTIONS", "apply_variants", "command_line_fields", "default_config",
           "parse_config", "resolve_pretrained", "sibling_config", "sibling_module", "validate_config", "with_changes"]

SECTIONS: dict[str, type] = {
    "mesh": MeshConfig, "model": ModelSetup, "data": DataConfig, "train": TrainConfig, "loss": LossConfig,
    "optim": OptimConfig, "checkpoint": CheckpointConfig, "log": LogConfig, "hardware": HardwareConfig,
    "tasks": TasksConfig, "env": BrowserConfig, "agent": AgentConfig, "rollout": RolloutConfig,
    "engine": EngineConfig, "reward": RewardConfig, "rl": RLConfig, "bc": BCConfig, "report": ReportConfig,
    "viewer": ViewerConfig, "nnetnav": NNetNavConfig,
}
TOP_LEVEL = {"recipe": "sft", "seed": 0, "workdir": "runs/default", "multihost": False, "quick": False,
             "local": False}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run, typed. `multihost` may be False, True (auto-detect, as on Cloud TPU) or a dict of
    `jax.distributed.initialize` arguments."""

    recipe: str
    seed: int
    workdir: str
    multihost: Any
    mesh: MeshConfig
    model: ModelSetup
    data: DataConfig
    train: TrainConfig
    loss: LossConfig
    optim: OptimConfig
    checkpoint: CheckpointConfig
    log: LogConfig
    hardware: HardwareConfig
    tasks: TasksConfig
    env: BrowserConfig
    agent: AgentConfig
    rollout: RolloutConfig
    engine: EngineConfig
    reward: RewardConfig
    rl: RLConfig
    bc: BCConfig
    report: ReportConfig
    viewer: ViewerConfig
    nnetnav: NNetNavConfig

    @property
    def checkpoint_dir(self) -> str:
        return self.checkpoint.directory(self.workdir)

    @property
    def log_dir(self) -> str:
        return self.log.dir or os.path.join(self.workdir, "logs")

    def browser_env(self) -> EnvConfig:
        """The browser's per-episode config (its time budget is the agent's)."""
        return self.env.env_config(self.agent.episode_timeout_s)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ---- the ConfigDict tree users edit -----------------------------------------------------------------


def _as_tree(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return ml_collections.ConfigDict({f.name: _as_tree(getattr(value, f.name)) for f in dataclasses.fields(value)})
    if isinstance(value, Mapping):
        return ml_collections.ConfigDict(dict(value))
    return value


def default_config() -> ml_collections.ConfigDict:
    """Every field with its default (a tiny model trained by SFT on synthetic data). Two variants a config may
    carry, each the changed fields only: `local_overrides` (applied by `local=True`: a paper config's laptop run,
    see `jaxwebrl.recipes.local`) and `quick_overrides` (applied by `quick=True`, after `local`: a smoke run)."""
    c = ml_collections.ConfigDict(dict(TOP_LEVEL))
    for name, cls in SECTIONS.items():
        c[name] = _as_tree(cls())
    c.local_overrides = ml_collections.ConfigDict()
    c.quick_overrides = ml_collections.ConfigDict()
    return c


def command_line_fields(argv: Sequence[str]) -> set[str]:
    """Dotted config fields set on the command line (`--config.a.b=1` or `--config.a.b 1`)."""
    return {a[len("--config."):].split("=", 1)[0] for a in argv if a.startswith("--config.")}


def _unknown_fields(cfg: Any, schema: Any, prefix: str = "") -> None:
    for key in cfg.keys():
        path = f"{prefix}{key}"
        if path.endswith(("model.shape", "model.vision")) or path in ("quick_overrides", "local_overrides"):
            continue  # shape, vision: checked by ModelSetup; the variants: against the whole schema by apply_variants
        if key not in schema:
            near = difflib.get_close_matches(key, list(schema.keys()), 1)
            hint = f"did you mean config.{prefix}{near[0]}?" if near else f"known fields: {sorted(schema.keys())}"
            raise ConfigError(f"config.{path}: is not a known field; {hint}")
        if isinstance(schema[key], ml_collections.ConfigDict) and isinstance(cfg[key], (ml_collections.ConfigDict, Mapping)):
            _unknown_fields(cfg[key], schema[key], path + ".")


def apply_variants(cfg: ml_collections.ConfigDict, explicit: Collection[str] = ()) -> ml_collections.ConfigDict:
    """Overlay the variants the config turns on: `local_overrides` when `local=True`, then `quick_overrides`
    when `quick=True` (so `--config.local=true` works even though absl applies command-line overrides after
    get_config()), then, for a local run with `model.pretrained`, the pretrained overlay of `recipes.local`. Fields in `explicit` (those set on the command line) keep their value:
    `--config.quick=true --config.workdir=X` runs the quick variant in X."""
    out = ml_collections.ConfigDict(cfg.to_dict())
    keep = set(explicit)

    def overlay(dst: ml_collections.ConfigDict, src: Any, prefix: str) -> None:
        for key, value in src.items():
            name = prefix + key
            if name in keep:
                continue
            if isinstance(value, (ml_collections.ConfigDict, dict)) and key not in ("shape", "vision"):
                overlay(dst[key], value, name + ".")
            else:
                dst[key] = value

    for flag in ("local", "quick"):
        if cfg.get(flag):
            variant = cfg[f"{flag}_overrides"]
            if flag == "local" and not variant:
                raise ConfigError("config.local=True but this config has no local variant (local_overrides is "
                                  "empty): run it as it is, or use a paper config (BUILD.md, 'The five papers')")
            _unknown_fields(variant, default_config(), prefix=f"{flag}_overrides.")
            overlay(out, variant, "")
    pretrained = out.model.get("pretrained", "") if "model" in out else ""
    if cfg.get("local") and pretrained:  # a paper's local run from a pretrained model (recipes.local)
        from jaxwebrl.recipes.local import pretrained_local_overrides

        overlay(out, pretrained_local_overrides(out.workdir, pretrained, bool(cfg.get("quick")), str(out.get("recipe", ""))), "")
    return out


# ---- ConfigDict -> RunConfig ------------------------------------------------------------------------


def _coerce(hint: Any, value: Any, path: str) -> Any:
    if isinstance(value, ml_collections.ConfigDict):
        value = value.to_dict()
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if hint in (int, float, str, bool) and not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise ConfigError(f"config.{path}: {value!r} is a {type(value).__name__}, not a {hint.__name__}; "
                          f"set a {hint.__name__}")
    return value


def _build(cls: type, tree: Any, path: str) -> Any:
    """`cls` from a ConfigDict section, with every error naming `config.<path>.<field>`."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in tree:
            continue
        value, hint = tree[f.name], hints[f.name]
        if dataclasses.is_dataclass(hint):
            kwargs[f.name] = _build(hint, value, f"{path}.{f.name}")
        else:
            kwargs[f.name] = _coerce(hint, value, f"{path}.{f.name}")
    try:
        return cls(**kwargs)
    except FieldError as e:
        raise e.at(f"config.{path}.") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config.{path}: {e}") from None


def parse_config(cfg: ml_collections.ConfigDict) -> RunConfig:
    """The typed run config; ConfigError for the first unknown field or bad value."""
    if isinstance(cfg, RunConfig):
        return cfg
    _unknown_fields(cfg, default_config())
    sections = {name: _build(cls, cfg[name] if name in cfg else {}, name) for name, cls in SECTIONS.items()}
    top = {k: (cfg[k] if k in cfg else v) for k, v in TOP_LEVEL.items() if k not in ("quick", "local")}
    if isinstance(top["multihost"], ml_collections.ConfigDict):
        top["multihost"] = top["multihost"].to_dict()
    if top["recipe"] not in recipe_names():
        raise ConfigError(f"config.recipe: {top['recipe']!r} is not allowed; use one of {recipe_names()}")
    run = RunConfig(**top, **sections)
    _check_across_sections(run)
    return _deterministic_engines(run)


def _deterministic_engines(run: RunConfig) -> RunConfig:
    """`rl.schedule='deterministic'` runs the JaxEngine (and an in-process judge's) in deterministic mode;
    engines whose batching this process does not control (SGLang, a judge server) are refused."""
    if run.rl.schedule != "deterministic" or run.data.kind != "online":
        return run
    if run.engine.type != "jax":
        raise ConfigError(f"config.rl.schedule: 'deterministic' needs the in-process JaxEngine, but engine.type="
                          f"{run.engine.type!r} samples on a server whose batching can change a request's tokens; set "
                          "engine.type='jax' or rl.schedule='async'")
    if run.rollout.mode != "async":
        raise ConfigError(f"config.rollout.mode: {run.rollout.mode!r} is the benchmarks' lock-step baseline; "
                          "rl.schedule='deterministic' plays its own schedule: set rollout.mode='async'")
    changes: dict[str, Any] = {"engine.deterministic": True}
    if run.reward.uses_judge:
        if run.reward.judge.engine != "jax":
            raise ConfigError(f"config.reward.judge.engine: {run.reward.judge.engine!r} judges on a server whose "
                              "batching can change a verdict, but rl.schedule='deterministic'; set "
                              "reward.judge.engine='jax' (in process) or rl.schedule='async'")
        changes["reward.judge.deterministic"] = True
    try:
        return with_changes(run, **changes)
    except FieldError as e:
        raise e.at("config.engine.") from None


def _check_across_sections(run: RunConfig) -> None:
    recipe = get_recipe(run.recipe)
    if run.data.kind == "online" and not recipe.online:
        raise ConfigError(f"config.data.kind: 'online' but recipe {run.recipe!r} has no online RL loop; "
                          "train it on demonstration files (data.kind='sft') or choose an online recipe")
    if run.reward.source == "raw" and recipe.reward != "success":
        raise ConfigError(f"config.reward.source: 'raw' replaces a binary success reward, but recipe {run.recipe!r} "
                          f"scores episodes with {recipe.reward!r}; use reward.source='rule'")
    if run.rl.overlap and run.loss.kind == "grpo" and run.train.old_logprobs == "recompute":
        raise ConfigError("config.rl.overlap: trains on rollouts sampled one update earlier, whose importance ratios "
                          "need the sampler's logprobs, but train.old_logprobs='recompute' scores them with the policy "
                          "being trained; set train.old_logprobs='engine' or rl.overlap=False")
    if run.reward.uses_judge and run.data.kind != "online":
        raise ConfigError(f"config.reward.source: {run.reward.source!r} judges episodes as online rollouts end, but "
                          f"data.kind={run.data.kind!r} trains on files; use reward.source='rule' or data.kind='online'")


def resolve_pretrained(run: RunConfig) -> RunConfig:
    """`run` with a `model.pretrained` policy's checkpoint fetched (first use) and named in `model.path`."""
    model = run.model.resolve_pretrained()
    return run if model is run.model else dataclasses.replace(run, model=model)


def validate_config(cfg: ml_collections.ConfigDict | RunConfig, num_devices: int, check_paths: bool = True) -> dict[str, int]:
    """Raise ConfigError for the first bad value; returns the resolved mesh sizes."""
    run = parse_config(cfg)
    try:
        sizes = run.mesh.sizes(num_devices)
    except ShardingError as e:
        raise ConfigError(f"config.mesh: {e}") from None
    dp = sizes["data"] * sizes["fsdp"]
    mb = run.train.micro_batch
    if mb % dp:
        raise ConfigError(f"config.train.micro_batch: {mb} is not divisible by the data-parallel size {dp} "
                          f"(mesh data={sizes['data']} x fsdp={sizes['fsdp']}); set it to a multiple of {dp} "
                          f"(e.g. {dp * max(1, mb // dp)}) or change config.mesh")
    if check_paths:
        _check_paths(run)
    if run.model.attention != "xla":  # the kernel against the mesh and the length, before anything compiles
        try:
            model_cfg = run.model.abstract_config()
        except FieldError as e:
            raise e.at("config.model.") from None
        check_attention_fits(model_cfg, run.train.seq_len, sizes)
    return sizes


def _check_paths(run: RunConfig) -> None:
    m = run.model
    if m.source == "hf" and not m.pretrained:
        if not m.path:
            raise ConfigError("config.model.path: is empty but model.source='hf'; point it at a HuggingFace checkpoint dir")
        if not os.path.isfile(os.path.join(m.path, "config.json")):
            raise ConfigError(f"config.model.path: {m.path!r} has no config.json; point it at a HuggingFace "
                              "checkpoint directory (config.json + safetensors)")
    if m.ref_path and not os.path.isfile(os.path.join(m.ref_path, "config.json")):
        raise ConfigError(f"config.model.ref_path: {m.ref_path!r} has no config.json; point it at a HuggingFace "
                          "checkpoint dir, or '' to use the initial policy")
    if run.data.kind != "online":
        for f in run.data.files:
            if not os.path.exists(f):
                raise ConfigError(f"config.data.train_files: {f!r} does not exist; fix the path, or leave it empty "
                                  "with data.synthetic=True")
        if not run.data.files and not run.data.synthetic:
            raise ConfigError("config.data.train_files: is empty and data.synthetic=False; give .jsonl/.array_record "
                              "files or set data.synthetic=True")
    if run.checkpoint.resume and not has_checkpoint(run.checkpoint_dir):
        raise ConfigError(f"config.checkpoint.resume: is true but {run.checkpoint_dir!r} holds no checkpoint; set "
                          "checkpoint.dir (or workdir) to a run that saved one, or resume=false")


# ---- config files that build on another config file beside them (an overlay, not a copy) ------------------
# e.g. configs/grpo_local_judge.py is configs/grpo_local.py with the reward from a judge.


def sibling_module(here: str, name: str) -> ModuleType:
    """The config module `name` (e.g. 'grpo_local') in the folder of the file `here` (a config's __file__)."""
    path = os.path.join(os.path.dirname(os.path.abspath(here)), f"{name}.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"config {name!r} not found at {path}: the overlay needs it beside {here}")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sibling_config(here: str, name: str) -> Any:
    """`get_config()` of the config file `name` beside `here`."""
    return sibling_module(here, name).get_config()
