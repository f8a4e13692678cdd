"""The sglang-jax server with a hot weight reload: sglang-jax's own HTTP server, run with its scheduler in this
process (`--enable-single-process`), plus SGLang's `POST /update_weights_from_disk` endpoint.

Why a worker in sglang-jax's environment: sglang-jax needs Python >= 3.12 and pins its own flax, while the
trainer runs on 3.11 (`.venv`), so the two cannot share one interpreter; and sglang-jax's stock server has no
weight reload (its scheduler runs in a subprocess nothing else can reach). Here the scheduler is a thread of
the server process, so the reload handler reaches its model runner directly, the way Tunix's in-process
rollout does: it loads the new checkpoint into the model with the model's own loader (the same name mapping,
transposes, head-dim padding and sharding as at start-up), rebinds the model runner's state leaves (every
jitted forward reads that list, so nothing recompiles: same shapes, dtypes and shardings) and flushes the
radix cache (without the flush, cached prefix KV from the old weights is reused and the output is wrong).

Request and response follow CUDA SGLang's documented API (docs/advanced_features/sglang_for_rl.md):
`{"model_path": DIR, "load_format": null, "abort_all_requests": false, "weight_version": null,
"flush_cache": true}` -> `{"success": bool, "message": str, "num_paused_requests": 0}`, and
`/get_model_info` reports the new `model_path` afterwards, so the same client drives both servers.
Semantics: new requests wait, running ones finish on the old weights (or are aborted with
`abort_all_requests`), then the weights are swapped and the cache flushed. All or nothing: a checkpoint whose
tensor names or shapes differ from the served one is refused and the old weights keep serving.

Run it with the sglang-jax interpreter, by path and with -P so this folder does not shadow other modules:
`.venv-sglang/bin/python -P jaxwebrl/engines/sglang_jax_worker.py --model-path DIR ...sgl_jax server flags`.
It imports nothing from jaxwebrl (whose dependencies are not in that environment) and, at module level,
nothing outside the standard library, so the project's own tools may import it on 3.11. (No `from __future__
import annotations`: FastAPI must see the real `Request` class in the route signature.)
"""


import asyncio
import json
import logging
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("jaxwebrl.sglang_jax_worker")
COMPILES = [0]  # XLA compilations in this process: a reload must add none to the forward (/weight_reload_status)


def count_compile(name: str, secs: float, **_: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        COMPILES[0] += 1


def safetensors_index(model_dir: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of every *.safetensors file in `model_dir`, read from the file headers only."""
    out: dict[str, tuple[int, ...]] = {}
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors file in {model_dir}")
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                out[name] = tuple(info["shape"])
    return out


def index_mismatch(served: dict[str, tuple[int, ...]], new: dict[str, tuple[int, ...]]) -> str:
    """'' when `new` has the same tensor names and shapes as `served`, else what differs (a few names)."""
    missing, extra = sorted(set(served) - set(new)), sorted(set(new) - set(served))
    shapes = sorted(k for k in set(served) & set(new) if served[k] != new[k])
    parts = []
    if missing:
        parts.append(f"missing {len(missing)} tensors (e.g. {missing[:3]})")
    if extra:
        parts.append(f"{len(extra)} unknown tensors (e.g. {extra[:3]})")
    if shapes:
        parts.append(f"{len(shapes)} shapes differ (e.g. {shapes[0]}: {new[shapes[0]]} vs served {served[shapes[0]]})")
    return "; ".join(parts)


class WeightReloader:
    """Swaps the weights of the model runner of an in-process sglang-jax scheduler (see the module doc)."""

    def __init__(self, model_runner: Any, model_path: str) -> None:
        self.runner = model_runner
        self.model_path = model_path
        self.index = safetensors_index(model_path)
        self.weight_version: str | None = None
        self.reloads = 0

    def load(self, model_path: str) -> float:
        """Load `model_path` into the served model; returns the seconds it took. Raises ValueError (and keeps
        the old weights) when the checkpoint does not match the served model."""
        import jax
        from flax import nnx

        t0 = time.perf_counter()
        problem = index_mismatch(self.index, safetensors_index(model_path))
        if problem:
            raise ValueError(f"{model_path} does not match the served model {self.model_path}: {problem}")
        runner, config = self.runner, self.runner.model_config
        old_leaves, old_path = runner.model_state_leaves, config.model_path
        config.model_path = model_path
        try:
            runner.model.load_weights(config)
            leaves = jax.tree_util.tree_flatten(nnx.split(runner.model)[1])[0]
            for i, (a, b) in enumerate(zip(old_leaves, leaves)):
                if (a.shape, a.dtype, a.sharding) != (b.shape, b.dtype, b.sharding):
                    raise ValueError(f"state leaf {i}: loaded {b.shape} {b.dtype} {b.sharding}, served "
                                     f"{a.shape} {a.dtype} {a.sharding} (would recompile)")
            if len(leaves) != len(old_leaves):
                raise ValueError(f"{len(leaves)} state leaves after the load, {len(old_leaves)} before")
            jax.block_until_ready(leaves)
        except BaseException:
            config.model_path = old_path
            nnx.update(runner.model, jax.tree_util.tree_unflatten(runner._model_state_def, old_leaves))
            raise
        # A new list, not an in-place write: the AOT dispatcher (SGLANG_JAX_AOT_DISPATCH) caches the list it saw.
        runner.model_state_leaves = leaves
        self.model_path = model_path
        self.reloads += 1
        return time.perf_counter() - t0


def install(app: Any, state: dict[str, Any]) -> None:
    """Add POST /update_weights_from_disk to sglang-jax's FastAPI app. `state` gets the reloader and the
    tokenizer manager once the server has launched its scheduler thread."""
    from fastapi import Request
    from fastapi.responses import ORJSONResponse

    lock = asyncio.Lock()

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> Any:
        body = await request.json()
        reloader: WeightReloader | None = state.get("reloader")
        tm = state.get("tokenizer_manager")
        model_path = body.get("model_path")
        if reloader is None or tm is None:
            return ORJSONResponse({"success": False, "message": "the server is still starting"}, status_code=503)
        if not model_path:
            return ORJSONResponse({"success": False, "message": "model_path is required"}, status_code=400)
        async with lock:
            t0 = time.perf_counter()
            async with tm.is_pause_cond:  # new generate requests wait in TokenizerManager.generate_request
                was_paused, tm.is_pause = tm.is_pause, True  # (a /pause_generation before us stays in force)
            try:
                if body.get("abort_all_requests"):
                    tm.abort_request(abort_all=True)
                # Running requests finish on the old weights; unless the caller paused the scheduler first
                # (SGLang's pause_generation -> update -> continue_generation flow), when they cannot finish.
                while tm.rid_to_state and not was_paused:
                    await asyncio.sleep(0.005)
                t_drained = time.perf_counter()
                try:
                    load_s = await asyncio.to_thread(reloader.load, str(model_path))
                except (ValueError, OSError) as exc:
                    return ORJSONResponse({"success": False, "message": f"weights not updated: {exc}",
                                           "num_paused_requests": 0}, status_code=400)
                flush_s = 0.0
                if body.get("flush_cache", True):
                    t1 = time.perf_counter()
                    flushed = await tm.flush_cache()
                    flush_s = time.perf_counter() - t1
                    if not flushed.success:
                        return ORJSONResponse({"success": False, "message": "weights updated but the cache flush "
                                               f"failed: {flushed.error_msg}", "num_paused_requests": 0},
                                              status_code=500)
                tm.model_path = str(model_path)
                reloader.weight_version = body.get("weight_version")
                message = (f"Succeeded to update model weights (drain {t_drained - t0:.3f}s, load {load_s:.3f}s, "
                           f"flush {flush_s:.3f}s)")
                logger.info(message)
                return {"success": True, "message": message, "num_paused_requests": 0,
                        "timings": {"drain_s": t_drained - t0, "load_s": load_s, "flush_s": flush_s}}
            finally:
                async with tm.is_pause_cond:
                    tm.is_pause = was_paused
                    tm.is_pause_cond.notify_all()

    @app.get("/weight_reload_status")
    async def weight_reload_status() -> Any:
        """What is served: the checkpoint, the last `weight_version`, the reload count, the running requests,
        and how many XLA compilations the process has done."""
        reloader, tm = state.get("reloader"), state.get("tokenizer_manager")
        if reloader is None or tm is None:
            return ORJSONResponse({"message": "the server is still starting"}, status_code=503)
        return {"model_path": reloader.model_path, "weight_version": reloader.weight_version,
                "reloads": reloader.reloads, "running_requests": len(tm.rid_to_state), "compiles": COMPILES[0]}


def main(argv: list[str] | None = None) -> None:
    import jax
    from sgl_jax.srt.entrypoints import http_server
    from sgl_jax.srt.server_args import ServerArgs
    from sgl_jax.srt.utils import kill_process_tree

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--enable-single-process" not in argv:
        argv.append("--enable-single-process")
    server_args = ServerArgs.from_cli(argv)
    state: dict[str, Any] = {}
    launch_parts = http_server._launch_subprocesses_or_threads

    def launch_and_keep_scheduler(*args: Any, **kwargs: Any) -> Any:
        # The stock `launch` drops the scheduler object from scheduler_info ("don't expose it"); keep it.
        tokenizer_manager, template_manager, info = launch_parts(*args, **kwargs)
        runner = info["scheduler"].tp_worker.worker.model_runner
        state["reloader"] = WeightReloader(runner, server_args.model_path)
        state["tokenizer_manager"] = tokenizer_manager
        return tokenizer_manager, template_manager, info

    jax.monitoring.register_event_duration_secs_listener(count_compile)
    http_server._launch_subprocesses_or_threads = launch_and_keep_scheduler
    install(http_server.app, state)
    try:
        http_server.launch(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
