"""A vision-language policy (tiny random Qwen3-VL, its own processor) plays MiniWoB++ in real Chromium from
screenshots with OpenWebRL's tools and the `last_k_screenshots` context, through the real JaxEngine.

Token in, token out with images: every turn records exactly the prompt ids and the images the engine got;
from the record alone (prompt ids, PNGs rebuilt into pixels by the processor) the model's full forward
gives the engine's logprobs of the response. Only the last K screenshots are images; older ones are the
paper's text stand-in, and every feedback string stays."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np
import pytest
from PIL import Image

from envs import get_suite
from jaxwebrl.agent import AgentConfig, Message, PromptRenderer, run_episode
from jaxwebrl.agent.context import OMITTED_SCREENSHOT
from jaxwebrl.agent.render import BAD_IMAGE
from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig
from jaxwebrl.data.records import Trajectory
from jaxwebrl.engines import Generation, ImageInput, JaxEngine, SamplingParams
from jaxwebrl.models import vl
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint

pytestmark = pytest.mark.timeout(600)

ENV = EnvConfig(action_space="openwebrl", viewport=(640, 480), obs=ObsConfig(text_mode="none", screenshot=True))
STEPS = 3


class ImageRecordingEngine:
    """A real engine, with every request it got kept (prompt ids, images, generation)."""

    def __init__(self, inner: JaxEngine) -> None:
        self.inner, self.name, self.calls = inner, inner.name, []

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
                       images: Sequence[ImageInput] = ()) -> Generation:
        gen = await self.inner.generate(prompt_ids, params, session_id=session_id, images=images)
        self.calls.append((list(prompt_ids), list(images), gen))
        return gen


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("qwen3_vl_policy")
    cfg, params, _ = make_tiny_vl_checkpoint(path, "qwen3_vl", seed=0, std=0.1)
    return {"path": path, "cfg": cfg, "params": params, "proc": load_processor(path)}


@pytest.fixture(scope="module")
def suite():
    s = get_suite("miniwob", tasks=["click-button"]).start()
    yield s
    s.stop()


def _play(policy: dict[str, Any], suite: Any, agent: AgentConfig) -> tuple[Trajectory, list]:
    async def go():
        engine = JaxEngine.from_checkpoint(policy["path"], num_slots=1, max_len=2048, buckets=(1024, 2048))
        rec = ImageRecordingEngine(engine)
        try:
            async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=1), ENV) as pool:
                env = await pool.new_env(ENV)
                try:
                    task = suite.get_task(suite.task_ids("train")[0])
                    # the processor stands in for the tokenizer: the renderer then renders images
                    res = await run_episode(env, rec, policy["proc"], task, seed=0, cfg=agent, sample_seed=3)
                finally:
                    await env.close()
        finally:
            await engine.close()
        return res.trajectory, rec.calls

    return asyncio.run(go())


@pytest.mark.parametrize("k", [1, 2])
def test_last_k_screenshots_token_in_token_out_with_images(policy: dict[str, Any], suite: Any, k: int) -> None:
    cfg, params, proc = policy["cfg"], policy["params"], policy["proc"]
    agent = AgentConfig(strategy="last_k_screenshots", prompt_format="openwebrl", max_steps=STEPS, last_k=k,
                        max_format_errors=10, max_new_tokens=6, max_context_tokens=2048, temperature=1.0)
    traj, calls = _play(policy, suite, agent)
    assert len(traj.turns) == STEPS == len(calls)
    for t, (turn, (prompt, images, gen)) in enumerate(zip(traj.turns, calls)):
        # the record is what the engine got and gave
        assert turn.prompt_ids == prompt and turn.response_ids == gen.token_ids
        assert turn.response_logprobs == gen.logprobs
        assert len(turn.images) == len(images) == min(k, t + 1)
        assert [im.png for im in turn.images] == [im.data for im in images]
        assert all(im.png[:8] == b"\x89PNG\r\n\x1a\n" for im in turn.images)
        n_tokens = sum(int(np.prod(im.grid_thw)) for im in turn.images) // cfg.vision.merge_unit
        assert prompt.count(cfg.image_token_id) == n_tokens > 0
        assert cfg.image_token_id not in turn.response_ids  # (a sampled placeholder would be read as an image)
        # the newest image is this turn's screenshot, and the observation digest fingerprints it
        shot = __import__("hashlib").sha1(turn.images[-1].png).hexdigest()[:16]
        assert turn.observation_digest.endswith(":" + shot)
        # rebuilt from the record alone, the full forward gives the engine's logprobs (temperature 1)
        pixels = np.concatenate([im.pixel_values(proc) for im in turn.images])
        for im, sent in zip(turn.images, images):
            np.testing.assert_array_equal(im.pixel_values(proc), sent.pixel_values)
        seq = np.asarray([turn.prompt_ids + turn.response_ids])
        x = vl.prepare_inputs(cfg, seq, np.ones_like(seq), pixels, [im.grid_thw for im in turn.images])
        logp = np.asarray(jax.nn.log_softmax(vl.forward_jit(cfg, params, x)[0][0], axis=-1))
        at = np.arange(len(turn.prompt_ids) - 1, seq.shape[1] - 1)
        np.testing.assert_allclose(turn.response_logprobs, logp[at, turn.response_ids], atol=1e-4)
    # older screenshots are text; every feedback string stays; the metadata goes with each shown screenshot
    last = proc.tokenizer.decode(traj.turns[-1].prompt_ids)
    assert last.count(OMITTED_SCREENSHOT) == STEPS - k
    assert last.count("Feedback: ") == STEPS - 1 and last.count("Task: ") == 1
    assert last.count("Viewport: 640x480") == k and last.count("<|vision_start|>") == k
    # the record survives JSON
    again = Trajectory.from_json(traj.to_json())
    assert [[im.png for im in t.images] for t in again.turns] == [[im.png for im in t.images] for t in traj.turns]
    assert again.turns[0].images[0].grid_thw == traj.turns[0].images[0].grid_thw


def test_renderer_images_need_a_processor_and_bad_images_become_text(policy: dict[str, Any], tmp_path: Path) -> None:
    proc = policy["proc"]
    renderer = PromptRenderer(proc)
    out = renderer.render([Message("system", "s"), Message("user", "page <|image_pad|>", images=(b"not a png",))])
    text = proc.tokenizer.decode(out.ids)
    assert out.images == [] and policy["cfg"].image_token_id not in out.ids  # page text cannot pose as an image
    assert BAD_IMAGE.format("UnidentifiedImageError") in text
    thin = io.BytesIO()
    Image.new("RGB", (400, 1)).save(thin, format="PNG")  # decodes, but no Qwen-VL processor takes it
    out = renderer.render([Message("user", "x", images=(thin.getvalue(),))])
    assert out.images == [] and BAD_IMAGE.format("aspect ratio over 200") in proc.tokenizer.decode(out.ids)
    with pytest.raises(ValueError, match="give PromptRenderer the checkpoint's processor"):
        PromptRenderer(proc.tokenizer).render([Message("user", "x", images=(b"png",))])
    # a rebuild with another processor (other pixel budget) is refused, not silently different
    from jaxwebrl.models.processor import tiny_processor

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (200, 300, 3), dtype=np.uint8)).save(buf, format="PNG")
    (image,) = renderer.render([Message("user", "x", images=(buf.getvalue(),))]).images
    from jaxwebrl.data.records import TurnImage

    record = TurnImage.of(image.data, image.grid_thw, image.pixel_values)
    np.testing.assert_array_equal(record.pixel_values(proc), image.pixel_values)
    other = tiny_processor("qwen3_vl", proc.tokenizer, patch_size=16, max_merged_tokens=16)
    with pytest.raises(ValueError, match="train with the processor"):
        record.pixel_values(other)
