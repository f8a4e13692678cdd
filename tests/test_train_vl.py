"""Pixels through the compiled train step: per-turn samples with screenshots (rendered by the processor,
recorded as PNG + digest, rebuilt into pixels) make fixed-shape batches (`data.vl_batch`); the step's loss
equals weighted NLL computed sample by sample with the model's own forward; on 8 fake devices (data 2 x
fsdp 2 x tensor 2) the step equals the single-device step; `freeze_vision` leaves the encoder untouched."""

from __future__ import annotations

from multidevice import run_with_devices

VL_TRAIN_STEP = r"""
import io, tempfile
import jax, jax.numpy as jnp, numpy as np, optax
from PIL import Image
from jaxwebrl.agent.render import Message, PromptRenderer
from jaxwebrl.data.records import Trajectory, Turn, TurnImage
from jaxwebrl.data.samples import build_samples
from jaxwebrl.data.vl_batch import vl_batch
from jaxwebrl.models import vl
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint
from jaxwebrl.sharding import make_mesh
from jaxwebrl.train.losses import LossConfig
from jaxwebrl.train.step import StepConfig, grads_and_metrics, init_state, make_train_step

assert jax.device_count() == 8
path = tempfile.mkdtemp()
cfg, params, _ = make_tiny_vl_checkpoint(path, "qwen3_vl", std=0.1)
proc = load_processor(path)
renderer = PromptRenderer(proc)
rng = np.random.default_rng(0)

def png(h, w):
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()

trajs = []
for i, shots in enumerate([(png(96, 128),), (), (png(64, 64), png(128, 96)), (png(210, 160),)]):
    r = renderer.render([Message("system", "act"), Message("user", f"task {i}: click", images=shots)])
    resp = [int(t) for t in rng.integers(10, cfg.text.vocab_size, 5)]
    turn = Turn(prompt_ids=r.ids, response_ids=resp, response_logprobs=[0.0] * 5,
                images=[TurnImage.of(im.data, im.grid_thw, im.pixel_values) for im in r.images] or None)
    trajs.append(Trajectory(task_id=f"t{i}", turns=[turn], advantage=[1.0, 0.5, 1.0, 2.0][i]))
samples = build_samples(trajs, per="turn", norm="token_mean")
assert [len(s.images or []) for s in samples] == [1, 0, 2, 1]
# rows split over data x fsdp = 4: micro-batches of 4; the second holds only empty rows (and no image)
batch = vl_batch(cfg, samples, proc, accum=2, micro_batch=4, seq_len=128)
assert batch["tokens"].shape == (2, 4, 128) and batch["mrope_positions"].shape == (2, 4, 3, 128)
P = batch["vision"]["pixel_values"].shape[2]  # each row's own patches, bucketed by the row with the most
per_row = [sum(int(np.prod(im.grid_thw)) for im in (s.images or [])) for s in samples]
assert P >= max(per_row) and P & (P - 1) == 0 and batch["vision"]["pixel_values"].shape == (2, 4, P, cfg.vision.patch_dim)
assert [int((batch["vision"]["segment"][0, b] > 0).sum()) for b in range(4)] == per_row
assert (batch["vision"]["segment"][1] == 0).all() and batch["loss_mask"][1].sum() == 0

# the loss by hand: each sample alone through the model's forward
total, count = 0.0, 0
for s in samples:
    seq = s.tokens[None]
    pix = np.concatenate([im.pixel_values(proc) for im in s.images]) if s.images else None
    grid = [im.grid_thw for im in s.images] if s.images else None
    x = vl.prepare_inputs(cfg, seq, np.ones_like(seq), pix, grid)
    lp = np.asarray(jax.nn.log_softmax(vl.forward_jit(cfg, params, x)[0][0], -1))
    at = np.flatnonzero(s.loss_mask)
    total += float((-s.advantages[at] * lp[at - 1, s.tokens[at]]).sum())
    count += len(at)
expected = total / count

tx = optax.adamw(1e-3, weight_decay=0.1)

def one_step(mesh, freeze=False):
    step_cfg = StepConfig(cfg, LossConfig(kind="sft"), freeze_vision=freeze)
    state = init_state(params, tx, mesh, cfg)
    step = make_train_step(step_cfg, tx, mesh)
    with jax.set_mesh(mesh):
        grads, _ = jax.jit(lambda p, b: grads_and_metrics(step_cfg, p, b))(state["params"], batch)
        grads = jax.tree.map(np.asarray, grads)
        state, metrics = step(state, batch)  # numpy: the step places it with its shardings
    return jax.tree.map(np.asarray, state["params"]), grads, {k: float(v) for k, v in metrics.items()}

single, g1, m1 = one_step(make_mesh({"data": 1, "fsdp": 1, "tensor": 1}, jax.devices()[:1]))
assert abs(m1["loss"] - expected) <= 1e-4 * max(1.0, abs(expected)), (m1["loss"], expected)
assert m1["tokens"] == count == 20
sharded, g8, m8 = one_step(make_mesh({"data": 2, "fsdp": 2, "tensor": 2}))
assert abs(m8["loss"] - m1["loss"]) <= 1e-5 * abs(m1["loss"]), (m8["loss"], m1["loss"])
# gradients per leaf relative to the leaf's largest; params after Adam relative to the largest parameter
# (Adam's 1/sqrt(v) amplifies reduction-order noise in near-zero gradients; see test_train_sharded)
gdiff = max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12)) for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g8)))
scale = max(float(np.abs(x).max()) for x in jax.tree.leaves(single))
pdiff = max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(sharded))) / scale
assert gdiff <= 1e-5 and pdiff <= 5e-5, (gdiff, pdiff)
vis_grad = max(float(np.abs(x).max()) for x in jax.tree.leaves(g1["vision"]))
assert vis_grad > 1e-6  # the images reach the encoder's gradient
frozen, gf, mf = one_step(make_mesh({"data": 2, "fsdp": 2, "tensor": 2}), freeze=True)
assert max(float(np.abs(x).max()) for x in jax.tree.leaves(gf["vision"])) == 0.0
for a, b in zip(jax.tree.leaves(frozen["vision"]), jax.tree.leaves(params["vision"])):
    np.testing.assert_array_equal(a, np.asarray(b))
assert max(float(np.abs(a - np.asarray(b)).max()) for a, b in zip(jax.tree.leaves(frozen["text"]), jax.tree.leaves(params["text"]))) > 5e-4
assert abs(mf["loss"] - m1["loss"]) <= 1e-5 * abs(m1["loss"])
print("OK", m1["loss"], expected, gdiff, pdiff, vis_grad, P)
"""


def test_vl_train_step_matches_hand_loss_and_sharded_equals_single_device():
    out = run_with_devices(VL_TRAIN_STEP)
    assert out.startswith("OK"), out
    print(out)
