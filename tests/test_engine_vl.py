"""JaxEngine with a vision-language model (tiny random Qwen3-VL and Qwen2.5-VL checkpoints built here, with the
checkpoint's own processor): greedy decoding with images equals `transformers.generate`; the engine's
logprobs (KV-cache decoding with images) equal the full forward over prompt + output; requests with 0, 1
and 2 images of different sizes share the continuous batch and each equals its solo run; bad image input
is a ValueError that names the fix."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import torch
import transformers

from jaxwebrl.engines import ImageInput, JaxEngine, SamplingParams
from jaxwebrl.models import vl
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint

MAX_LEN = 256
BUCKETS = (128, MAX_LEN)
STEPS = 8
TOL = 1e-4
SEED = 1  # a seed whose greedy outputs hold no <|image_pad|> (a full forward would read one as an image)
CORPUS = ["click the red button, then type hello into the search box and press enter"] * 4


def _image(h: int, w: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _png(image: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _request(proc: Any, text: str, images: list[np.ndarray]) -> tuple[list[int], list[ImageInput], dict[str, Any]]:
    """Prompt ids with placeholders expanded by the processor, the ImageInputs, and the processor output."""
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    chat = proc.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    out = proc(text=[chat], images=images or None, return_tensors="np")
    grids = [tuple(int(v) for v in g) for g in out.get("image_grid_thw", np.zeros((0, 3)))]
    splits = np.cumsum([int(np.prod(g)) for g in grids])[:-1]
    pixels = np.split(out["pixel_values"], splits) if images else []
    inputs = [ImageInput(_png(im), g, p) for im, g, p in zip(images, grids, pixels)]
    return [int(t) for t in out["input_ids"][0]], inputs, out


@pytest.fixture(scope="module", params=["qwen3_vl", "qwen2_5_vl"])
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp(request.param)
    cfg, params, _ = make_tiny_vl_checkpoint(path, request.param, seed=SEED, std=0.3, corpus=CORPUS)
    proc = load_processor(path)
    hf = transformers.AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    rows = [("type hello", []), ("click the red button", [_image(64, 96, 1)]),
            ("compare", [_image(96, 128, 2), _image(64, 64, 3)])]
    reqs = [_request(proc, text, images) for text, images in rows]
    engine = JaxEngine.from_checkpoint(path, num_slots=2, max_len=MAX_LEN, buckets=BUCKETS)
    assert engine.is_vl
    yield {"arch": request.param, "path": path, "cfg": cfg, "params": params, "proc": proc, "hf": hf,
           "reqs": reqs, "engine": engine}
    asyncio.run(engine.close())


GREEDY = SamplingParams(greedy=True, max_new_tokens=STEPS, ignore_eos=True)


def _hf_generate(tiny: dict[str, Any], ids: list[int], out: dict[str, Any]) -> list[int]:
    x = torch.tensor([ids])
    extra = {}
    if "pixel_values" in out:
        extra = {"pixel_values": torch.tensor(out["pixel_values"]), "image_grid_thw": torch.tensor(out["image_grid_thw"])}
    with torch.no_grad():
        res = tiny["hf"].generate(input_ids=x, attention_mask=torch.ones_like(x),
                                  mm_token_type_ids=(x == tiny["cfg"].image_token_id).long(), max_new_tokens=STEPS,
                                  do_sample=False, eos_token_id=None, pad_token_id=0, **extra)
    return res[0, len(ids):].tolist()


def test_greedy_with_images_equals_transformers_generate_and_batches(tiny: dict[str, Any]) -> None:
    """Three requests (0, 1, 2 images) at once on two slots: each equals transformers.generate alone."""
    engine: JaxEngine = tiny["engine"]

    async def run() -> list[Any]:
        return await asyncio.gather(*(engine.generate(ids, GREEDY, **({"images": ims} if ims else {}))
                                      for ids, ims, _ in tiny["reqs"]))

    gens = asyncio.run(run())
    assert [len(im) for _, im, _ in tiny["reqs"]] == [0, 1, 2]
    for (ids, _, out), gen in zip(tiny["reqs"], gens):
        assert gen.finish_reason == "length" and len(gen.token_ids) == STEPS
        assert gen.token_ids == _hf_generate(tiny, ids, out), tiny["arch"]
    assert len({tuple(g.token_ids) for g in gens}) == 3  # the images change what the model says
    admits = [e.slot for e in engine.events if e.kind == "admit"]
    assert len(admits) >= 3 and set(admits) == {0, 1}  # two slots served three requests
    solo = asyncio.run(engine.generate(tiny["reqs"][2][0], GREEDY, images=tiny["reqs"][2][1]))
    assert solo.token_ids == gens[2].token_ids


def test_kv_cache_logprobs_with_images_equal_full_forward(tiny: dict[str, Any]) -> None:
    engine: JaxEngine = tiny["engine"]
    cfg, params = tiny["cfg"], tiny["params"]
    for ids, images, out in tiny["reqs"][1:]:
        gen = asyncio.run(engine.generate(ids, GREEDY, images=images))
        assert tiny["cfg"].image_token_id not in gen.token_ids
        full = np.asarray([ids + gen.token_ids])
        x = vl.prepare_inputs(cfg, full, np.ones_like(full), out["pixel_values"], out["image_grid_thw"])
        logits = np.asarray(vl.forward_jit(cfg, params, x)[0])[0]
        logp = np.asarray(jax.nn.log_softmax(logits, axis=-1))
        steps = np.arange(len(ids) - 1, len(ids) - 1 + STEPS)
        np.testing.assert_array_equal(logp[steps].argmax(-1), gen.token_ids)
        np.testing.assert_allclose(gen.logprobs, logp[steps, gen.token_ids], atol=TOL)


def test_bad_image_input_names_the_fix(tiny: dict[str, Any]) -> None:
    engine: JaxEngine = tiny["engine"]
    ids, images, _ = tiny["reqs"][1]
    text_ids = tiny["reqs"][0][0]

    async def gen(prompt: list[int], ims: Any) -> Any:
        return await engine.generate(prompt, GREEDY, images=ims)

    with pytest.raises(ValueError, match="image tokens .* give"):
        asyncio.run(gen(text_ids, images))  # an image but no placeholders
    with pytest.raises(ValueError, match="image tokens .* give"):
        asyncio.run(gen(ids, []))  # placeholders but no image
    with pytest.raises(ValueError, match="pixel_values must be the processor's"):
        asyncio.run(gen(ids, [ImageInput(images[0].data, images[0].grid_thw, None)]))
    n = sum(im.num_patches for im in images)  # right count, but a grid the merger cannot cut: refused up front
    odd = ImageInput(images[0].data, (1, 1, n), np.zeros((n, tiny["cfg"].vision.patch_dim), np.float32))
    with pytest.raises(ValueError, match="divisible by spatial_merge_size"):
        asyncio.run(gen(ids, [odd]))
    # the engine still serves after refusing
    assert asyncio.run(gen(ids, images)).token_ids == asyncio.run(gen(ids, images)).token_ids


def test_text_engine_refuses_images(tmp_path: Path) -> None:
    from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config

    cfg, params = make_tiny_checkpoint(tmp_path, tiny_config("qwen3"), seed=0)
    engine = JaxEngine(cfg, params, num_slots=1, max_len=64, buckets=(64,))
    image = ImageInput(b"png", (1, 4, 4), np.zeros((16, 8), np.float32))
    with pytest.raises(ValueError, match="text-only model"):
        asyncio.run(engine.generate([5, 6, 7], GREEDY, images=[image]))
    asyncio.run(engine.close())
