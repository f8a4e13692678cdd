"""Chat messages -> prompt token ids, with earlier responses spliced in as the exact sampled ids.

DESIGN.md principle 1: model output is never decoded and re-encoded. The model's own chat template renders
the conversation with a unique marker in place of each assistant message; the text between markers is
tokenized (once per distinct piece, cached), and each assistant's sampled ids go in verbatim. A response
that already ends with an end-of-turn token (e.g. `<|im_end|>`) is not closed a second time by the template.

`render` also returns the pieces, so a trajectory-level sample can be rebuilt from the per-turn "history"
segments (`Turn.history_ids`): prompt_t = piece_0 + resp_1 + piece_1 + ... + piece_{t-1}.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

from transformers import PreTrainedTokenizerBase

_MARK = "\u2063ASSISTANT_{}\u2063"  # invisible separator: never produced by the templates we render


@dataclasses.dataclass(frozen=True)
class Message:
    """One chat message. Assistant messages carry the sampled `ids`; `content` is their text for logs."""

    role: str
    content: str
    ids: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Rendered:
    ids: list[int]
    pieces: list[list[int]]  # template text around the assistant messages: len = assistants + 1


class PromptRenderer:
    """Renders conversations with a tokenizer's chat template, token-in/token-out safe."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, template_kwargs: dict[str, Any] | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template; export it with the checkpoint (tokenizer_config.json)")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.end_ids = {i for i in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")) if i is not None and i >= 0}

    @functools.lru_cache(maxsize=4096)
    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> Rendered:
        chat, responses = [], []
        for m in messages:
            if m.role == "assistant" and m.ids is not None:
                chat.append({"role": "assistant", "content": _MARK.format(len(responses))})
                responses.append(list(m.ids))
            else:
                chat.append({"role": m.role, "content": m.content})
        text = self.tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=add_generation_prompt, **self.template_kwargs
        )
        pieces_text = []
        for k in range(len(responses)):
            before, _, text = text.partition(_MARK.format(k))
            pieces_text.append(before)
        pieces_text.append(text)
        pieces: list[list[int]] = []
        for k, piece in enumerate(pieces_text):
            if k > 0 and responses[k - 1] and responses[k - 1][-1] in self.end_ids:
                end_text = self.tokenizer.decode([responses[k - 1][-1]])
                if piece.startswith(end_text):  # the response closed its own turn
                    piece = piece[len(end_text):]
            pieces.append(list(self._encode(piece)))
        ids: list[int] = []
        for k, piece in enumerate(pieces):
            ids += piece
            if k < len(responses):
                ids += responses[k]
        return Rendered(ids=ids, pieces=pieces)

    def __hash__(self) -> int:  # lru_cache on a method needs a hashable self
        return id(self)
