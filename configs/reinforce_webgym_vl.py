"""WebGym filtered REINFORCE with its Qwen3-VL-8B policy on screenshots: reinforce_webgym.py's recipe (successes
only, no-op steps masked, memory prompt, replay, horizons and difficulty ratio) with WebGym's coordinate mode:
the current 1280x720 screenshot, Qwen3-VL's `computer_use` calls on 0..1000 coordinates, 32k context.

This is the paper face only (the dry run: `scripts/train.py --config configs/reinforce_webgym_vl.py
--dry_run`); the local variant of the recipe is reinforce_webgym.py's (text, element ids), because the
scripted demonstrations have no `computer_use` writer (configs/grpo_local_vl.py is the visual local run).
"""

import importlib.util
import os


def _text_config():
    spec = importlib.util.spec_from_file_location(
        "reinforce_webgym", os.path.join(os.path.dirname(__file__), "reinforce_webgym.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def get_config():
    c = _text_config()
    c.workdir = "runs/reinforce_webgym_vl"
    c.model.path = "checkpoints/Qwen3-VL-8B-Instruct"
    c.model.attention = "splash"  # the TPU flash kernel: dense attention does not fit 32k (BUILD.md)
    c.train.seq_len = 32768
    c.agent.max_context_tokens = 32768
    c.env.action_space = "webgym"
    c.agent.prompt_format = "webgym_coordinates"
    c.env.text_mode = "none"
    c.env.screenshot = True
    c.env.page_metadata = True
    c.local_overrides = {}
    c.quick_overrides = {}
    return c
