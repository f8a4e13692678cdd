"""Chat messages -> prompt token ids, with earlier responses spliced in as the exact sampled ids.

DESIGN.md principle 1: model output is never decoded and re-encoded. The model's own chat template renders
the conversation with a unique marker in place of each assistant message; the text between markers is
tokenized (once per distinct piece, cached), and each assistant's sampled ids go in verbatim. A response
that already ends with an end-of-turn token (e.g. `<|im_end|>`) is not closed a second time by the template.

`render` also returns the pieces, so a trajectory-level sample can be rebuilt from the per-turn "history"
segments (`Turn.history_ids`): prompt_t = piece_0 + resp_1 + piece_1 + ... + piece_{t-1}.

Images (vision-language checkpoints): give the renderer the checkpoint's processor instead of its tokenizer.
A message's `images` (encoded PNG bytes) become image items of its content, the chat template writes one
`<|vision_start|><|image_pad|><|vision_end|>` each, and every piece that holds images is tokenized by the
processor itself, which resizes and patches the images and expands each placeholder to one `<|image_pad|>`
per merged patch. `Rendered.images` are the engine's `ImageInput`s in prompt order (PNG bytes, grid and
pixel_values), so the engine sees exactly these ids and pixels. An image that does not decode becomes a
text note in the prompt instead (`BAD_IMAGE`): the episode goes on.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import io
from typing import Any, Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from jaxwebrl.engines.base import ImageInput

_MARK = "\u2063ASSISTANT_{}\u2063"  # invisible separator: never produced by the templates we render
_IMAGE = "<|image_pad|>"  # the placeholder the Qwen-VL templates write per image (inside vision_start/end)
_PLACEHOLDERS = (_IMAGE, "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
BAD_IMAGE = "[the screenshot could not be decoded ({}); it is left out]"
MAX_ASPECT = 200  # the Qwen-VL image processors' limit (smart_resize)
_IMAGE_CACHE = 64  # processed pieces with images kept (a last-K context re-renders its recent screenshots)


class ImageDecodeError(ValueError):
    """An image message item whose bytes are not a readable image."""


@dataclasses.dataclass(frozen=True)
class Message:
    """One chat message. Assistant messages carry the sampled `ids`; `content` is their text for logs."""

    role: str
    content: str
    ids: tuple[int, ...] | None = None
    images: tuple[bytes, ...] = ()  # encoded images (PNG) shown after the text; needs a processor


@dataclasses.dataclass(frozen=True)
class Rendered:
    ids: list[int]
    pieces: list[list[int]]  # template text around the assistant messages: len = assistants + 1
    images: list[ImageInput] = dataclasses.field(default_factory=list)  # in prompt order (VL prompts)


def decode_image(data: bytes) -> Any:
    """PNG (or any PIL-readable) bytes -> an RGB PIL image; ImageDecodeError names what failed."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
    except Exception as exc:  # PIL raises several types for truncated or foreign data
        raise ImageDecodeError(type(exc).__name__) from exc  # no message: it can hold addresses (not reproducible)
    if max(rgb.size) > MAX_ASPECT * min(rgb.size):  # the Qwen-VL processors refuse these
        raise ImageDecodeError(f"aspect ratio over {MAX_ASPECT}")
    return rgb



class PromptRenderer:
    """Renders conversations with a tokenizer's chat template, token-in/token-out safe. Given a
    vision-language processor (it has an `image_processor`) instead of a tokenizer, it renders images too."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase | Any, template_kwargs: dict[str, Any] | None = None):
        self.processor = tokenizer if hasattr(tokenizer, "image_processor") else None
        if self.processor is not None:
            tokenizer = self.processor.tokenizer
            if getattr(self.processor, "chat_template", None) and not getattr(tokenizer, "chat_template", None):
                tokenizer.chat_template = self.processor.chat_template
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template; export it with the checkpoint (tokenizer_config.json)")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self._image_pieces: collections.OrderedDict[tuple[str, tuple[str, ...]], tuple[list[int], list[ImageInput]]] = (
            collections.OrderedDict())
        self.end_ids = {i for i in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")) if i is not None and i >= 0}

    @functools.lru_cache(maxsize=4096)
    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def _content(self, m: Message, images: list[Any]) -> Any:
        """Chat content of a message: its text, or (with images) text then one image item per decodable
        image; an undecodable image becomes a `BAD_IMAGE` note."""
        if not m.images:
            return m.content
        if self.processor is None:
            raise ValueError("a message has images but the renderer has a text tokenizer; give PromptRenderer "
                             "the checkpoint's processor (jaxwebrl.models.processor.load_processor)")
        text = m.content
        for token in _PLACEHOLDERS:  # page text cannot pose as an image: each literal placeholder is defused
            text = text.replace(token, token.replace("|", "\u2502"))
        items: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for data in m.images:
            try:
                images.append((data, decode_image(data)))
                items.append({"type": "image"})
            except ImageDecodeError as exc:
                items.append({"type": "text", "text": ("\n" if items else "") + BAD_IMAGE.format(exc)})
        return items

    def _encode_with_images(self, piece: str, images: list[tuple[bytes, Any]]) -> tuple[list[int], list[ImageInput]]:
        """The processor tokenizes `piece` and expands its placeholders for `images` (cached per text+images)."""
        key = (piece, tuple(hashlib.sha256(d).hexdigest() for d, _ in images))
        hit = self._image_pieces.get(key)
        if hit is not None:
            self._image_pieces.move_to_end(key)
            return hit
        out = self.processor(text=[piece], images=[im for _, im in images], return_tensors="np",
                             add_special_tokens=False)
        grids = [tuple(int(v) for v in g) for g in np.asarray(out["image_grid_thw"]).reshape(-1, 3)]
        splits = np.cumsum([int(np.prod(g)) for g in grids])[:-1]
        pixels = np.split(np.asarray(out["pixel_values"], np.float32), splits)
        result = ([int(t) for t in np.asarray(out["input_ids"]).reshape(-1)],
                  [ImageInput(d, g, p) for (d, _), g, p in zip(images, grids, pixels)])
        self._image_pieces[key] = result
        if len(self._image_pieces) > _IMAGE_CACHE:
            self._image_pieces.popitem(last=False)
        return result

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> Rendered:
        chat, responses, images = [], [], []
        for m in messages:
            if m.role == "assistant" and m.ids is not None:
                chat.append({"role": "assistant", "content": _MARK.format(len(responses))})
                responses.append(list(m.ids))
            else:
                chat.append({"role": m.role, "content": self._content(m, images)})
        text = self.tokenizer.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=add_generation_prompt, **self.template_kwargs
        )
        pieces_text = []
        for k in range(len(responses)):
            before, _, text = text.partition(_MARK.format(k))
            pieces_text.append(before)
        pieces_text.append(text)
        pieces: list[list[int]] = []
        inputs: list[ImageInput] = []
        for k, piece in enumerate(pieces_text):
            if k > 0 and responses[k - 1] and responses[k - 1][-1] in self.end_ids:
                end_text = self.tokenizer.decode([responses[k - 1][-1]])
                if piece.startswith(end_text):  # the response closed its own turn
                    piece = piece[len(end_text):]
            n = piece.count(_IMAGE)
            if n:
                mine, images = images[:n], images[n:]
                if len(mine) != n:
                    raise ValueError(f"the chat template wrote {piece.count(_IMAGE)} image placeholders in a piece "
                                     f"but only {len(mine)} images remain; is it a Qwen-VL template?")
                ids_k, got = self._encode_with_images(piece, mine)
                pieces.append(ids_k)
                inputs += got
            else:
                pieces.append(list(self._encode(piece)))
        if images:
            raise ValueError(f"{len(images)} image(s) got no placeholder from the chat template; use the "
                             "checkpoint's processor chat template (it writes <|image_pad|> per image item)")
        ids: list[int] = []
        for k, piece in enumerate(pieces):
            ids += piece
            if k < len(responses):
                ids += responses[k]
        return Rendered(ids=ids, pieces=pieces, images=inputs)

    def __hash__(self) -> int:  # lru_cache on a method needs a hashable self
        return id(self)
