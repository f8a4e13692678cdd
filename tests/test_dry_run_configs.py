"""Every paper-scale config in configs/ lowers its train step at the paper's shapes on 8 fake CPU devices, and
the 16k and 32k GRPO configs also compile (OpenWebRL's text stand-in: `grpo_openwebrl:text`).

Ahead of time against abstract params and batch (nothing is allocated): the full model (all layers, full
width and vocabulary; Qwen2.5-3B/7B and Qwen3-4B/8B from `models.known_shapes` where the config names a
checkpoint that is absent here), the config's own mesh, micro-batch, accumulation, sequence length (8k-32k)
and logits chunking, with `model.attention='splash'` (the TPU Pallas kernel in interpret mode), which is
what makes 16-32k fit. Lowering (tracing, sharding annotations, the kernel) takes 2-6 s per config; a CPU
compile takes 12-50 s per config whatever the length or depth (layers are scanned), so only
`grpo_tpu` (Qwen2.5-3B, 16k) and OpenWebRL's text stand-in (Qwen3-4B, 32k) are compiled, with memory
printed; the Qwen2.5-7B and Qwen3-8B configs are lowered only. The vision-language configs (`grpo_openwebrl`:
Qwen3-VL-4B, `reinforce_webgym_vl`: Qwen3-VL-8B, 32k, each row with its 1280x720 screenshot's 3,520 patches,
bucket 4,096) are lowered only: their CPU compile takes minutes (BUILD.md has their compiled memory).
`scripts/train.py --dry_run` compiles any of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from multidevice import device_env

ROOT = Path(__file__).resolve().parents[1]
COMPILED = ("grpo_tpu", "grpo_openwebrl:text")
PAPER_CONFIGS = {  # config -> (model params in billions, seq_len) the paper uses
    "grpo_tpu": (3.09, 16384),
    "grpo_openwebrl:text": (4.02, 32768),
    "grpo_openwebrl": (4.44, 32768),
    "reinforce_webgym_vl": (8.77, 32768),
    "reinforce_webgym": (8.19, 16384),
    "rft_browseragent": (7.62, 16384),
    "sft_webagent_r1": (3.09, 16384),
    "sft_browseragent": (7.62, 8192),
    "sft_nnetnav": (8.03, 20480),
}

CODE = r"""
import importlib.util, json, sys, time
import jax
from jaxwebrl.config import parse_config, validate_config
from jaxwebrl.train.dry_run import dry_run
assert len(jax.devices()) == 8
compiled = sys.argv[1].split(",")
for name in sys.argv[2:]:
    file, _, variant = name.partition(":")
    spec = importlib.util.spec_from_file_location(file, f"configs/{file}.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    c = mod.get_config()
    if variant == "text":  # OpenWebRL's text stand-in (its config's docstring)
        c.model.path, c.env.screenshot, c.env.text_mode, c.env.box_centres = "checkpoints/Qwen3-4B", False, "axtree", True
    c.model.attention = "splash"
    run = parse_config(c)
    t0 = time.time()
    report = dry_run(run, validate_config(run, 8, check_paths=False), compile=name in compiled)
    report["compile_s"] = round(time.time() - t0, 1)
    print("CONFIG_DRY_RUN " + name + " " + json.dumps(report), flush=True)
"""


def test_paper_configs_compile_at_paper_shapes():
    env = device_env(8)
    r = subprocess.run([sys.executable, "-c", CODE, ",".join(COMPILED), *PAPER_CONFIGS], env=env, cwd=ROOT, capture_output=True,
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
        assert abs(rep["params"] / 1e9 - billions) < 0.01, (name, rep["params"])
        assert rep["batch"][2] == seq_len and rep["attention"] == "splash" and rep["devices"] == 8
        assert rep["compiled"] == (name in COMPILED), name
        assert ("patches" in rep) == (name in ("grpo_openwebrl", "reinforce_webgym_vl")), name
        if "patches" in rep:  # one 1280x720 screenshot per row, as the release processor cuts it
            assert (rep["patches"], rep["patches_bucket"]) == (3520, 4096), rep
        if not rep["compiled"]:
            print(f"{name}: {rep['params'] / 1e9:.2f}B, batch {rep['batch']}, lowered in {rep['compile_s']} s")
            assert rep["lowered_chars"] > 10_000
            continue
        gib = lambda b: b / 2**30  # noqa: E731
        print(f"{name}: {rep['params'] / 1e9:.2f}B, batch {rep['batch']}, mesh {rep['mesh']}, per device: arguments "
              f"{gib(rep['argument_bytes']):.2f} GiB, temporaries {gib(rep['temp_bytes']):.2f} GiB, peak "
              f"{gib(rep['peak_bytes_estimate']):.2f} GiB, compiled in {rep['compile_s']} s")
        # the state (fp32 params + Adam moments, 12 bytes per param) is sharded 8 ways, not replicated
        assert 0.7 < rep["argument_bytes"] / (12 * rep["params"] / 8) < 1.5, (name, rep["argument_bytes"])
        assert rep["temp_bytes"] > 0 and rep["xla_flops_per_device"] > 0
