"""Published shapes of the vision-language checkpoints the paper configs name, for dry runs without them.

`config.json` of Qwen/Qwen3-VL-4B-Instruct and -8B-Instruct (the OpenWebRL and WebGym policies) and the
image settings of their `preprocessor_config.json`; a real run reads the checkpoint's own files. The dry
run needs the image processor's patch grid of a screenshot at the run's viewport, which it gets by running
transformers' own image processor with these settings on a blank image of that size (`screenshot_grid`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxwebrl.models.vl_config import VLConfig

_TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653)
_ROPE = {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"}


def _qwen3_vl(hidden: int, inter: int, tie: bool, v_depth: int, v_hidden: int, v_inter: int,
              deepstack: list[int]) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": tie,
        **_TOKENS,
        "text_config": {"head_dim": 128, "hidden_act": "silu", "hidden_size": hidden, "intermediate_size": inter,
                        "max_position_embeddings": 262144, "num_attention_heads": 32, "num_hidden_layers": 36,
                        "num_key_value_heads": 8, "rms_norm_eps": 1e-6, "rope_scaling": _ROPE, "rope_theta": 5000000,
                        "tie_word_embeddings": tie, "vocab_size": 151936, "bos_token_id": 151643,
                        "eos_token_id": 151645},
        "vision_config": {"deepstack_visual_indexes": deepstack, "depth": v_depth, "hidden_act": "gelu_pytorch_tanh",
                          "hidden_size": v_hidden, "in_channels": 3, "intermediate_size": v_inter, "num_heads": 16,
                          "num_position_embeddings": 2304, "out_hidden_size": hidden, "patch_size": 16,
                          "spatial_merge_size": 2, "temporal_patch_size": 2},
    }


VL_KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "Qwen3-VL-4B-Instruct": _qwen3_vl(2560, 9728, True, 24, 1024, 4096, [5, 11, 17]),
    "Qwen3-VL-8B-Instruct": _qwen3_vl(4096, 12288, False, 27, 1152, 4304, [8, 16, 24]),
}
# preprocessor_config.json image settings of the Qwen3-VL releases (size = pixel bounds of the resized image)
RELEASE_IMAGE_PROCESSOR = {"qwen3_vl": dict(patch_size=16, merge_size=2, temporal_patch_size=2,
                                            min_pixels=65536, max_pixels=16777216)}


def known_vl_config(path: str, **overrides: Any) -> VLConfig | None:
    """The VLConfig of the checkpoint `path` names (its config.json when present, else the published shape
    of its basename), or None when it is neither."""
    cfg_file = Path(path) / "config.json"
    if cfg_file.is_file():
        hf = json.loads(cfg_file.read_text())
        return VLConfig.from_hf(hf, **overrides) if "vision_config" in hf else None
    name = os.path.basename(os.path.normpath(path))
    return VLConfig.from_hf(VL_KNOWN_SHAPES[name], **overrides) if name in VL_KNOWN_SHAPES else None


def screenshot_grid(cfg: VLConfig, path: str, height: int, width: int) -> list[int]:
    """[t, h, w] patch grid the checkpoint's image processor (its own preprocessor_config.json when
    present, else the release settings) makes of a height x width screenshot."""
    from PIL import Image
    from transformers import Qwen2VLImageProcessorPil

    pre = Path(path) / "preprocessor_config.json"
    if pre.is_file():
        processor = Qwen2VLImageProcessorPil.from_pretrained(str(path))
    else:
        processor = Qwen2VLImageProcessorPil(**RELEASE_IMAGE_PROCESSOR[cfg.architecture])
    out = processor(images=[Image.fromarray(np.zeros((height, width, 3), np.uint8))], return_tensors="np")
    return [int(v) for v in np.asarray(out["image_grid_thw"]).reshape(-1)]
