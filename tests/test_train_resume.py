"""Resume: 10 steps straight == 5 steps, a fresh process-like restart from the Orbax checkpoint, 5 more
(bitwise-equal params on CPU), and the Grain iterator continues where it stopped. Export of a checkpoint."""

import jax
import numpy as np

from jaxwebrl.data.pipeline import DataIterator, PipelineConfig, make_dataset, samples_dataset
from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.data.samples import build_samples
from jaxwebrl.models import init_params, load_hf
from jaxwebrl.models.tiny import tiny_config
from jaxwebrl.config import default_config, parse_config
from jaxwebrl.train.trainer import Trainer

MC = tiny_config("qwen3", vocab_size=128, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1, head_dim=16)


def _config(workdir, resume=False):
    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir = str(workdir)
    c.log.tensorboard = False
    c.train.micro_batch = 2
    c.train.seq_len = 32
    c.train.steps = 10
    c.optim.lr = 1e-2
    c.optim.schedule = "warmup_cosine"
    c.optim.warmup_steps = 2
    c.checkpoint.resume = resume
    c.checkpoint.best_metric = "loss"
    c.checkpoint.keep = 2
    return c


def _iterator():
    rng = np.random.default_rng(0)
    trajs = [Trajectory(f"t{i}", [Turn(rng.integers(1, 128, 6).tolist(), rng.integers(1, 128, int(rng.integers(4, 20))).tolist())])
             for i in range(24)]
    return DataIterator(make_dataset(samples_dataset(build_samples(trajs)), PipelineConfig(seq_len=32, rows=2, seed=3)))


def _run(trainer, it, n):
    seen = []
    for _ in range(n):
        b = next(it)
        seen.append(b["tokens"].copy())
        trainer.train_on_batch(b)
        trainer.maybe_save()
    return seen


def test_resume_bitwise(tmp_path):
    params = init_params(MC, jax.random.key(0))
    c = _config(tmp_path / "straight")
    c.checkpoint.every = 100
    a = Trainer(parse_config(c), params=params, model_cfg=MC)
    it = _iterator()
    a.attach_data(it)
    straight_batches = _run(a, it, 10)
    straight = jax.device_get(a.params)
    a.close()

    c = _config(tmp_path / "resumed")
    c.checkpoint.every = 5
    b = Trainer(parse_config(c), params=params, model_cfg=MC)
    it = _iterator()
    b.attach_data(it)
    first = _run(b, it, 5)
    b.close()
    del b, it  # everything in memory is gone; only the checkpoint directory survives

    c = _config(tmp_path / "resumed", resume=True)
    c.checkpoint.every = 5
    r = Trainer(parse_config(c), params=init_params(MC, jax.random.key(42)), model_cfg=MC)  # different init: must be overwritten
    assert r.step == 5
    it = _iterator()
    r.attach_data(it)  # the restored iterator state is applied here
    second = _run(r, it, 5)
    for x, y in zip(straight_batches, first + second):  # the data continued where it stopped
        assert np.array_equal(x, y)
    for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(jax.device_get(r.params))):
        assert np.array_equal(np.asarray(x), np.asarray(y))  # bitwise
    assert r.checkpointer.all_steps()[-1] == 10
    r.close()


def test_export_checkpoint(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from jaxwebrl.models.tiny import make_tiny_checkpoint

    cfg, params = make_tiny_checkpoint(tmp_path / "tiny", MC.replace(vocab_size=512))
    c = _config(tmp_path / "run")
    t = Trainer(parse_config(c), params=params, model_cfg=cfg, tokenizer_dir=str(tmp_path / "tiny"))
    t.save(force=True)
    t.close()
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "scripts" / "export_hf.py"), "--checkpoint", str(tmp_path / "run" / "checkpoints"),
                        "--out", str(tmp_path / "hf")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    cfg2, p2 = load_hf(tmp_path / "hf")
    assert cfg2.num_layers == cfg.num_layers and (tmp_path / "hf" / "tokenizer.json").exists()
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(p2)):
        assert np.array_equal(np.asarray(x), np.asarray(y))
