"""make_engine: the one place the `engine` config section becomes an Engine (`jax` or `sglang`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from jaxwebrl.engines.base import Engine
from jaxwebrl.engines.config import EngineConfig


def make_engine(
    config: EngineConfig,
    *,
    params: Any | None = None,
    model_cfg: Any | None = None,
    mesh: Any | None = None,
    tokenizer: Any | None = None,
    version: int = 0,
) -> Engine:
    """Build the engine `config.type` names. `params`/`model_cfg` (the trainer's) win over `checkpoint`.
    Each engine is imported only when chosen (the JaxEngine registers a JAX compile listener)."""
    kind, checkpoint = config.type, config.checkpoint
    if kind == "jax":
        from jaxwebrl.engines.jax_engine import JaxEngine

        kwargs = dict(config.jax_kwargs(), version=version)
        if params is not None:
            if model_cfg is None:
                raise ValueError("make_engine(type='jax', params=...) also needs model_cfg=")
            return JaxEngine(model_cfg, params, mesh=mesh, tokenizer=tokenizer, **kwargs)
        if not checkpoint:
            raise ValueError("engine.type='jax' needs engine.checkpoint (a HF model dir) or params from the trainer")
        return JaxEngine.from_checkpoint(checkpoint, mesh=mesh, tokenizer=tokenizer, **kwargs)
    if kind == "sglang":
        from jaxwebrl.engines.router import Router
        from jaxwebrl.engines.sglang_engine import SGLangEngine
        from jaxwebrl.engines.sglang_server import SGLangServer

        # Where params are exported for the server to load: beside the start checkpoint, else a temp dir
        # (fine for servers on this host; remote servers need engine.export_dir on a shared filesystem).
        export_dir = config.export_dir or (
            str(Path(checkpoint).resolve().parent / "engine_exports") if checkpoint
            else tempfile.mkdtemp(prefix="jaxwebrl_engine_exports_")
        )
        common = dict(
            model_cfg=model_cfg, tokenizer_dir=checkpoint or None, export_dir=export_dir,
            request_timeout=config.request_timeout, retries=config.retries, version=version,
        )
        weight_sync = config.weight_sync
        if config.launch:
            if not checkpoint:
                raise ValueError("engine.launch=True needs engine.checkpoint, the model the server starts on")
            # weight_sync='disk' on CPU/TPU starts sglang-jax with the in-place reload (sglang_jax_worker.py).
            server = SGLangServer(checkpoint, weight_reload=weight_sync == "disk",
                                  **config.server.kwargs()).start()  # type: ignore[arg-type]
            return SGLangEngine.for_server(server, weight_sync=weight_sync, owns_server=True, **common)
        urls = config.server_urls
        if not urls:
            raise ValueError("engine.type='sglang' needs engine.url, engine.urls or engine.launch=True")
        engines = [SGLangEngine(u, **common) for u in urls]  # type: ignore[arg-type]
        return engines[0] if len(engines) == 1 else Router(engines)
    raise ValueError(f"engine.type={kind!r} is unknown")
