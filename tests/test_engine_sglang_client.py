"""SGLang client and launcher parts that need no server: a dead server gives a clear error after the retries,
the launcher builds the right command per device, and a missing interpreter fails with the fix."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxwebrl.engines import EngineUnavailableError, SamplingParams, SGLangEngine, SGLangServer, ServerStartError
from jaxwebrl.engines.sglang_server import free_port

REPO = Path(__file__).resolve().parents[1]


def test_dead_server_is_a_clear_error_after_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there

    async def main() -> None:
        engine = SGLangEngine(url, retries=2, backoff=0.05, connect_timeout=1.0)
        start = time.monotonic()
        with pytest.raises(EngineUnavailableError, match=r"did not answer GET /get_model_info after 3 attempts") as err:
            await engine.generate([1, 2, 3], SamplingParams(max_new_tokens=4))
        assert url in str(err.value) and "launch_sglang.py" in str(err.value)
        assert time.monotonic() - start >= 0.05 + 0.1  # it did back off between attempts
        with pytest.raises(EngineUnavailableError):
            await engine.health()
        with pytest.raises(EngineUnavailableError, match="not healthy after 1s"):
            await engine.wait_ready(timeout=1.0)
        await engine.close()

    asyncio.run(main())


def test_launcher_commands_per_device(tmp_path: Path) -> None:
    cpu = SGLangServer(tmp_path, device="cpu", port=30000, python="/py312")
    assert cpu.command()[:3] == ["/py312", "-m", "sgl_jax.launch_server"]
    cmd = " ".join(cpu.command())
    for flag in ("--device cpu", "--max-total-tokens 8192", "--max-running-requests 8", "--context-length 1024",
                 "--host 127.0.0.1", "--port 30000", f"--model-path {tmp_path}", "--disable-overlap-schedule"):
        assert flag in cmd
    assert cpu.environment()["JAX_PLATFORMS"] == "cpu"
    tpu = SGLangServer(tmp_path, device="tpu", port=30001, python="/py312", tp_size=4)
    assert "--device tpu" in " ".join(tpu.command()) and "--tp-size 4" in " ".join(tpu.command())
    assert "--max-total-tokens" not in tpu.command()
    gpu = SGLangServer(tmp_path, device="gpu", port=30002, context_length=4096)
    assert gpu.command()[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert "--device" not in gpu.command() and "--context-length 4096" in " ".join(gpu.command())


def test_missing_server_package_names_the_fix(tmp_path: Path) -> None:
    server = SGLangServer(tmp_path, device="cpu", python=sys.executable)  # this venv has no sgl_jax
    with pytest.raises(ServerStartError, match="setup_sglang_env.sh"):
        server.start()
    assert not server.running


def test_launch_script_dry_run(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "launch_sglang.py"), "--model-path", str(tmp_path),
                          "--device", "cpu", "--port", "31000", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "sgl_jax.launch_server" in out.stdout and "--max-total-tokens 8192" in out.stdout
    assert "JAX_PLATFORMS=cpu" in out.stdout


def test_image_requests_send_ids_and_base64_pngs() -> None:
    """Token ids (placeholders already expanded by the processor) plus one data url per image, in order."""
    import base64

    import numpy as np

    from jaxwebrl.engines import ImageInput

    engine = SGLangEngine(f"http://127.0.0.1:{free_port()}")
    images = [ImageInput(b"\x89PNG first", (1, 2, 2)), ImageInput(b"\x89PNG second", (1, 4, 2), np.zeros((8, 4)))]
    body = engine.request_body([1, 6, 2, 6, 6, 3], SamplingParams(max_new_tokens=4, temperature=0.0), 4, images)
    assert body["input_ids"] == [1, 6, 2, 6, 6, 3] and body["return_logprob"] is True
    assert [base64.b64decode(u.split(",", 1)[1]) for u in body["image_data"]] == [b"\x89PNG first", b"\x89PNG second"]
    assert all(u.startswith("data:image/png;base64,") for u in body["image_data"])
    assert "image_data" not in engine.request_body([1, 2], SamplingParams(max_new_tokens=4), 4)
    with pytest.raises(ValueError, match="encoded image bytes"):
        engine.request_body([1, 6], SamplingParams(max_new_tokens=4), 4, [ImageInput(b"", (1, 2, 2))])
    asyncio.run(engine.close())


# CUDA SGLang's POST /update_weights_from_disk request fields and their types, as its documentation
# (docs/advanced_features/sglang_for_rl.md, "Update Weights from Disk") lists them; model_path is required.
SGLANG_RELOAD_FIELDS = {"model_path": str, "load_format": (str, type(None)), "abort_all_requests": bool,
                        "weight_version": (str, type(None)), "is_async": bool, "torch_empty_cache": bool,
                        "keep_pause": bool, "recapture_cuda_graph": bool, "token_step": int, "flush_cache": bool}


def test_weight_reload_request_follows_sglang_documented_api(tmp_path: Path) -> None:
    body = SGLangEngine.reload_body(tmp_path / "policy_v3", 3)
    assert set(body) <= set(SGLANG_RELOAD_FIELDS) and "model_path" in body
    for key, value in body.items():
        assert isinstance(value, SGLANG_RELOAD_FIELDS[key]), key
    assert body["model_path"] == str(tmp_path / "policy_v3") and body["weight_version"] == "3"
    # The server flushes its prefix cache itself and lets running requests finish (no abort, no pause kept).
    assert body["flush_cache"] is True and body["abort_all_requests"] is False and not body.get("keep_pause")


def test_weight_reload_launches_the_worker(tmp_path: Path) -> None:
    cpu = SGLangServer(tmp_path, device="cpu", port=30000, python="/py312", weight_reload=True)
    cmd = cpu.command()
    assert cmd[:3] == ["/py312", "-P", str(REPO / "jaxwebrl" / "engines" / "sglang_jax_worker.py")]
    for flag in ("--device cpu", "--enable-single-process", "--max-total-tokens 8192", "--disable-overlap-schedule"):
        assert flag in " ".join(cmd)
    assert SGLangServer(tmp_path, device="cpu", python="/py312").command()[1:3] == ["-m", "sgl_jax.launch_server"]
    # CUDA SGLang has the endpoint itself: the flag changes nothing on GPU.
    gpu = SGLangServer(tmp_path, device="gpu", port=30002, weight_reload=True)
    assert gpu.command()[:3] == [sys.executable, "-m", "sglang.launch_server"]
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "launch_sglang.py"), "--model-path", str(tmp_path),
                          "--device", "cpu", "--weight-reload", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "sglang_jax_worker.py" in out.stdout and "--enable-single-process" in out.stdout


def test_worker_refuses_a_checkpoint_that_does_not_match(tmp_path: Path) -> None:
    """The worker's all-or-nothing check (it runs under sglang-jax's Python; its helpers are plain Python)."""
    import numpy as np
    from safetensors.numpy import save_file

    from jaxwebrl.engines.sglang_jax_worker import index_mismatch, safetensors_index

    served = {"a.weight": np.zeros((4, 2), np.float32), "b.weight": np.zeros((3,), np.float32)}
    for name, tensors in (("served", served), ("same", served),
                          ("other", {"a.weight": np.zeros((4, 3), np.float32), "c.weight": np.zeros(1, np.float32)})):
        (tmp_path / name).mkdir()
        save_file(tensors, str(tmp_path / name / "model.safetensors"))
    index = safetensors_index(tmp_path / "served")
    assert index == {"a.weight": (4, 2), "b.weight": (3,)}
    assert index_mismatch(index, safetensors_index(tmp_path / "same")) == ""
    problem = index_mismatch(index, safetensors_index(tmp_path / "other"))
    assert "missing 1 tensors (e.g. ['b.weight'])" in problem and "['c.weight']" in problem
    assert "a.weight: (4, 3) vs served (4, 2)" in problem
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        safetensors_index(tmp_path)
