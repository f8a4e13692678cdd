"""The Trainer and the online loop train vision-language samples end to end (tiny random Qwen3-VL, its own
processor, single CPU device).

- The Trainer's round batches are the ones `data.vl_batch` builds by hand (the layout whose step loss
  tests/test_train_vl.py checks against a sample-by-sample forward and on 8 devices), row for row.
- Patch and length buckets compile once each: rounds that go back to a bucket seen before compile nothing
  (counted with JAX's compile events).
- One online iteration of the OpenWebRL recipe on MiniWoB++ screenshots in real Chromium trains: the
  rollouts' samples carry images, their pixels are rebuilt from the recorded PNGs, old logprobs are
  recomputed by the VL step, and the params move. The policy is scripted through the Engine protocol (an
  episode scrolls until the horizon, reward 0, or writes no action until the format-error limit, reward -1)
  so every group has reward variance: a random tiny model's groups are all alike and would train nothing.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np
import pytest
from PIL import Image

from jaxwebrl.agent.render import Message, PromptRenderer
from jaxwebrl.config import default_config, parse_config
from jaxwebrl.data.records import Trajectory, Turn, TurnImage
from jaxwebrl.data.samples import build_samples
from jaxwebrl.data.vl_batch import vl_batch
from jaxwebrl.fields import with_changes
from jaxwebrl.models.processor import load_processor
from jaxwebrl.models.vl_tiny import make_tiny_vl_checkpoint
from jaxwebrl.train.trainer import Trainer
from recipe_fixtures import ScriptedPolicy

pytestmark = pytest.mark.timeout(5400)  # minutes on a loaded 2-core machine (compiles); see the report


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("qwen3_vl")
    cfg, params, _ = make_tiny_vl_checkpoint(path, "qwen3_vl", seed=0, std=0.1)
    return {"path": str(path), "cfg": cfg, "params": params, "proc": load_processor(path)}


def _run_config(workdir: Path, **changes: Any) -> Any:
    c = default_config()
    c.mesh = {"data": 1, "fsdp": 1, "tensor": 1}
    c.workdir = str(workdir)
    c.log.tensorboard = False
    c.log.progress = False
    c.train.micro_batch = 2
    c.train.accum_steps = 1
    c.train.seq_len = 256
    c.train.epochs = 1
    c.loss.kind = "grpo"
    c.optim.lr = 1e-3
    return with_changes(parse_config(c), **changes)


def _samples(policy: dict[str, Any], sizes: Sequence[Sequence[tuple[int, int]]], seed: int) -> list[Any]:
    """One per-turn sample per entry of `sizes` (the image sizes of its prompt), rendered by the processor."""
    renderer, rng = PromptRenderer(policy["proc"]), np.random.default_rng(seed)
    trajs = []
    for i, shots in enumerate(sizes):
        pngs = []
        for h, w in shots:
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format="PNG")
            pngs.append(buf.getvalue())
        r = renderer.render([Message("system", "act"), Message("user", f"task {i}: click", images=tuple(pngs))])
        resp = [int(t) for t in rng.integers(10, policy["cfg"].text.vocab_size, 4)]
        turn = Turn(prompt_ids=r.ids, response_ids=resp, response_logprobs=[-1.0] * 4,
                    images=[TurnImage.of(im.data, im.grid_thw, im.pixel_values) for im in r.images] or None)
        trajs.append(Trajectory(task_id=f"t{i}", turns=[turn], advantage=1.0 if i % 2 else -0.5, group_id=f"g{i}"))
    return build_samples(trajs, per="turn", norm="per_turn")


def _compiles() -> tuple[list[int], Any]:
    count = [0]

    def listen(name: str, duration: float, **kwargs: Any) -> None:
        if name == "/jax/core/compile/backend_compile_duration":
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    return count, listen


def test_trainer_vl_batches_equal_hand_built_and_buckets_compile_once(policy: dict[str, Any], tmp_path: Path,
                                                                     without_compilation_cache: None) -> None:
    cfg, proc = policy["cfg"], policy["proc"]
    trainer = Trainer(_run_config(tmp_path), params=policy["params"], model_cfg=cfg, tokenizer_dir=policy["path"],
                      total_steps=10, checkpointing=False)
    small = _samples(policy, [[(64, 64)], [], [(96, 64)]], seed=0)  # <= 24 patches a row: bucket 64
    big = _samples(policy, [[(64, 64), (128, 96), (96, 128)], [(96, 128)]], seed=1)  # 16 + 48 + 48 in a row: bucket 128

    # the Trainer's batches are data.vl_batch's, row for row, in the Trainer's (seeded) order
    host, seq_len, has_old = trainer.round_batches(small, seed=7)
    assert (len(host), seq_len, has_old) == (2, 128, True)
    order = np.random.default_rng(7).permutation(len(small))
    by_hand = vl_batch(cfg, [small[i] for i in order], proc, accum=2, micro_batch=2, seq_len=128)
    flat = jax.tree.map(lambda a: a.reshape(4, *a.shape[2:]), by_hand)
    assert host[0]["vision"]["pixel_values"].shape == (2, 64, cfg.vision.patch_dim)
    for b, batch in enumerate(host):
        jax.tree.map(lambda ours, hand: np.testing.assert_array_equal(ours, hand[2 * b:2 * b + 2]), batch, flat)
    assert sum(int((np.asarray(b["vision"]["segment"]) > 0).sum()) for b in host) == sum(
        int(np.prod(im.grid_thw)) for s in small for im in (s.images or []))

    # buckets: each (length, patches) pair compiles once; coming back to one compiles nothing
    count, listen = _compiles()
    try:
        before = jax.tree.map(np.asarray, trainer.params)
        m_small = trainer.train_on_samples(small)
        first = count[0]
        m_big = trainer.train_on_samples(big)
        second = count[0] - first
        trainer.train_on_samples(_samples(policy, [[(80, 64)], [(64, 96)]], seed=2))  # other images, bucket 64
        trainer.train_on_samples(_samples(policy, [[(128, 128), (64, 96)], [(96, 96)]], seed=3))  # 64 + 24: bucket 128
        again = count[0] - first - second
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert (m_small["patches"], m_big["patches"]) == (64, 128) and m_small["samples"] == 3
    assert first > 0 and second > 0 and again == 0, (first, second, again)
    assert np.isfinite(m_small["loss"]) and np.isfinite(m_big["loss"]) and m_small["optimizer_steps"] == 2
    moved = max(float(np.abs(a - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(before["vision"]), jax.tree.leaves(trainer.params["vision"])))
    assert moved > 1e-4  # the images reach the vision encoder's update


class ScriptedVLPolicy(ScriptedPolicy):
    """The recipe tests' scripted policy, taking the screenshots a VL engine gets (and counting them)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.images_seen = 0

    async def generate(self, prompt_ids: Sequence[int], params: Any, *, session_id: str | None = None,
                       images: Sequence[Any] = ()) -> Any:
        self.images_seen += len(images)
        return await super().generate(prompt_ids, params, session_id=session_id)


def test_vl_online_iteration_trains_on_screenshots(policy: dict[str, Any], tmp_path: Path) -> None:
    from jaxwebrl.main_job.online import OnlineRL
    from jaxwebrl.train.loop import fit

    run = _run_config(tmp_path, **{
        "recipe": "openwebrl", "data.kind": "online", "data.synthetic": False, "data.per": "turn",
        "data.norm": "per_turn", "train.seq_len": 1024, "train.old_logprobs": "recompute", "train.dynamic_sampling": True,
        "model.source": "hf", "model.path": policy["path"], "tasks.suite": "miniwob", "tasks.train": "click-test",
        "env.action_space": "openwebrl", "env.text_mode": "none", "env.screenshot": True, "env.viewport_width": 160, "env.viewport_height": 210,
        "env.num_browsers": 1, "env.contexts_per_browser": 2, "agent.strategy": "last_k_screenshots",
        "agent.prompt_format": "openwebrl", "agent.last_k": 1, "agent.max_steps": 2, "agent.max_format_errors": 1,
        "agent.max_context_tokens": 1024, "agent.system_prompt": "Act.", "rollout.group_size": 2,
        "rollout.groups_per_iteration": 1, "rollout.max_concurrent_groups": 1, "rollout.max_groups_per_iteration": 2,
        "rl.iterations": 1, "report.enabled": False, "bc.enabled": False})
    trainer = Trainer(run, total_steps=10, checkpointing=False)
    assert trainer.processor is not None
    before = jax.tree.map(np.asarray, trainer.params)
    made: list[ScriptedVLPolicy] = []

    def engine_factory(cfg: Any, *, tokenizer: Any, **_: Any) -> ScriptedVLPolicy:
        made.append(ScriptedVLPolicy(tokenizer.tokenizer, "openwebrl", "openwebrl", ("idle", "garbage")))
        return made[0]

    async def go() -> list[dict]:
        async with OnlineRL(run, trainer, tmp_path / "history.jsonl", engine_factory=engine_factory) as rl:
            await fit(trainer, rl, 1, progress=False)
            return rl.history

    (record,) = asyncio.run(go())
    m = record["metrics"]
    assert made[0].images_seen > 0  # the engine was sent the screenshots
    assert m["train/samples_used"] > 0 and m["train/samples"] == m["train/samples_used"]
    assert np.isfinite(m["train/loss"]) and m["train/patches"] >= 64 and m["train/optimizer_steps"] >= 1
    moved = max(float(np.abs(a - np.asarray(b)).max())
                for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(trainer.params)))
    assert moved > 1e-5
