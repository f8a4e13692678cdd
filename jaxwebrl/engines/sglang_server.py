"""Start and stop an SGLang server subprocess: the CUDA `sglang` package on GPU, `sglang-jax` on TPU or CPU.

Why a launcher in the library: tests, benchmarks and the `restart` weight-sync strategy all need to bring
a real server up on a checkpoint, wait until it answers, and take it down again without leaking processes.
sglang-jax needs Python >= 3.12, so it usually runs from its own virtual environment
(scripts/setup_sglang_env.sh makes `.venv-sglang`); `python` picks that interpreter.

`weight_reload=True` starts sglang-jax as `sglang_jax_worker.py` instead of `sgl_jax.launch_server`: the same
server with its scheduler in the server process and CUDA SGLang's `/update_weights_from_disk`, so new weights
load without a restart (CUDA SGLang has that endpoint natively; the flag changes nothing on GPU).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal, Sequence

import httpx

from jaxwebrl.procs import start_group, stop_group

Device = Literal["cpu", "tpu", "gpu"]
REPO_ROOT = Path(__file__).resolve().parents[2]
# Without these limits sglang-jax on CPU sizes its KV pool for hundreds of GB and dies (FACTS.md).
CPU_DEFAULTS = {"max_total_tokens": 8192, "max_running_requests": 8, "context_length": 1024}
READY_LINE = "The server is fired up and ready to roll"  # logged by both servers after their warmup request
WORKER = Path(__file__).resolve().with_name("sglang_jax_worker.py")  # run by path: it must not import jaxwebrl


class ServerStartError(RuntimeError):
    """The server process exited or did not answer /health in time; the message carries its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def detect_device() -> Device:
    """gpu when nvidia-smi lists a GPU, tpu on a TPU VM, else cpu. JAXWEBRL_SGLANG_DEVICE overrides."""
    forced = os.environ.get("JAXWEBRL_SGLANG_DEVICE")
    if forced:
        if forced not in ("cpu", "tpu", "gpu"):
            raise ValueError(f"JAXWEBRL_SGLANG_DEVICE={forced!r}: use cpu, tpu or gpu")
        return forced  # type: ignore[return-value]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and "GPU" in out.stdout:
                return "gpu"
        except (OSError, subprocess.SubprocessError):
            pass
    if list(Path("/dev").glob("accel*")) or list(Path("/dev").glob("vfio/[0-9]*")):
        return "tpu"
    return "cpu"


def default_sglang_jax_python() -> str | None:
    """The interpreter that has sgl_jax: $JAXWEBRL_SGLANG_PYTHON, else <repo>/.venv-sglang, else None."""
    env = os.environ.get("JAXWEBRL_SGLANG_PYTHON")
    if env:
        return env
    venv = REPO_ROOT / ".venv-sglang" / "bin" / "python"
    return str(venv) if venv.exists() else None


class SGLangServer:
    """One server process on `host:port` serving `model_path`. Use as a context manager or start()/stop()."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        device: Device | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        python: str | None = None,
        context_length: int | None = None,
        max_total_tokens: int | None = None,
        max_running_requests: int | None = None,
        tp_size: int | None = None,
        weight_reload: bool = False,
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        self.model_path = str(model_path)
        self.device: Device = device or detect_device()
        self.backend = "sglang" if self.device == "gpu" else "sgl_jax"
        self.host = host
        self.port = port or free_port(host)
        if python is None:
            python = sys.executable if self.backend == "sglang" else (default_sglang_jax_python() or sys.executable)
        self.python = python
        limits = dict(CPU_DEFAULTS) if self.device == "cpu" else {}
        for key, value in (("context_length", context_length), ("max_total_tokens", max_total_tokens),
                           ("max_running_requests", max_running_requests)):
            if value is not None:
                limits[key] = value
        self.limits = limits
        self.tp_size = tp_size
        self.weight_reload = weight_reload
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="sglang-", suffix=".log")[1])
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The exact server command line (also printed by scripts/launch_sglang.py --dry-run)."""
        if self.backend == "sgl_jax" and self.weight_reload:
            # -P: do not put the worker's folder (jaxwebrl/engines) first on sys.path, where it would shadow modules.
            cmd = [self.python, "-P", str(WORKER)]
        else:
            cmd = [self.python, "-m", f"{self.backend}.launch_server"]
        cmd += ["--model-path", self.model_path, "--host", self.host, "--port", str(self.port)]
        if self.backend == "sgl_jax":
            cmd += ["--device", self.device]
            if self.weight_reload:
                cmd += ["--enable-single-process"]  # the scheduler the reload swaps weights in is then reachable
            if self.device == "cpu" and "--disable-overlap-schedule" not in self.extra_args:
                # sglang-jax's overlap scheduler on CPU returns wrong greedy tokens for most requests decoded in
                # one batch (5 of 6 concurrent requests, 0 of 36 sequential); without it every one is exact.
                cmd += ["--disable-overlap-schedule"]
        for key, value in self.limits.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        if self.tp_size:
            cmd += ["--tp-size", str(self.tp_size)]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.backend == "sgl_jax" and self.device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        # Our own venv's settings must not leak into the server's interpreter.
        env.pop("VIRTUAL_ENV", None)
        env.pop("PYTHONPATH", None)
        env.update(self.env)
        return env

    def check_python(self) -> None:
        """Fail early, with the fix, when the interpreter cannot import the server package."""
        probe = subprocess.run([self.python, "-c", f"import {self.backend}"], capture_output=True, text=True,
                               env=self.environment(), timeout=120)
        if probe.returncode != 0:
            hint = ("run scripts/setup_sglang_env.sh (makes .venv-sglang with sglang-jax, Python >= 3.12) or set "
                    "JAXWEBRL_SGLANG_PYTHON" if self.backend == "sgl_jax" else "pip install sglang on the GPU host")
            raise ServerStartError(f"{self.python} cannot import {self.backend}: {probe.stderr.strip()[-500:]}\n{hint}")

    def start(self, wait: bool = True) -> "SGLangServer":
        if self.running:
            return self
        self.check_python()
        log = open(self.log_path, "ab")
        self._log_start = log.tell()
        try:
            # Its own process group: stop() ends the scheduler and detokenizer the server forks too.
            self.proc = start_group(self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.environment())
        finally:
            log.close()
        if wait:
            self.wait_ready()
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def warmed_up(self) -> bool:
        """True once the server's own warmup request has finished (it logs READY_LINE then).

        Traffic must wait for it: sglang-jax 0.1.0rc0 crashes when a logprob request shares a batch with the
        warmup (which asks for none), and without the warmup its first outputs are wrong (both seen here).
        """
        if "--skip-server-warmup" in self.extra_args:
            return True
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)  # only this run's output: a restart appends to the same log
                return READY_LINE.encode() in f.read()
        except OSError:
            return False

    def wait_ready(self, timeout: float | None = None) -> None:
        """Poll /health until 200 and the warmup is done; raise ServerStartError if the process exits or
        time runs out."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                self.stop()  # what the server forked before it died
                raise ServerStartError(f"SGLang server exited with code {code} before it was ready; "
                                       f"log {self.log_path}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200 and self.warmed_up():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise ServerStartError(f"SGLang server did not answer {self.url}/health within "
                               f"{timeout or self.startup_timeout:.0f}s; log {self.log_path}:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it lingers (jaxwebrl.procs.stop_group)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc, grace_s=timeout)

    def restart(self, model_path: str | os.PathLike[str] | None = None) -> None:
        """Stop and start again (on `model_path` if given), same port, and wait until ready."""
        self.stop()
        if model_path is not None:
            self.model_path = str(model_path)
        self.start(wait=True)

    def __enter__(self) -> "SGLangServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
