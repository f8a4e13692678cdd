"""The VL model loaded straight into sharded arrays on 8 fake CPU devices gives the single-device logits."""

from __future__ import annotations

from multidevice import run_with_devices

SHARDED_VL_FORWARD = """
import jax, jax.numpy as jnp, numpy as np, tempfile
from jaxwebrl.models import vl
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_hf_io import load_vl_hf
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint
from jaxwebrl.sharding import make_mesh
assert jax.device_count() == 8
path = tempfile.mkdtemp()
cfg, params, _ = make_tiny_vl_checkpoint(path, "qwen3_vl")
proc = load_processor(path)
rng = np.random.default_rng(0)
images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(210, 160), (96, 128)]]
texts = [proc.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": t}]}],
         tokenize=False, add_generation_prompt=True) for t in ["click", "type hello"]]
inp = proc(text=texts, images=images, padding=True, return_tensors="np")
x = vl.prepare_inputs(cfg, inp["input_ids"], inp["attention_mask"], inp["pixel_values"], inp["image_grid_thw"])
ref = np.asarray(vl.forward_jit(cfg, jax.device_put(params, jax.devices()[0]), x)[0])
mesh = make_mesh({"data": 2, "fsdp": 2, "tensor": 2})
_, sharded = load_vl_hf(path, mesh=mesh)
qkv = sharded["vision"]["blocks"]["wqkv"]  # [layers, embed, qkv, heads, head_dim]
assert qkv.addressable_shards[0].data.shape == (qkv.shape[0], qkv.shape[1] // 2, 3, qkv.shape[3] // 2, qkv.shape[4])
with jax.set_mesh(mesh):
    out = np.asarray(vl.forward_jit(cfg, sharded, x)[0])
keep = inp["attention_mask"].astype(bool)
diff = float(np.abs(out[keep] - ref[keep]).max())
assert diff <= 1e-5, diff
print("OK", diff)
"""


def test_sharded_vl_forward_equals_single_device():
    assert "OK" in run_with_devices(SHARDED_VL_FORWARD)
