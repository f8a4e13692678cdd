"""Sharded forward on 8 fake CPU devices equals the single-device forward, and params really are split."""

from __future__ import annotations

import pytest

from multidevice import run_with_devices

SHARDED_FORWARD = """
import jax, jax.numpy as jnp, numpy as np, tempfile
from jaxwebrl.models import forward, init_params, load_hf, logical_axes
from jaxwebrl.models.tiny import tiny_config, make_tiny_checkpoint
from jaxwebrl.sharding import make_mesh, shard_tree, batch_sharding
assert jax.device_count() == 8
cfg = tiny_config("qwen3", num_kv_heads=2, num_heads=4, hidden_size=64, intermediate_size=128, vocab_size=512)
path = tempfile.mkdtemp()
_, params = make_tiny_checkpoint(path, cfg)
rng = np.random.default_rng(0)
tokens = jnp.asarray(rng.integers(0, 400, (8, 16)))
pos = jnp.broadcast_to(jnp.arange(16), (8, 16))
ref = np.asarray(jax.jit(lambda p, t, q: forward(cfg, p, t, q)[0])(jax.device_put(params, jax.devices()[0]), tokens, pos))
for shape in ({"data": 2, "fsdp": 2, "tensor": 2}, {"fsdp": 8}, {"data": 2, "fsdp": -1}):
    mesh = make_mesh(shape)
    _, sharded = load_hf(path, mesh=mesh)  # loaded straight into sharded arrays
    wq = sharded["layers"]["wq"]
    fsdp, tensor = mesh.shape["fsdp"], mesh.shape["tensor"]
    shard_shape = wq.addressable_shards[0].data.shape
    assert shard_shape == (wq.shape[0], wq.shape[1] // fsdp, wq.shape[2] // tensor, wq.shape[3]), (shape, shard_shape)
    assert sharded["embed"].addressable_shards[0].data.shape == (512 // tensor, 64 // fsdp)
    with jax.set_mesh(mesh):
        t = jax.device_put(tokens, batch_sharding(mesh)); q = jax.device_put(pos, batch_sharding(mesh))
        out = jax.jit(lambda p, t, q: forward(cfg, p, t, q)[0])(sharded, t, q)
    diff = float(np.abs(np.asarray(out) - ref).max())
    assert diff <= 1e-5, (shape, diff)
    # shard_tree from host params gives the same placement as load_hf
    placed = shard_tree(params, logical_axes(cfg), mesh)
    assert placed["layers"]["w_up"].sharding == sharded["layers"]["w_up"].sharding
    print("OK", shape, diff, shard_shape)
"""


def test_sharded_forward_equals_single_device():
    out = run_with_devices(SHARDED_FORWARD)
    assert out.count("OK") == 3, out


MESH_ERRORS = """
import jax, numpy as np
from jaxwebrl.models import init_params, logical_axes
from jaxwebrl.models.tiny import tiny_config
from jaxwebrl.sharding import make_mesh, shard_tree, ShardingError
cfg = tiny_config("qwen3", num_heads=3, num_kv_heads=3, vocab_size=512)
params = init_params(cfg, jax.random.key(0))
try:
    shard_tree(params, logical_axes(cfg), make_mesh({"fsdp": 2, "tensor": 4}))
except ShardingError as e:
    print("ERR1", e)
try:
    make_mesh({"data": 4, "fsdp": 4})
except ShardingError as e:
    print("ERR2", e)
try:
    make_mesh({"data": 3, "fsdp": -1})
except ShardingError as e:
    print("ERR3", e)
"""


def test_mesh_errors_name_param_dimension_and_axis():
    out = run_with_devices(MESH_ERRORS)
    assert "ERR1 param 'layers/wk': dimension 2 of size 3 is not divisible by mesh axis 'tensor' of size 4" in out, out
    assert "ERR2 mesh {'data': 4, 'fsdp': 4, 'tensor': 1} needs 16 devices but only 8 exist" in out, out
    assert "ERR3" in out and "not divisible by 3" in out, out
