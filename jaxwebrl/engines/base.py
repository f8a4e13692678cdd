"""The Engine protocol and the records that cross it: what the agent loop sends and gets back.

Token in, token out (DESIGN.md principle 1): a request is prompt token ids, a result is the sampled token
ids with their logprobs, so the trainer stores exactly what was sampled and never re-tokenizes output.

Logprob convention (both engines): the logprob of each sampled token is log softmax(logits / T) at that
token, where T is the request's temperature (T = 1 for greedy), taken before top-k / top-p filtering.
That is what SGLang returns in `meta_info.output_token_logprobs` (its sampler takes log of the
temperature-scaled softmax; greedy uses the raw softmax), and what `jaxwebrl.models.token_logprobs`
computes in the trainer with the same temperature.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

# "stop": EOS, a stop token or a stop string; "length": max_new_tokens or the context filled up;
# "context_length": the prompt alone does not fit the context, nothing was generated;
# "abort": the engine was closed while the request ran.
FinishReason = Literal["stop", "length", "context_length", "abort"]


class EngineError(RuntimeError):
    """Base of the errors an engine raises (bad input is a ValueError instead)."""


class EngineUnavailableError(EngineError):
    """The engine (server) cannot be reached, after retries; the message says where and what to do."""


class EngineClosedError(EngineUnavailableError):
    """`generate` on an engine that has been closed (a router treats it like an unreachable one)."""


class WeightSyncError(EngineError):
    """Weights could not be moved into the engine; the message names the alternatives."""


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings; every engine honours all of them.

    temperature 0 or `greedy=True` means argmax. top_k <= 0 and top_p >= 1 disable those filters.
    Generation stops at the model's EOS ids and at `stop_token_ids`; `ignore_eos` turns off every token stop
    (EOS and stop_token_ids alike, as SGLang does). `stop` strings still apply and need the engine to have
    a tokenizer. A finishing stop token is included in `token_ids` (the model must learn to emit it);
    generation stops after the token that completes a stop string (tokens are never cut).
    `seed` makes sampling reproducible per request, independent of what else runs in the batch.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    seed: int | None = None
    greedy: bool = False
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature}: must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p}: must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: must be >= 1")
        # Accept lists from configs and callers; store tuples so the params stay hashable.
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", stop)

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature < 1e-6


@dataclasses.dataclass(frozen=True)
class Generation:
    """One finished request: the sampled ids, their logprobs and how/with which weights it ended.

    `policy_version` is the weights version that produced the first token; `final_policy_version` the one
    that produced the last. They differ only when `update_weights` landed while the request was running
    (in-flight update: earlier tokens keep their old-policy logprobs, which is what importance ratios need).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    prompt_len: int
    policy_version: int
    final_policy_version: int
    request_id: str = ""
    engine: str = ""


WeightsSource = Any | str | os.PathLike[str]  # a params tree, or a HF checkpoint directory


@dataclasses.dataclass(frozen=True, eq=False)
class ImageInput:
    """One image of a request, in prompt order. The prompt ids already hold its placeholders, expanded by
    the checkpoint's own processor (one `<|image_pad|>` per merged patch), so token in, token out holds for
    images too. `data` is the image as taken (PNG bytes: what an HTTP server is sent, and what the training
    record keeps); `grid_thw` and `pixel_values` [t*h*w, patch_dim] are the processor's output for it (what
    an in-process engine runs the vision encoder on)."""

    data: bytes
    grid_thw: tuple[int, int, int]
    pixel_values: Any = None

    @property
    def num_patches(self) -> int:
        t, h, w = self.grid_thw
        return int(t * h * w)


@runtime_checkable
class Engine(Protocol):
    """What the agent loop and the trainer call. All methods are coroutines on the caller's event loop."""

    name: str

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> Generation:
        """Sample a continuation of `prompt_ids`. `session_id` (an episode id) lets a router keep one
        episode's turns on one server, so its prefix cache is reused; single engines ignore it. `images`
        (vision-language models only) are the prompt's images in order; text engines refuse them with a
        ValueError. Callers pass `images` only when there are some, so text-only engines need not know it."""
        ...

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Make later tokens come from `weights`, stamped `version`; running requests are not dropped."""
        ...

    async def health(self) -> dict[str, Any]:
        """A small status dict; raises EngineUnavailableError when the engine cannot serve."""
        ...

    async def close(self) -> None:
        """Stop serving; pending requests end with finish_reason 'abort' or EngineClosedError."""
        ...
