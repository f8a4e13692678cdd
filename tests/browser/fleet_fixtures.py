"""Real `python -m jaxwebrl.browser.serve` processes on loopback for the fleet tests, each in its own process
group (a kill takes its Node launchers with it, as a lost host would; their Chromiums exit when the
launcher's pipe closes) and ended with that whole group."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from jaxwebrl.browser.fleet import write_token_file
from jaxwebrl.procs import start_group, stop_group


def token_file(directory: Path, name: str = "fleet.token") -> str:
    return str(write_token_file(directory / name))


class FleetServer:
    """One browser server; `start()` returns once it prints its address (port 0: the OS picks one, kept for
    restarts so the pool's endpoint stays valid). Its log (stderr) goes to `log_path`."""

    def __init__(self, token_file: str, log_dir: Path, port: int = 0, name: str = "server",
                 extra_args: tuple[str, ...] = ()) -> None:
        self.token_file, self.port, self.extra_args = token_file, port, extra_args
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> "FleetServer":
        log = self.log_path.open("a")
        self.proc = start_group(
            [sys.executable, "-m", "jaxwebrl.browser.serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--token-file", self.token_file, *self.extra_args], stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the server's first line: its address (or EOF if it died)
        assert line.startswith("jaxwebrl browser server on ws://"), (line, self.log())
        self.url = line.split(" on ", 1)[1].split(" ", 1)[0]
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))
        return self

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the server's whole process group (the server and its launchers) and reap it."""
        if self.proc is not None:
            stop_group(self.proc, grace_s=0)  # the group may outlive its leader: it is killed anyway
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def stop(self) -> None:
        """SIGTERM (the server closes its browsers and logs its counts), then the group is killed anyway."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
