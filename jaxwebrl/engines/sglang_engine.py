"""SGLangEngine: an async HTTP client for one SGLang server (CUDA `sglang` or `sglang-jax`).

Token in, token out: requests send `input_ids` and read back `output_ids` with
`meta_info.output_token_logprobs` ([logprob, id, text] triples), so no text is ever re-tokenized.

Images (vision-language models): the request adds `image_data`, one `data:image/png;base64,...` string per
image in prompt order, beside the `input_ids` whose placeholders the checkpoint's processor already
expanded. CUDA SGLang's Qwen-VL processor matches expanded runs (`<|vision_start|>(<|image_pad|>)+
<|vision_end|>`) and re-expands each to the same count from the same preprocessor config, so the ids the
model sees are ours. sglang-jax 0.1.0rc0 serves Qwen2.5-VL but not Qwen3-VL, and refuses `input_ids` with
images ("Multimodal input_ids are not supported for Qwen-VL"): image requests to it fail with that error.

Weight sync strategies (`weight_sync`):
  "disk"    export the params as a HF checkpoint under `export_dir`, then POST /update_weights_from_disk
            (CUDA SGLang's documented request: model_path, load_format, weight_version, flush_cache): the
            running server loads the new weights in place and flushes its prefix cache, no restart. CUDA
            SGLang has the endpoint; for sglang-jax, `SGLangServer(weight_reload=True)` starts
            `sglang_jax_worker.py` (its server with the scheduler in-process, plus that endpoint). A stock
            sglang-jax server answers 404 and gets a WeightSyncError naming the alternatives.
  "restart" export the checkpoint, then restart the server (an `SGLangServer` this engine was given) on it.
            Slow (a model load and compile per update) but works with every server.
Either way, `generate` calls made while an update runs wait for it (they then carry the new version), and the
server finishes the requests it is running on the old weights before it swaps (SGLang's update lock; the
worker's pause), so a request's tokens all come from one version.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import shutil
from pathlib import Path
from typing import Any, Literal, Sequence

import httpx

from jaxwebrl.engines.http_retry import request_with_retries
from jaxwebrl.engines.base import (
    EngineClosedError,
    EngineError,
    EngineUnavailableError,
    Generation,
    ImageInput,
    SamplingParams,
    WeightSyncError,
    WeightsSource,
)
from jaxwebrl.engines.sglang_server import SGLangServer

_RETRY_STATUS = {502, 503, 504}
# Exports under way, by directory: the engines of a Router share `export_dir` and get the same params at once,
# so they wait for one export instead of writing the same files concurrently (one version = one set of params).
_EXPORTING: dict[Path, asyncio.Future[Any]] = {}


class SGLangEngine:
    """Client of one SGLang server at `url`; implements `Engine`."""

    def __init__(
        self,
        url: str,
        *,
        model_cfg: Any | None = None,
        tokenizer_dir: str | os.PathLike[str] | None = None,
        export_dir: str | os.PathLike[str] | None = None,
        weight_sync: Literal["disk", "restart"] = "disk",
        server: SGLangServer | None = None,
        request_timeout: float = 600.0,
        connect_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        startup_timeout: float = 600.0,
        keep_exports: int = 2,
        version: int = 0,
        name: str | None = None,
        owns_server: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self.name = name or self.url
        self.model_cfg = model_cfg
        self.tokenizer_dir = tokenizer_dir
        self.export_dir = Path(export_dir) if export_dir else None
        if weight_sync not in ("disk", "restart"):
            raise ValueError(f"weight_sync={weight_sync!r}: use 'disk' or 'restart'")
        if weight_sync == "restart" and server is None:
            raise ValueError("weight_sync='restart' needs server=SGLangServer(...) so the engine can restart it")
        self.weight_sync = weight_sync
        self.server = server
        self.retries = retries
        self.backoff = backoff
        self.startup_timeout = startup_timeout
        self.keep_exports = keep_exports
        self.version = version
        self.owns_server = owns_server  # close() stops the server too (it was launched for this engine)
        self._timeout = httpx.Timeout(request_timeout, connect=connect_timeout)
        self._client: httpx.AsyncClient | None = None
        self._context_len: int | None = None
        self._context_lookup: asyncio.Task[None] | None = None  # one lookup shared by concurrent requests
        self._ids = itertools.count()
        self._closed = False
        self._exports: list[Path] = []
        self._updating: asyncio.Future[None] | None = None  # set while update_weights runs
        self.last_sync: dict[str, Any] = {}  # the server's reply to the last reload (timings), for logs

    @classmethod
    def for_server(cls, server: SGLangServer, **kwargs: Any) -> "SGLangEngine":
        """An engine for a server this process launched (enables weight_sync='restart')."""
        return cls(server.url, server=server, **kwargs)

    # ---- HTTP plumbing ------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise EngineClosedError(f"engine {self.name!r} is closed")
        if self._client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(base_url=self.url, timeout=self._timeout, limits=limits)
        return self._client

    async def _request(self, method: str, path: str, json: Any | None = None) -> httpx.Response:
        """One call with retries and exponential backoff on connection errors, timeouts and 502-504."""
        async def wait_for_restart() -> None:  # a restart is under way: wait for it instead of failing
            if self._updating is not None and self.weight_sync == "restart":
                await asyncio.shield(self._updating)

        resp, last = await request_with_retries(lambda: self._http().request(method, path, json=json), self.retries,
                                                self.backoff, _RETRY_STATUS, before_attempt=wait_for_restart)
        if resp is not None:
            return resp
        raise EngineUnavailableError(
            f"SGLang server {self.url} did not answer {method} {path} after {self.retries + 1} attempts "
            f"({last}). Is it running? Start one with scripts/launch_sglang.py, or use engine type 'jax'."
        )

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Poll /health until the server answers 200 (a freshly launched server takes ~40 s on CPU)."""
        deadline = asyncio.get_running_loop().time() + (timeout or self.startup_timeout)
        last = ""
        while asyncio.get_running_loop().time() < deadline:
            try:
                resp = await self._http().get("/health", timeout=5.0)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(1.0)
        raise EngineUnavailableError(f"SGLang server {self.url} not healthy after {timeout or self.startup_timeout:.0f}s ({last})")

    async def context_length(self) -> int | None:
        """The server's context length (from /get_model_info or /get_server_info), cached. Requests that arrive
        together before it is known share one lookup (a burst of 16 waited on 16 lookups in turn, ~2 s each
        from a busy sglang-jax server); a lookup that failed or found nothing is tried again next time."""
        if self._context_len is None:
            loop, task = asyncio.get_running_loop(), self._context_lookup
            if task is None or task.get_loop() is not loop:
                task = self._context_lookup = loop.create_task(self._lookup_context_length())
            await asyncio.shield(task)  # shielded: one waiter's cancellation must not cancel the others' lookup
        return self._context_len

    async def _lookup_context_length(self) -> None:
        """Sets `_context_len` when the server names it; either way the next call without it looks again."""
        try:
            for path in ("/get_model_info", "/get_server_info"):
                resp = await self._request("GET", path)
                if resp.status_code == 200:
                    value = resp.json().get("context_length") or resp.json().get("context_len")
                    if value:
                        self._context_len = int(value)
                        return
        finally:
            self._context_lookup = None

    # ---- Engine API ---------------------------------------------------------------------------

    @staticmethod
    def sampling_payload(params: SamplingParams, max_new_tokens: int) -> dict[str, Any]:
        """SamplingParams -> SGLang's `sampling_params` JSON."""
        out: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "temperature": 0.0 if params.is_greedy else params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "ignore_eos": params.ignore_eos,
            "skip_special_tokens": False,
            "no_stop_trim": True,  # keep the matched stop text, as the token ids keep it
        }
        if params.stop_token_ids:
            out["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:
            out["stop"] = list(params.stop)
        if params.seed is not None:
            out["sampling_seed"] = int(params.seed)
        return out

    def request_body(self, prompt: list[int], params: SamplingParams, max_new: int,
                     images: Sequence[ImageInput] = ()) -> dict[str, Any]:
        """The /generate payload: token ids in, logprobs back; images as base64 data urls, in prompt order."""
        body: dict[str, Any] = {"input_ids": prompt, "sampling_params": self.sampling_payload(params, max_new),
                                "return_logprob": True}
        if images:
            for i, im in enumerate(images):
                if not isinstance(im.data, (bytes, bytearray)) or not im.data:
                    raise ValueError(f"image {i}: ImageInput.data must be the encoded image bytes (PNG) for an "
                                     "SGLang server")
            body["image_data"] = ["data:image/png;base64," + base64.b64encode(im.data).decode() for im in images]
        return body

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> Generation:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("prompt_ids must be a non-empty sequence of token ids")
        rid = f"{self.name}-{next(self._ids)}"
        while self._updating is not None:  # new weights are being loaded: serve this request with them
            await asyncio.shield(self._updating)
        version = self.version
        ctx = await self.context_length()
        max_new = params.max_new_tokens
        if ctx is not None:
            if len(prompt) >= ctx - 1:
                return Generation([], [], "context_length", len(prompt), version, version, rid, self.name)
            # The server rejects prompt + max_new_tokens >= context; JaxEngine stops at the cache end instead.
            max_new = min(max_new, ctx - 1 - len(prompt))
        body = self.request_body(prompt, params, max_new, images)
        resp = await self._request("POST", "/generate", body)
        if resp.status_code != 200:
            text = resp.text[:500]
            if resp.status_code == 400 and "context length" in text.lower():
                return Generation([], [], "context_length", len(prompt), version, version, rid, self.name)
            raise EngineError(f"SGLang {self.url}/generate returned HTTP {resp.status_code}: {text}")
        return self._parse(resp.json(), len(prompt), max_new, params, version, rid)

    def _parse(self, out: dict[str, Any], prompt_len: int, max_new: int, params: SamplingParams, version: int,
               rid: str) -> Generation:
        meta = out.get("meta_info", {})
        triples = meta.get("output_token_logprobs") or []
        ids = [int(t) for t in out.get("output_ids") or [t[1] for t in triples]]
        n = int(meta.get("completion_tokens", len(ids)))
        if len(ids) > n or len(triples) > n:
            # sglang-jax 0.1.0rc0 re-sends the cumulative lists every 50 tokens and concatenates the chunks
            # (120 tokens -> 50 + 100 + 120 entries); the last chunk is the whole, correct list.
            ids, triples = ids[len(ids) - n:], triples[len(triples) - n:]
        if len(triples) != len(ids) or any(int(t[1]) != i for t, i in zip(triples, ids)):
            raise EngineError(f"SGLang {self.url}: output_token_logprobs do not line up with output_ids "
                              f"({len(triples)} vs {len(ids)}); is return_logprob supported by this server?")
        logprobs = [float(t[0]) for t in triples]
        finish = meta.get("finish_reason") or {}
        kind = finish.get("type") if isinstance(finish, dict) else str(finish)
        if kind == "abort":
            reason = "abort"
        elif kind == "length" or (kind != "stop" and len(ids) >= max_new):
            reason = "length"
        else:
            reason = "stop"
        return Generation(ids, logprobs, reason, prompt_len, version, self.version, rid, self.name)  # type: ignore[arg-type]

    async def health(self) -> dict[str, Any]:
        resp = await self._request("GET", "/health")
        if resp.status_code != 200:
            raise EngineUnavailableError(f"SGLang server {self.url}/health returned HTTP {resp.status_code}")
        return {"ok": True, "url": self.url, "version": self.version, "context_length": await self.context_length()}

    @staticmethod
    def reload_body(path: str | os.PathLike[str], version: int) -> dict[str, Any]:
        """The POST /update_weights_from_disk JSON, fields as SGLang documents them (sglang_for_rl.md): the
        server flushes its cache itself (`flush_cache`), running requests finish first (no abort)."""
        return {"model_path": str(path), "load_format": "auto", "abort_all_requests": False,
                "weight_version": str(int(version)), "flush_cache": True}

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Export (if given params) and load the checkpoint into the server; see the module doc."""
        while self._updating is not None:  # one update at a time, in call order
            await asyncio.shield(self._updating)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._updating = done
        try:
            path = await self._checkpoint_dir(weights, version)
            if self.weight_sync == "restart":
                await self._restart_on(path)
            else:
                await self._reload(path, version)
            self.version = int(version)
        finally:
            self._updating = None
            done.set_result(None)

    async def _reload(self, path: Path, version: int) -> None:
        resp = await self._request("POST", "/update_weights_from_disk", self.reload_body(path, version))
        if resp.status_code in (404, 405):
            raise WeightSyncError(
                f"SGLang server {self.url} has no /update_weights_from_disk (a stock sglang-jax server lacks "
                "it). Alternatives: start sglang-jax with the weight reload (engine.launch=True with "
                "engine.weight_sync='disk', or scripts/launch_sglang.py --weight-reload); or "
                "SGLangEngine(weight_sync='restart', server=SGLangServer(...)), which restarts the server on the "
                f"exported checkpoint ({path}); or use engine type 'jax' (JaxEngine), which swaps weights in place."
            )
        body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
        if resp.status_code != 200 or body.get("success") is False:
            raise WeightSyncError(f"SGLang {self.url}/update_weights_from_disk failed: HTTP "
                                  f"{resp.status_code} {resp.text[:500]}")
        self.last_sync = body

    async def _checkpoint_dir(self, weights: WeightsSource, version: int) -> Path:
        if isinstance(weights, (str, os.PathLike)):
            return Path(weights).resolve()
        if self.model_cfg is None or self.export_dir is None:
            raise ValueError("update_weights(params): SGLangEngine needs model_cfg= and export_dir= to write the "
                             "HF checkpoint the server loads (or pass a checkpoint directory instead)")
        from jaxwebrl.models import export_hf

        out = (self.export_dir / f"policy_v{version}").resolve()
        running = _EXPORTING.get(out)
        if running is None:
            running = asyncio.ensure_future(asyncio.to_thread(export_hf, self.model_cfg, weights, out,
                                                              self.tokenizer_dir))
            _EXPORTING[out] = running
            running.add_done_callback(lambda _: _EXPORTING.pop(out, None))
        await asyncio.shield(running)
        self._exports.append(out)
        while len(self._exports) > self.keep_exports:  # old exports are not read by anyone any more
            shutil.rmtree(self._exports.pop(0), ignore_errors=True)
        return out.resolve()

    async def _restart_on(self, path: Path) -> None:
        assert self.server is not None
        await asyncio.to_thread(self.server.restart, path)
        self._context_len, self._context_lookup = None, None
        await self.wait_ready()

    async def close(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self.owns_server and self.server is not None:
            await asyncio.to_thread(self.server.stop)
