"""OpenAIChatEngine: an async client for any OpenAI-compatible `/v1/chat/completions` endpoint.

Why a second kind of client: large judges are usually served behind the OpenAI chat API (vLLM, SGLang,
sglang-jax, hosted APIs), which takes chat *messages* and renders them with the server's own chat template;
it does not take prompt token ids. So this client is not an `Engine` (token in, token out): it is
text in, text out, and the judges (`jaxwebrl.judges.backends.ChatBackend`) use it where the judge's tokens
are not ours to train on. sglang-jax 0.1.0rc0 serves this route (and `/v1/models`).

What crosses: `messages` are OpenAI message dicts (`content` a string, or a list of parts with
`{"type": "image_url", ...}` for screenshots); `SamplingParams` maps onto temperature / top_p / max_tokens /
stop / seed (top_k and stop_token_ids are sent as the SGLang extensions and ignored by other servers).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import httpx

from jaxwebrl.engines.http_retry import request_with_retries
from jaxwebrl.engines.base import EngineClosedError, EngineError, EngineUnavailableError, SamplingParams

_RETRY_STATUS = {429, 502, 503, 504}


@dataclasses.dataclass(frozen=True)
class ChatCompletion:
    """One chat answer: its text, why it ended, and the server's token counts (`usage`)."""

    text: str
    finish_reason: str
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str = ""


class OpenAIChatEngine:
    """Client of one OpenAI-compatible server at `url` (with or without the trailing `/v1`)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        request_timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        name: str | None = None,
    ) -> None:
        base = url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.name = name or self.base_url
        self.model = model
        # The key is read from the environment by name (never from a config file); local servers need none.
        self._api_key = api_key if api_key is not None else (os.environ.get(api_key_env) if api_key_env else None)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self._timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise EngineClosedError(f"chat engine {self.name!r} is closed")
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=self._timeout, headers=headers,
                                             limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        return self._client

    async def _request(self, method: str, path: str, json: Any | None = None) -> httpx.Response:
        """One call, retried with exponential backoff on connection errors, timeouts, 429 and 502-504."""
        resp, last = await request_with_retries(lambda: self._http().request(method, path, json=json), self.retries,
                                                self.backoff, _RETRY_STATUS)
        if resp is not None:
            return resp
        raise EngineUnavailableError(
            f"OpenAI-compatible server {self.base_url} did not answer {method} {path} after {self.retries + 1} "
            f"attempts ({last}). Is it running, and is the url right (e.g. http://host:port/v1)?"
        )

    async def models(self) -> list[str]:
        resp = await self._request("GET", "/v1/models")
        if resp.status_code != 200:
            raise EngineError(f"{self.base_url}/v1/models returned HTTP {resp.status_code}: {resp.text[:300]}")
        return [str(m.get("id")) for m in resp.json().get("data", [])]

    async def model_name(self) -> str:
        """The configured model, else the server's first listed model (single-model servers)."""
        if self.model is None:
            names = await self.models()
            if not names:
                raise EngineError(f"{self.base_url}/v1/models lists no model; pass model= explicitly")
            self.model = names[0]
        return self.model

    @staticmethod
    def payload(model: str, messages: Sequence[dict[str, Any]], params: SamplingParams) -> dict[str, Any]:
        """SamplingParams -> the chat request body."""
        body: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "temperature": 0.0 if params.is_greedy else params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "stream": False,
        }
        if params.top_k > 0:
            body["top_k"] = params.top_k
        if params.stop:
            body["stop"] = list(params.stop)
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        if params.seed is not None:
            body["seed"] = int(params.seed)
        if params.ignore_eos:
            body["ignore_eos"] = True
        return body

    async def chat(self, messages: Sequence[dict[str, Any]], params: SamplingParams) -> ChatCompletion:
        """POST /v1/chat/completions; raises EngineUnavailableError (unreachable) or EngineError (bad reply)."""
        if not messages:
            raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
        model = await self.model_name()
        resp = await self._request("POST", "/v1/chat/completions", self.payload(model, messages, params))
        if resp.status_code != 200:
            raise EngineError(f"{self.base_url}/v1/chat/completions returned HTTP {resp.status_code}: "
                              f"{resp.text[:500]}")
        try:
            out = resp.json()
            choice = out["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise EngineError(f"{self.base_url}/v1/chat/completions: unexpected reply ({exc}): "
                              f"{resp.text[:300]}") from None
        usage = out.get("usage") or {}
        return ChatCompletion(text=str(text), finish_reason=str(choice.get("finish_reason") or ""),
                              prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                              model=str(out.get("model") or model))

    async def health(self) -> dict[str, Any]:
        return {"ok": True, "url": self.base_url, "models": await self.models()}

    async def close(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
            self._client = None
