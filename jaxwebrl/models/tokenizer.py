"""Tokenizers: load the fast tokenizer (and its chat template) from a checkpoint directory, or train a
small byte-level BPE one for runs and tests that may not download anything."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

# ChatML, as the Qwen family uses; `add_generation_prompt` opens the assistant turn.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


class TokenizerError(ValueError):
    """A checkpoint directory without a usable fast tokenizer."""


def load_tokenizer(path: str | os.PathLike[str]) -> PreTrainedTokenizerBase:
    """The fast tokenizer stored beside a checkpoint, with its chat template."""
    path = Path(path)
    if not (path / "tokenizer.json").exists() and not (path / "tokenizer_config.json").exists():
        raise TokenizerError(f"{path}: no tokenizer.json / tokenizer_config.json; export the tokenizer with the model")
    tok = AutoTokenizer.from_pretrained(str(path), use_fast=True)
    if not tok.is_fast:
        raise TokenizerError(f"{path}: only a slow tokenizer is available; a fast tokenizer.json is required")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, out_dir: str | os.PathLike[str] | None = None
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with ChatML special tokens; save it when `out_dir` is given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHATML_TEMPLATE
    if out_dir is not None:
        tok.save_pretrained(str(out_dir))
    return tok
