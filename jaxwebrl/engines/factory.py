"""make_engine: the one place a config's `engine` block becomes an Engine, so configs pick `jax` or `sglang`.

Config fields (an ml_collections ConfigDict, a dict, or anything with attributes):
  type             "jax" | "sglang"
  checkpoint       HF model directory (JaxEngine loads it when no params are passed; a launched server serves it)
  jax:     num_slots (8), max_len (model's, at most 4096), seed (0)
  sglang:  url | urls (several -> a Router over them) | launch: true (start an SGLangServer on `checkpoint`)
           weight_sync ("disk" | "restart"), export_dir, request_timeout (600), retries (3),
           server: {device, port, python, context_length, max_total_tokens, max_running_requests, tp_size, extra_args}
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping

from jaxwebrl.engines.base import Engine
from jaxwebrl.engines.jax_engine import JaxEngine
from jaxwebrl.engines.router import Router
from jaxwebrl.engines.sglang_engine import SGLangEngine
from jaxwebrl.engines.sglang_server import SGLangServer

ENGINE_TYPES = ("jax", "sglang")


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    if hasattr(config, "get"):  # ConfigDict
        return config.get(key, default)
    return getattr(config, key, default)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if hasattr(value, "to_dict"):
        return dict(value.to_dict())
    return dict(value)


def make_engine(
    config: Any,
    *,
    params: Any | None = None,
    model_cfg: Any | None = None,
    mesh: Any | None = None,
    tokenizer: Any | None = None,
    version: int = 0,
) -> Engine:
    """Build the engine `config.type` names. `params`/`model_cfg` (the trainer's) win over `checkpoint`."""
    kind = _get(config, "type", "jax")
    checkpoint = _get(config, "checkpoint")
    if kind == "jax":
        kwargs = dict(num_slots=int(_get(config, "num_slots", 8)), max_len=_get(config, "max_len") or None,
                      seed=int(_get(config, "seed", 0)), version=version)
        if params is not None:
            if model_cfg is None:
                raise ValueError("make_engine(type='jax', params=...) also needs model_cfg=")
            return JaxEngine(model_cfg, params, mesh=mesh, tokenizer=tokenizer, **kwargs)
        if not checkpoint:
            raise ValueError("engine.type='jax' needs engine.checkpoint (a HF model dir) or params from the trainer")
        return JaxEngine.from_checkpoint(checkpoint, mesh=mesh, tokenizer=tokenizer, **kwargs)
    if kind == "sglang":
        # Where params are exported for the server to load: beside the start checkpoint, else a temp dir
        # (fine for servers on this host; remote servers need engine.export_dir on a shared filesystem).
        export_dir = _get(config, "export_dir") or (
            str(Path(checkpoint).resolve().parent / "engine_exports") if checkpoint
            else tempfile.mkdtemp(prefix="jaxwebrl_engine_exports_")
        )
        common = dict(
            model_cfg=model_cfg, tokenizer_dir=_get(config, "tokenizer_dir") or checkpoint or None,
            export_dir=export_dir, request_timeout=float(_get(config, "request_timeout", 600.0)),
            retries=int(_get(config, "retries", 3)), version=version,
        )
        weight_sync = _get(config, "weight_sync", "disk")
        if _get(config, "launch", False):
            if not checkpoint:
                raise ValueError("engine.launch=True needs engine.checkpoint, the model the server starts on")
            server = SGLangServer(checkpoint, **_as_dict(_get(config, "server"))).start()
            return SGLangEngine.for_server(server, weight_sync=weight_sync, owns_server=True, **common)
        urls = list(_get(config, "urls") or ([_get(config, "url")] if _get(config, "url") else []))
        if not urls:
            raise ValueError("engine.type='sglang' needs engine.url, engine.urls or engine.launch=True")
        if weight_sync == "restart":
            raise ValueError("engine.weight_sync='restart' needs engine.launch=True (the engine must own the server)")
        engines = [SGLangEngine(u, **common) for u in urls]  # type: ignore[arg-type]
        return engines[0] if len(engines) == 1 else Router(engines)
    raise ValueError(f"engine.type={kind!r} is unknown; use one of {ENGINE_TYPES}")
