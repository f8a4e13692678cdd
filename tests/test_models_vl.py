"""Flax Qwen3-VL / Qwen2.5-VL vs transformers (PyTorch CPU): logits with 0, 1 and 2 images per row and
left/right padding, export -> transformers, load -> export -> load, and KV-cache decoding with images.

The reference models are built by transformers from tiny random configs (shared/notes/qwen_vl.md); the
processor is the checkpoint's own, made torchvision-free by jaxwebrl.models.processor."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from safetensors.numpy import load_file, save_file

from jaxwebrl.models import vl
from jaxwebrl.models.config import UnsupportedModelError
from jaxwebrl.models.hf_io import CheckpointError
from jaxwebrl.models.processor import load_processor, tiny_processor, train_vl_tokenizer, vision_token_ids
from jaxwebrl.models.vl_hf_io import export_vl_hf, iter_vl_hf_tensors, load_vl_hf
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint, tiny_vl_config
from jaxwebrl.sharding import RULES

FP32_TOL = 1e-4
# Measured (2026-11-25): bf16 params and activations vs the fp32 torch reference give max |diff| 0.072
# (Qwen3-VL) and 0.056 (Qwen2.5-VL) on logits up to 3.4 (weights std 0.1, 3 vision blocks); 3x headroom.
BF16_TOL = 0.2
ARCHS = ["qwen3_vl", "qwen2_5_vl"]
CORPUS = ["click the red button, then type hello into the search box and press enter"] * 4
# Three image sizes -> three different patch grids (and, for Qwen2.5-VL, 1 to 4 attention windows).
IMAGE_SIZES = [(210, 160), (96, 128), (64, 96)]


def _hf_config(arch: str, ids: dict[str, int]) -> transformers.PretrainedConfig:
    if arch == "qwen3_vl":
        return transformers.Qwen3VLConfig(
            text_config=dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                             pad_token_id=0, eos_token_id=2,
                             rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [4, 2, 2],
                                              "mrope_interleaved": True}),
            vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                               num_position_embeddings=64, deepstack_visual_indexes=[2, 0]),
            tie_word_embeddings=False, **ids)
    return transformers.Qwen2_5_VLConfig(
        text_config=dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=0,
                         eos_token_id=2, pad_token_id=0,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, window_size=112,
                           fullatt_block_indexes=[1], tokens_per_second=2, hidden_act="silu"),
        **ids)


@pytest.fixture(scope="module", params=ARCHS)
def checkpoint(request, tmp_path_factory):
    """(arch, dir, transformers model, processor): random weights large enough that every tensor matters."""
    arch = request.param
    path = tmp_path_factory.mktemp(arch)
    tok = train_vl_tokenizer(CORPUS, vocab_size=300)
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(_hf_config(arch, vision_token_ids(tok))).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and ("norm" in name or "ln_q" in name):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    model.save_pretrained(path)
    proc = tiny_processor(arch, tok, patch_size=16 if arch == "qwen3_vl" else 14)
    proc.save_pretrained(path)
    return arch, path, model, load_processor(path)


def _images(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in IMAGE_SIZES]


def _batch(proc, padding_side: str, images: list[np.ndarray] | None = None):
    """Rows with 0, 1 and 2 images (the last two of different sizes) and different text lengths."""
    image = {"type": "image"}
    rows = [
        [{"type": "text", "text": "type hello into the search box"}],
        [image, {"type": "text", "text": "click the red button"}],
        [{"type": "text", "text": "compare"}, image, {"type": "text", "text": "and"}, image],
    ]
    texts = [proc.apply_chat_template([{"role": "user", "content": c}], tokenize=False, add_generation_prompt=True)
             for c in rows]
    proc.tokenizer.padding_side = padding_side
    return proc(text=texts, images=images or _images(), padding=True, return_tensors="pt")


def _torch_logits(model, inp) -> np.ndarray:
    with torch.no_grad():
        return model(**inp).logits.float().numpy()


def _flax_logits(cfg, params, inp) -> np.ndarray:
    x = vl.prepare_inputs(cfg, inp["input_ids"], inp["attention_mask"], inp["pixel_values"], inp["image_grid_thw"],
                          inp["mm_token_type_ids"])
    return np.asarray(vl.forward_jit(cfg, params, x)[0])


def _max_diff(a: np.ndarray, b: np.ndarray, mask) -> float:
    keep = np.asarray(mask).astype(bool)
    return float(np.abs(a[keep] - b[keep]).max())


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_logits_match_transformers_with_0_1_2_images(checkpoint, padding_side):
    arch, path, model, proc = checkpoint
    cfg, params = load_vl_hf(path)
    inp = _batch(proc, padding_side)
    grids = inp["image_grid_thw"].tolist()
    assert len({tuple(g) for g in grids}) == 3 and inp["attention_mask"].min() == 0  # 3 sizes, padded
    ref = _torch_logits(model, inp)
    ours = _flax_logits(cfg, params, inp)
    diff = _max_diff(ours, ref, inp["attention_mask"])
    print(f"{arch} {padding_side}: max |logit diff| {diff:.2e} (logits up to {np.abs(ref).max():.2f})")
    assert diff <= FP32_TOL, f"{arch} {padding_side}: max |diff| {diff}"
    # The images matter: other pixels change the logits of the rows that have images, not of the text row.
    other = _batch(proc, padding_side, images=_images(seed=1))
    changed = np.abs(_flax_logits(cfg, params, other) - ours).max(axis=(1, 2))
    assert changed[0] < 1e-6 and changed[1] > 1e-2 and changed[2] > 1e-2, changed


def test_unrolled_remat_and_padded_patches_give_same_logits(checkpoint):
    arch, path, model, proc = checkpoint
    inp = _batch(proc, "left")
    ref = _torch_logits(model, inp)
    cfg, params = load_vl_hf(path, scan_layers=False, remat=True)
    x = vl.prepare_inputs(cfg, inp["input_ids"], inp["attention_mask"], inp["pixel_values"], inp["image_grid_thw"],
                          inp["mm_token_type_ids"], num_patches=512)  # bucketed: padding patches join no image
    assert x["vision"]["pixel_values"].shape[0] == 512 > inp["pixel_values"].shape[0]
    diff = _max_diff(np.asarray(vl.forward_jit(cfg, params, x)[0]), ref, inp["attention_mask"])
    assert diff <= FP32_TOL, diff


def test_logits_bf16_within_measured_tolerance(checkpoint):
    arch, path, model, proc = checkpoint
    cfg, params = load_vl_hf(path, dtype="bfloat16", param_dtype="bfloat16")
    assert params["vision"]["patch_w"].dtype == jnp.bfloat16 and params["text"]["embed"].dtype == jnp.bfloat16
    inp = _batch(proc, "left")
    diff = _max_diff(_flax_logits(cfg, params, inp), _torch_logits(model, inp), inp["attention_mask"])
    assert diff <= BF16_TOL, f"{arch}: bf16 max |diff| {diff}"


def test_parity_is_sensitive_to_deepstack_and_windows(checkpoint):
    """The checks above would catch a missing DeepStack (Qwen3-VL) or window attention (Qwen2.5-VL)."""
    arch, path, model, proc = checkpoint
    cfg, params = load_vl_hf(path)
    inp = _batch(proc, "right")
    ref = _torch_logits(model, inp)
    if arch == "qwen3_vl":
        ablated = jax.tree.map(lambda a: a, params)
        ablated["vision"]["deepstack"] = jax.tree.map(jnp.zeros_like, params["vision"]["deepstack"])
        variant = cfg
    else:
        ablated = params
        variant = cfg.replace(vision=cfg.vision.__class__(**{**cfg.vision.__dict__, "fullatt_block_indexes": (0, 1, 2)}))
    diff = _max_diff(_flax_logits(variant, ablated, inp), ref, inp["attention_mask"])
    assert diff > 100 * FP32_TOL, diff


def test_export_loads_in_transformers_and_round_trips(checkpoint, tmp_path):
    arch, path, model, proc = checkpoint
    cfg, params = load_vl_hf(path)
    out = export_vl_hf(cfg, params, tmp_path / "export", processor_dir=path)
    reloaded = transformers.AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).eval()
    inp = _batch(proc, "left")
    assert np.abs(_torch_logits(reloaded, inp) - _torch_logits(model, inp)).max() <= FP32_TOL
    # The exported tensors are the ones transformers saved, under the same names.
    original, exported = load_file(str(path / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(exported) == set(original)
    for key, value in exported.items():
        np.testing.assert_array_equal(value, original[key])
    # load -> export -> load: identical config and params.
    cfg2, params2 = load_vl_hf(out)
    assert cfg2 == cfg
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # The processor travels with the model, under the standard transformers class name.
    saved = json.loads((out / "processor_config.json").read_text())
    assert saved["processor_class"] == {"qwen3_vl": "Qwen3VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}[arch]
    again = load_processor(out)(text=["<|vision_start|><|image_pad|><|vision_end|>hi"], images=_images()[:1],
                                return_tensors="np")
    np.testing.assert_array_equal(again["pixel_values"], proc(text=["<|vision_start|><|image_pad|><|vision_end|>hi"],
                                                              images=_images()[:1], return_tensors="np")["pixel_values"])


def test_sharded_export_with_index_round_trips(checkpoint, tmp_path):
    arch, path, _, _ = checkpoint
    cfg, params = load_vl_hf(path)
    out = export_vl_hf(cfg, params, tmp_path / "sharded", max_shard_bytes=60_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    _, params2 = load_vl_hf(out)
    for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_kv_cache_decoding_with_images_equals_full_forward_and_generate(checkpoint):
    """Prefill (right padding) then one token per step from the cache; rows with 1 and 2 images."""
    arch, path, model, proc = checkpoint
    cfg, params = load_vl_hf(path)
    inp = _batch(proc, "right")
    ids, mask = inp["input_ids"].numpy()[1:], inp["attention_mask"].numpy()[1:]  # row 0 has no image
    pixels, grids = inp["pixel_values"].numpy(), inp["image_grid_thw"].numpy()
    lens, steps = mask.sum(1), 6
    prompt = vl.prepare_inputs(cfg, ids, mask, pixels, grids)
    cache = vl.init_cache(cfg, batch=2, max_len=int(lens.max()) + steps + 2)
    logits, cache = vl.forward_jit(cfg, params, prompt, cache=cache)
    logits = np.asarray(logits)
    next_tok = logits[np.arange(2), lens - 1].argmax(-1)
    generated, step_logits = [next_tok], []
    for s in range(steps - 1):
        x = vl.decode_inputs(next_tok[:, None], (lens + s)[:, None], prompt["rope_deltas"])
        out, cache = vl.forward_jit(cfg, params, x, cache=cache)
        step_logits.append(np.asarray(out)[:, 0])
        next_tok = step_logits[-1].argmax(-1)
        generated.append(next_tok)
    generated = np.stack(generated, axis=1)  # [2, steps], greedy
    # The full forward over prompt + continuation gives the same logits at every step.
    full_ids = np.zeros((2, int(lens.max()) + steps), np.int64)
    full_mask = np.zeros_like(full_ids)
    for b in range(2):
        full_ids[b, :lens[b] + steps] = np.concatenate([ids[b, :lens[b]], generated[b]])
        full_mask[b, :lens[b] + steps] = 1
    full = np.asarray(vl.forward_jit(cfg, params, vl.prepare_inputs(cfg, full_ids, full_mask, pixels, grids))[0])
    for b in range(2):
        np.testing.assert_allclose(logits[b, :lens[b]], full[b, :lens[b]], atol=FP32_TOL)
        for s in range(steps - 1):
            np.testing.assert_allclose(step_logits[s][b], full[b, lens[b] + s], atol=FP32_TOL)
    # transformers.generate on each row alone picks the same tokens.
    patches = np.prod(grids, axis=1)
    rows = [(slice(0, patches[0]), grids[:1]), (slice(patches[0], patches.sum()), grids[1:])]
    for b, (pix, grid) in enumerate(rows):
        row_ids = ids[b:b + 1, :lens[b]]
        with torch.no_grad():
            hf = model.generate(input_ids=torch.tensor(row_ids), attention_mask=torch.ones_like(torch.tensor(row_ids)),
                                mm_token_type_ids=torch.tensor((row_ids == cfg.image_token_id).astype(np.int64)),
                                pixel_values=torch.tensor(pixels[pix]), image_grid_thw=torch.tensor(grid),
                                max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert hf.shape[1] - lens[b] == steps
        np.testing.assert_array_equal(hf[0, lens[b]:].numpy(), generated[b])


# ---- our own tiny checkpoints, module API, errors ----------------------------------------------------

@pytest.mark.parametrize("arch, tied", [("qwen3_vl", True), ("qwen2_5_vl", False)])  # Qwen3-VL-4B ties embeddings
def test_tiny_checkpoint_loads_in_transformers_with_same_logits(arch, tied, tmp_path):
    cfg = tiny_vl_config(arch, tie_word_embeddings=tied)
    cfg, params, proc = make_tiny_vl_checkpoint(tmp_path, arch, cfg=cfg)
    assert ("lm_head" in params["text"]) != tied
    model = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path, dtype=torch.float32).eval()
    inp = _batch(load_processor(tmp_path), "left")
    diff = _max_diff(_flax_logits(cfg, params, inp), _torch_logits(model, inp), inp["attention_mask"])
    assert diff <= FP32_TOL, diff
    # Every parameter names its axes from the one rules table, and the NNX module agrees with forward.
    names = {n for axes in jax.tree.leaves(vl.logical_axes(cfg), is_leaf=lambda x: isinstance(x, tuple)) for n in axes}
    assert names <= set(RULES), names - set(RULES)
    module = vl.VLModel(cfg, rngs=nnx.Rngs(params=0), params=params)
    axes = {path: v.logical_axes for path, v in nnx.iter_graph(module) if isinstance(v, nnx.Param)}
    assert axes[("params", "vision", "blocks", "wqkv")] == ("layers", "embed", "qkv", "heads", "head_dim")
    np.testing.assert_allclose(np.asarray(module(inp["input_ids"], inp["attention_mask"], inp["pixel_values"],
                                                 inp["image_grid_thw"])), _flax_logits(cfg, params, inp), atol=1e-6)


def test_bad_inputs_name_the_problem(checkpoint):
    arch, path, _, proc = checkpoint
    cfg, _ = load_vl_hf(path)
    inp = _batch(proc, "right")
    ids, mask = inp["input_ids"].numpy(), inp["attention_mask"].numpy()
    pv, grid = inp["pixel_values"].numpy(), inp["image_grid_thw"].numpy()
    with pytest.raises(ValueError, match="pixel_values / image_grid_thw are missing"):
        vl.prepare_inputs(cfg, ids, mask)
    with pytest.raises(ValueError, match="image tokens but the images give"):
        cut = ids.copy()
        cut[1, np.flatnonzero(cut[1] == cfg.image_token_id)[0]] = 9
        vl.prepare_inputs(cfg, cut, mask, pv, grid)
    with pytest.raises(ValueError, match=r"pixel_values has shape"):
        vl.prepare_inputs(cfg, ids, mask, pv[:-4], grid)
    with pytest.raises(ValueError, match="num_patches"):
        vl.prepare_inputs(cfg, ids, mask, pv, grid, num_patches=8)


def test_bad_checkpoints_are_named(checkpoint, tmp_path):
    arch, path, _, _ = checkpoint
    cfg, params = load_vl_hf(path)
    out = export_vl_hf(cfg, params, tmp_path / "ck")
    tensors = load_file(str(out / "model.safetensors"))
    victim = next(n for n in tensors if "blocks.1.attn.qkv.weight" in n)
    tensors.pop(victim)
    save_file(tensors, str(out / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor.*blocks\.1\.attn\.qkv\.weight"):
        load_vl_hf(out)
    hf = json.loads((out / "config.json").read_text())
    hf["architectures"] = ["LlavaForConditionalGeneration"]
    (out / "config.json").write_text(json.dumps(hf))
    with pytest.raises(UnsupportedModelError, match="Qwen2_5_VLForConditionalGeneration.*Qwen3VLForConditionalGeneration"):
        load_vl_hf(out)


def test_names_written_match_transformers_state_dict(checkpoint):
    arch, path, model, _ = checkpoint
    cfg, params = load_vl_hf(path)
    ours = {name for name, _ in iter_vl_hf_tensors(cfg, params)}
    assert ours == set(load_file(str(Path(path) / "model.safetensors")))
