"""Where a judge's model runs, and the one place its calls get a timeout, retries and a concurrency limit.

- `EngineBackend(engine, tokenizer)`: any `Engine` (a `JaxEngine` with the judge's own Flax params, an
  `SGLangEngine`, a `Router`). The prompt is rendered with the judge tokenizer's chat template by the same
  `PromptRenderer` the agent uses, so the ids are exactly `apply_chat_template(..., tokenize=True)`; the
  answer's token ids are the engine's (a judge trained here can be trained on them).
- `ChatBackend(client)`: an `OpenAIChatEngine` on any OpenAI-compatible `/v1/chat/completions` URL. The
  server renders the template; token ids are not returned by that API (`Completion.token_ids` is empty).
  Given the judge's tokenizer it also renders the prompt locally, so records carry the prompt ids and the
  server's `usage.prompt_tokens` can be checked against them.

`CallRunner.call` never raises: failures come back as a `JudgeCall` with an `error_kind`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from typing import Any, Protocol, Sequence, runtime_checkable

import httpx

from jaxwebrl.engines.base import Engine, EngineError, EngineUnavailableError, SamplingParams
from jaxwebrl.engines.openai_engine import OpenAIChatEngine
from jaxwebrl.judges.base import ErrorKind, JudgeCall
from jaxwebrl.judges.parsing import safe_decode


@dataclasses.dataclass(frozen=True)
class ChatMessage:
    """One judge prompt message; `images` (PNG bytes) is the seam for screenshot observations."""

    role: str
    content: str
    images: tuple[bytes, ...] = ()


@dataclasses.dataclass(frozen=True)
class Completion:
    text: str
    token_ids: tuple[int, ...] = ()
    prompt_ids: tuple[int, ...] = ()
    finish_reason: str = ""
    server_prompt_tokens: int | None = None
    dropped_ids: int = 0  # sampled ids outside the tokenizer (a model's padded vocabulary): not in `text`


class BackendError(Exception):
    """A failed call, with the `ErrorKind` the Verdict reports."""

    def __init__(self, kind: ErrorKind, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


@runtime_checkable
class JudgeBackend(Protocol):
    name: str

    async def complete(self, messages: Sequence[ChatMessage], params: SamplingParams) -> Completion:
        ...

    async def close(self) -> None:
        ...


def render_prompt_ids(tokenizer: Any, messages: Sequence[ChatMessage]) -> list[int]:
    """Prompt ids from the tokenizer's chat template (generation prompt opened), token-exact."""
    from jaxwebrl.agent.render import Message, PromptRenderer

    return PromptRenderer(tokenizer).render([Message(m.role, m.content) for m in messages]).ids


class EngineBackend:
    """A judge on an `Engine` (in-process JaxEngine, SGLang server, router); see the module doc."""

    def __init__(self, engine: Engine, tokenizer: Any, *, name: str | None = None, owns_engine: bool = True) -> None:
        from jaxwebrl.agent.render import PromptRenderer

        self.engine = engine
        self.tokenizer = tokenizer
        self.renderer = PromptRenderer(tokenizer)
        self.name = name or f"engine:{getattr(engine, 'name', type(engine).__name__)}"
        self.owns_engine = owns_engine

    def prompt_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        from jaxwebrl.agent.render import Message

        if any(m.images for m in messages):
            raise BackendError("bad_input", "this judge got screenshots but runs on a text-only tokenizer; give it "
                                            "a vision checkpoint with its processor, or use a chat backend")
        return self.renderer.render([Message(m.role, m.content) for m in messages]).ids

    async def complete(self, messages: Sequence[ChatMessage], params: SamplingParams) -> Completion:
        ids = self.prompt_ids(messages)
        gen = await self.engine.generate(ids, params)
        if gen.finish_reason == "context_length":
            raise BackendError("bad_input", f"judge prompt of {len(ids)} tokens does not fit the judge's context")
        if gen.finish_reason == "abort":
            raise BackendError("unavailable", "the judge engine was closed while the request ran")
        # Ids past the tokenizer (a padded model vocabulary) have no text; they are dropped from `text` as a
        # server's detokenizer drops them, kept in `token_ids`, and counted.
        text, dropped = safe_decode(self.tokenizer, gen.token_ids)
        return Completion(text, tuple(gen.token_ids), tuple(ids), gen.finish_reason, dropped_ids=dropped)

    async def close(self) -> None:
        if self.owns_engine:
            await self.engine.close()


class ChatBackend:
    """A judge behind an OpenAI-compatible chat endpoint; see the module doc."""

    def __init__(self, client: OpenAIChatEngine, *, tokenizer: Any | None = None, name: str | None = None,
                 owns_client: bool = True) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.name = name or f"chat:{client.name}"
        self.owns_client = owns_client

    @staticmethod
    def message_dict(m: ChatMessage) -> dict[str, Any]:
        if not m.images:
            return {"role": m.role, "content": m.content}
        parts: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
        for png in m.images:
            url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": m.role, "content": parts}

    async def complete(self, messages: Sequence[ChatMessage], params: SamplingParams) -> Completion:
        ids: tuple[int, ...] = ()
        if self.tokenizer is not None and not any(m.images for m in messages):
            ids = tuple(render_prompt_ids(self.tokenizer, messages))
        out = await self.client.chat([self.message_dict(m) for m in messages], params)
        return Completion(out.text, (), ids, out.finish_reason, out.prompt_tokens)

    async def close(self) -> None:
        if self.owns_client:
            await self.client.close()


@dataclasses.dataclass(frozen=True)
class JudgeOptions:
    """Per-judge call policy. Defaults: OpenWebRL's judge timeout (Table 7, 120 s), greedy decoding."""

    timeout_s: float = 120.0
    retries: int = 1  # extra attempts after a timeout / unreachable server / engine error (not for bad input)
    backoff_s: float = 0.5
    concurrency: int = 8  # model calls in flight at once, across every episode this judge scores
    max_new_tokens: int = 512
    temperature: float = 0.0
    seed: int | None = 0

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"JudgeOptions.timeout_s={self.timeout_s}: must be > 0 seconds")
        if self.retries < 0:
            raise ValueError(f"JudgeOptions.retries={self.retries}: must be >= 0")
        if self.concurrency < 1:
            raise ValueError(f"JudgeOptions.concurrency={self.concurrency}: must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError(f"JudgeOptions.max_new_tokens={self.max_new_tokens}: must be >= 1")

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, max_new_tokens=self.max_new_tokens, seed=self.seed,
                              greedy=self.temperature <= 0)


_RETRYABLE: set[str] = {"timeout", "unavailable", "engine_error"}


class CallRunner:
    """Runs a backend's calls under the options' semaphore, timeout and retries; counts what is in flight."""

    def __init__(self, backend: JudgeBackend, options: JudgeOptions) -> None:
        self.backend = backend
        self.options = options
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0

    def _semaphore(self) -> asyncio.Semaphore:
        # One semaphore per event loop: a judge reused across asyncio.run() calls gets a fresh one.
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.options.concurrency), loop
        return self._sem

    async def call(self, purpose: str, messages: Sequence[ChatMessage], params: SamplingParams | None = None) -> JudgeCall:
        params = params or self.options.sampling()
        start = time.perf_counter()
        kind: ErrorKind | None = None
        detail = ""
        attempts = timeouts = 0
        for attempt in range(self.options.retries + 1):
            if attempt:
                await asyncio.sleep(self.options.backoff_s * 2 ** (attempt - 1))
            attempts += 1
            async with self._semaphore():
                self.in_flight += 1
                self.calls += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    out = await asyncio.wait_for(self.backend.complete(messages, params), self.options.timeout_s)
                    return JudgeCall(purpose, out.text, out.token_ids, out.prompt_ids,
                                     time.perf_counter() - start, attempts, dropped_ids=out.dropped_ids,
                                     timeouts=timeouts)
                except asyncio.TimeoutError:
                    timeouts += 1
                    kind, detail = "timeout", f"no answer within {self.options.timeout_s:g} s"
                except BackendError as exc:
                    kind, detail = exc.kind, str(exc)
                except (EngineUnavailableError, httpx.TransportError, ConnectionError) as exc:
                    kind, detail = "unavailable", f"{type(exc).__name__}: {exc}"
                except ValueError as exc:
                    kind, detail = "bad_input", f"{type(exc).__name__}: {exc}"
                except (EngineError, Exception) as exc:  # noqa: BLE001 - a judge call must never take the run down
                    kind, detail = "engine_error", f"{type(exc).__name__}: {exc}"
                finally:
                    self.in_flight -= 1
            if kind not in _RETRYABLE:
                break
        return JudgeCall(purpose, latency_s=time.perf_counter() - start, attempts=attempts, error_kind=kind,
                         error_detail=f"{self.backend.name}: {detail}"[:2000], timeouts=timeouts)
