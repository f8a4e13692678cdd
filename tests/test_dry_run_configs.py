"""Every paper-scale config in configs/ compiles its train step at the paper's shapes on 8 fake CPU devices.

Compiled (not only lowered), ahead of time against abstract params and batch (nothing is allocated): the full
model (all layers, full width and vocabulary; Qwen2.5-3B/7B and Qwen3-4B/8B from `models.known_shapes` where
the config names a checkpoint that is absent here), the config's own mesh rules, micro-batch, accumulation,
sequence length (8k-32k) and logits chunking, with `model.attention='splash'` (the TPU Pallas kernel in
interpret mode), which is what makes 16-32k fit. Layers are scanned, so compile time does not grow with
depth. One subprocess compiles all six; the per-device memory it reports is printed for the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = {  # config -> (model params in billions, seq_len) the paper uses
    "grpo_tpu": (3.09, 16384),
    "grpo_openwebrl": (4.02, 32768),
    "reinforce_webgym": (8.19, 16384),
    "rft_browseragent": (7.62, 16384),
    "sft_webagent_r1": (3.09, 16384),
    "sft_browseragent": (7.62, 8192),
}

CODE = r"""
import importlib.util, json, sys, time
import jax
from jaxwebrl.config import parse_config, validate_config
from jaxwebrl.train.dry_run import dry_run
assert len(jax.devices()) == 8
for name in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location(name, f"configs/{name}.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    c = mod.get_config()
    c.model.attention = "splash"
    run = parse_config(c)
    t0 = time.time()
    report = dry_run(run, validate_config(run, 8, check_paths=False))
    report["compile_s"] = round(time.time() - t0, 1)
    print("CONFIG_DRY_RUN " + name + " " + json.dumps(report), flush=True)
"""


def test_paper_configs_compile_at_paper_shapes():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CODE, *PAPER_CONFIGS], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    reports = {}
    for line in r.stdout.splitlines():
        if line.startswith("CONFIG_DRY_RUN "):
            _, name, body = line.split(" ", 2)
            reports[name] = json.loads(body)
    assert sorted(reports) == sorted(PAPER_CONFIGS)
    for name, (billions, seq_len) in PAPER_CONFIGS.items():
        rep = reports[name]
        gib = lambda b: b / 2**30  # noqa: E731
        print(f"{name}: {rep['params'] / 1e9:.2f}B, batch {rep['batch']}, mesh {rep['mesh']}, per device: arguments "
              f"{gib(rep['argument_bytes']):.2f} GiB, temporaries {gib(rep['temp_bytes']):.2f} GiB, peak "
              f"{gib(rep['peak_bytes_estimate']):.2f} GiB, compile {rep['compile_s']} s")
        assert abs(rep["params"] / 1e9 - billions) < 0.01, (name, rep["params"])
        assert rep["batch"][2] == seq_len and rep["attention"] == "splash" and rep["devices"] == 8
        # the state (fp32 params + Adam moments, 12 bytes per param) is sharded 8 ways, not replicated
        assert 0.7 < rep["argument_bytes"] / (12 * rep["params"] / 8) < 1.5, (name, rep["argument_bytes"])
        assert rep["temp_bytes"] > 0 and rep["xla_flops_per_device"] > 0
