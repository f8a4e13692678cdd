"""The GPU proof's smoke mode (benchmarks/gpu_check.py --cpu): every section's code path runs on tiny shapes,
so the script a lent GPU machine runs cannot rot, and the model and train path it imports do not pull in the
packages the device image lacks (playwright, grain, miniwob, ml-collections, tensorboardX)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_smoke_runs_every_section(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu", "--budget", "3000",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=1200)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sections = report["sections"]
    assert set(sections) == {"env", "parity", "cpu_gpu", "attention", "train", "engine", "grpo", "compile"}
    assert {n: s["status"] for n, s in sections.items()} == {n: "ok" for n in sections}
    assert report["not_on_device_imported"] == []
    # the checks measured something and the numbers are the kind each bound speaks of
    for arch in ("llama", "qwen2", "qwen3"):
        assert 0 < sections["parity"][arch]["fp32_rel_l2"] <= 1e-4
    assert sections["cpu_gpu"]["update_rel_l2"] > 1e-3  # the step moved the weights
    for T in ("T128", "T256"):
        for name in ("cudnn", "cudnn_no_mask", "xla"):
            assert 0 < sections["attention"][T][name]["out_rel_l2"] <= 1e-2
    assert sections["engine"]["jax_tokens"] == sections["engine"]["hf_tokens"] > 0
    assert sections["train"]["Qwen2.5-0.5B"]["jaxwebrl_tokens_s"] > 0
    assert (tmp_path / "gpu_check.txt").read_text().count("OK in") == len(sections)
