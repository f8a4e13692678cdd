"""The checkpoint's own transformers processor for Qwen3-VL / Qwen2.5-VL, usable without torchvision.

Images are resized, normalised and cut into patches by the checkpoint's transformers image processor, and
the processor expands each `<|image_pad|>` into one placeholder per merged patch; nothing here re-implements
either. The only workaround: transformers' VL processors insist on a video processor, which needs
torchvision (not installable on CPU-only machines: the PyPI wheel is a CUDA build). The subclasses below
drop the video processor, and `register_image_only_processors` makes `AutoProcessor` build them.

Also here: a small byte-level BPE tokenizer with the Qwen vision special tokens and a tiny image processor,
so tests and smoke runs can build a complete VL checkpoint without downloads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from transformers import (
    AutoProcessor,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen3VLConfig,
    Qwen3VLProcessor,
)


class ProcessorError(ValueError):
    """A checkpoint directory whose processor cannot be built as an image processor + tokenizer."""


class Qwen3VLImageOnlyProcessor(Qwen3VLProcessor):
    """Qwen3VLProcessor without the video processor (which needs torchvision)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kw: Any):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kw)


class Qwen2_5_VLImageOnlyProcessor(Qwen2_5_VLProcessor):
    """Qwen2_5_VLProcessor without the video processor (which needs torchvision)."""

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kw: Any):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kw)


PROCESSOR_CLASSES: dict[str, type] = {"qwen3_vl": Qwen3VLImageOnlyProcessor, "qwen2_5_vl": Qwen2_5_VLImageOnlyProcessor}


def register_image_only_processors() -> None:
    """Make `AutoProcessor.from_pretrained` build the image-only processors (idempotent, per process).

    Unregistered, AutoProcessor silently returns only the tokenizer for a Qwen-VL directory."""
    AutoProcessor.register(Qwen3VLConfig, Qwen3VLImageOnlyProcessor, exist_ok=True)
    AutoProcessor.register(Qwen2_5_VLConfig, Qwen2_5_VLImageOnlyProcessor, exist_ok=True)


def load_processor(path: str | os.PathLike[str]) -> Any:
    """The processor saved beside a VL checkpoint (image processor + tokenizer + chat template).

    Built with the image-only class of the checkpoint's model_type, so both our exports and release
    checkpoints (whose processor_class names the torchvision-needing class) load."""
    import json

    path = Path(path)
    if not (path / "preprocessor_config.json").exists() and not (path / "processor_config.json").exists():
        raise ProcessorError(f"{path}: no preprocessor_config.json or processor_config.json; save the processor "
                             "with the model (processor.save_pretrained(dir))")
    model_type = json.loads((path / "config.json").read_text()).get("model_type") if (path / "config.json").exists() else None
    if model_type not in PROCESSOR_CLASSES:
        raise ProcessorError(f"{path}: config.json model_type={model_type!r}; a VL processor needs one of "
                             f"{sorted(PROCESSOR_CLASSES)}")
    return PROCESSOR_CLASSES[model_type].from_pretrained(str(path))


# ---- tiny offline tokenizer and processor --------------------------------------------------------

VL_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>",
)

# ChatML with image items, as the Qwen-VL templates render them (no default system prompt).
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_vl_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer whose special tokens 0..7 are the Qwen ChatML + vision tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(VL_SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = VL_CHAT_TEMPLATE
    return tok


def vision_token_ids(tokenizer: Any) -> dict[str, int]:
    """The config.json token ids that must match the tokenizer's vision special tokens."""
    names = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
             "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
    return {key: int(tokenizer.convert_tokens_to_ids(tok)) for key, tok in names.items()}


def tiny_processor(architecture: str, tokenizer: PreTrainedTokenizerFast, patch_size: int, merge_size: int = 2,
                   temporal_patch_size: int = 2, max_merged_tokens: int = 64) -> Any:
    """An image-only processor with a small pixel budget (at most `max_merged_tokens` per image)."""
    from transformers import Qwen2VLImageProcessorPil

    unit = patch_size * merge_size
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch_size, merge_size=merge_size, temporal_patch_size=temporal_patch_size,
        min_pixels=unit * unit * 4, max_pixels=unit * unit * max_merged_tokens,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    cls = PROCESSOR_CLASSES[architecture]
    return cls(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)
