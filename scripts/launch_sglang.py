#!/usr/bin/env python3
"""Start an SGLang server on a HuggingFace checkpoint and keep it in the foreground until Ctrl-C.

The right server for the machine: `python -m sglang.launch_server` (CUDA SGLang) on GPU, and
`python -m sgl_jax.launch_server` (sglang-jax, from the Python 3.12 venv `.venv-sglang` made by
scripts/setup_sglang_env.sh) on TPU or CPU, with the CPU limits that keep it from sizing its KV pool for
hundreds of GB. Returns once the server answered /health and finished its warmup; prints the URL.

  python scripts/launch_sglang.py --model-path /path/to/hf_dir [--device cpu|tpu|gpu] [--port 30000]
  python scripts/launch_sglang.py --model-path DIR --dry-run        # print the command only
  python scripts/launch_sglang.py --model-path DIR -- --mem-fraction-static 0.8   # extra server flags
  python scripts/launch_sglang.py --model-path DIR --weight-reload  # sglang-jax with /update_weights_from_disk

A trainer elsewhere updates the weights of a --weight-reload server (or of a CUDA SGLang server) with
engine.weight_sync='disk' and engine.export_dir on a filesystem both hosts see.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxwebrl.engines.sglang_server import SGLangServer, ServerStartError, detect_device  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True, help="HF model directory (config.json, safetensors, tokenizer)")
    p.add_argument("--device", choices=("cpu", "tpu", "gpu"), default=None, help="default: detected")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--python", default=None, help="interpreter with the server package (default: .venv-sglang for sgl_jax)")
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--tp-size", type=int, default=None)
    p.add_argument("--weight-reload", action="store_true",
                   help="sglang-jax: serve through jaxwebrl's worker, which adds /update_weights_from_disk (no restart "
                        "per weight update); CUDA SGLang has it anyway")
    p.add_argument("--log", default=None, help="server log file (default: a temp file)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the server to be ready")
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    args = p.parse_args(argv)

    server = SGLangServer(
        args.model_path, device=args.device or detect_device(), host=args.host, port=args.port, python=args.python,
        context_length=args.context_length, max_total_tokens=args.max_total_tokens,
        max_running_requests=args.max_running_requests, tp_size=args.tp_size, weight_reload=args.weight_reload,
        extra_args=extra,
        log_path=args.log, startup_timeout=args.timeout,
    )
    env = "JAX_PLATFORMS=cpu " if server.environment().get("JAX_PLATFORMS") == "cpu" else ""
    print(f"{env}{shlex.join(server.command())}", flush=True)
    if args.dry_run:
        return 0
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        t0 = time.monotonic()
        server.start()
        print(f"SGLang server ready at {server.url} after {time.monotonic() - t0:.0f}s (log: {server.log_path})",
              flush=True)
        while not stop and server.running:
            time.sleep(1.0)
        if not server.running and not stop:
            print(f"server exited; log tail:\n{server.log_tail()}", file=sys.stderr)
            return 1
        return 0
    except ServerStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
