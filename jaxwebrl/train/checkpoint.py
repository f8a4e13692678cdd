"""Orbax checkpoints of the whole run: train state (params, optimizer, step, RNG), data iterator, metadata.

Items per step: `state` (a PyTree, restored straight into the *current* mesh's shardings, so a run can
resume on a different mesh), `data` (the Grain iterator state, JSON) and `meta` (the model config and
tokenizer dir, JSON, so `scripts/export_hf.py` converts any checkpoint without the training config).
Saves are async (device->host copy blocks, the write does not); the last N are kept, plus the best by a
metric when one is configured.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as ocm

from jaxwebrl.fields import at_least, one_of
from jaxwebrl.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """The `checkpoint` config section."""

    dir: str = ""  # '' = <workdir>/checkpoints
    every: int = 50
    keep: int = 3  # keep the last N
    best_metric: str = ""  # also keep the best checkpoint by this metric ('' = off)
    best_mode: str = "min"
    async_save: bool = True
    resume: bool = False
    export_every: int = 0  # HF export every N steps (0 = only at the end)
    export_dir: str = ""  # '' = <workdir>/hf

    def __post_init__(self) -> None:
        one_of("best_mode", self.best_mode, ("min", "max"))
        at_least("every", self.every, 0)
        at_least("keep", self.keep, 1)
        at_least("export_every", self.export_every, 0)

    def directory(self, workdir: str) -> str:
        return os.path.abspath(self.dir or os.path.join(workdir, "checkpoints"))


def has_checkpoint(directory: str) -> bool:
    """True when `directory` holds at least one saved step (Orbax names step folders by number)."""
    return os.path.isdir(directory) and any(n.isdigit() for n in os.listdir(directory))


def model_config_to_json(cfg: ModelConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def model_config_from_json(d: dict[str, Any]) -> Any:
    """The ModelConfig (or a VL model's VLConfig, whose dict nests `text` and `vision`) saved in a checkpoint's meta."""
    d = dict(d)
    if "vision" in d:
        from jaxwebrl.models.vl_config import VLConfig, VisionConfig

        v = dict(d.pop("vision"))
        for k in ("deepstack_visual_indexes", "fullatt_block_indexes"):
            v[k] = tuple(v.get(k) or ())
        v["hf_extra"] = tuple(tuple(x) for x in v.get("hf_extra") or ())
        return VLConfig(**{**d, "text": model_config_from_json(d["text"]), "vision": VisionConfig(**v),
                           "mrope_section": tuple(d["mrope_section"]),
                           "hf_extra": tuple(tuple(x) for x in d.get("hf_extra") or ())})
    for k in ("rope_scaling", "hf_extra"):
        if d.get(k) is not None:
            d[k] = tuple(tuple(x) for x in d[k])
    if isinstance(d.get("eos_token_id"), list):
        d["eos_token_id"] = tuple(d["eos_token_id"])
    return ModelConfig(**d)


class Checkpointer:
    """A thin owner of one `ocp.CheckpointManager` with the three items above."""

    def __init__(self, directory: str, keep: int = 3, best_metric: str = "", best_mode: str = "min",
                 async_save: bool = True, save_every: int = 1):
        self.directory = os.path.abspath(directory)
        self.best_metric = best_metric
        policies: list[Any] = [ocm.LatestN(n=keep)]
        best_fn = None
        if best_metric:
            best_fn = lambda m: float(m[best_metric])  # noqa: E731
            policies.append(ocm.BestN(get_metric_fn=best_fn, reverse=best_mode == "min", n=1,
                                      keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=1, enable_async_checkpointing=async_save, create=True,
            preservation_policy=ocm.AnyPreservationPolicy(policies),
        )
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "data", "meta"))
        self.save_every = save_every

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, data_state: dict[str, Any] | None, meta: dict[str, Any],
             metrics: dict[str, float] | None = None, force: bool = False) -> bool:
        """Save `step`; a step that is already saved is left as it is (nothing trained since)."""
        if step in self.manager.all_steps():
            return False
        if self.best_metric and (not metrics or self.best_metric not in metrics):
            metrics = None
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_state or {}),
            meta=ocp.args.JsonSave(meta),
        )
        return self.manager.save(step, args=args, metrics=metrics, force=force)

    def restore(self, abstract_state: Any, step: int | None = None) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """(state placed per the shardings in `abstract_state`, data iterator state, meta)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        out = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore(),
        ))
        return out["state"], dict(out["data"] or {}), dict(out["meta"] or {})

    def read_meta(self, step: int | None = None) -> dict[str, Any]:
        step = self.latest_step() if step is None else step
        return dict(self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"])

    def restore_params(self, abstract_params: Any, step: int | None = None) -> Any:
        """Only the params (for export): a partial restore of the state item."""
        step = self.latest_step() if step is None else step
        target = {"params": abstract_params}
        restored = self.manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                                          partial_restore=True)))
        return restored["state"]["params"]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
