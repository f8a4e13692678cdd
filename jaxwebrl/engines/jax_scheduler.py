"""The JaxEngine's continuous batching: requests wait in a queue, each is admitted to a free slot (a row of
the KV cache), prefilled in chunks of `prefill_chunk` tokens (a prompt's last chunk padded to the narrowest of
`prefill_widths` that holds it, so the prefill programs never follow the prompts' lengths), up to
`prefill_budget` positions between two decode
steps (in arrival order, after the longest prefix the prefix cache holds), then decoded with every other
decoding slot, one token per step, until a stop condition frees its slot. The cache's capacity follows the longest request in flight
(grown before a step needs it, cut when the need falls to half), and finished requests' full blocks are
published to the prefix cache. One asyncio task runs `_run`; the device work (`_device_step`) runs in the
engine's single worker thread.

Deterministic mode (`deterministic=True`): a request's tokens and logprobs must not depend on what else is in
flight, so every shape and every value it computes with is a function of the request alone. Prefill: the
prompt is cut on a fixed grid of `prefill_chunk` (C) positions, [kC, (k+1)C), each chunk padded to width C and
attending over the bucket of (k+1)C, whatever the queue holds (the budget only decides how many chunks a step
runs); the key and value at a position are thereby a function of the tokens up to it. Prefix cache: a
request takes only whole grid chunks ((k C) tokens) of a match, and only prompt blocks computed by such
prefills are published, never a finished request's response (decode steps compute those keys and values
with other shapes): what it loads is bit-identical to what it would recompute. Decode: the cache's capacity
stays at `max_len` (a reduction over another length may round differently); rows do not mix, and sampling
keys come from the request's seed and token index. The price is attention over `max_len` in every decode
step and prompts padded to whole chunks.

`SlotScheduler` is the base of `JaxEngine` (jax_engine.py), which builds the programs, the cache and the
prefix cache it drives and serves the Engine API on top.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh

from jaxwebrl.engines.base import EngineError, Generation, SamplingParams
from jaxwebrl.engines.page_pool import PagePool
from jaxwebrl.engines.radix_index import RadixIndex
from jaxwebrl.models import Params


@dataclasses.dataclass(frozen=True)
class SchedulerEvent:
    """One scheduling decision, kept so tests and dashboards can see slots being reused."""

    kind: str  # "admit" | "prefill" (one chunk) | "finish"
    request_id: str
    slot: int
    step: int  # decode steps run so far when it happened
    time: float
    tokens: int = 0  # prefill: prompt tokens computed by this chunk
    cached: int = 0  # prefill: prompt tokens taken from the prefix cache (first chunk)
    width: int = 0  # prefill: positions the chunk computed (its tokens, padded to one of `prefill_widths`)


@dataclasses.dataclass(eq=False)  # identity, not field, equality: requests are found in queues by `is`
class Request:
    request_id: str
    prompt: np.ndarray
    params: SamplingParams
    seed: int
    stop_ids: frozenset[int]
    future: asyncio.Future[Generation]
    tokens: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    first_version: int = -1
    last_version: int = -1
    vl_inputs: dict[str, Any] | None = None  # VL prompts: `vl.prepare_inputs` arrays, built before queueing
    rope_delta: int = 0
    prefilled: int = 0  # prompt positions whose keys and values are in the slot's row
    decoding: bool = False  # prefill done: the slot takes part in decode steps
    kv_epoch: int = -1  # cache epoch (weights) its prefill started under; -1 = not started


class SlotScheduler:
    """Slots, queue and the scheduling loop of the JaxEngine (see the module doc). The engine sets the fields
    annotated here before its first request; `_init_scheduler` sets the scheduler's own state."""

    name: str
    num_slots: int
    max_len: int
    buckets: tuple[int, ...]
    mesh: Mesh | None
    tokenizer: Any
    version: int
    is_vl: bool
    prefill_chunk: int
    prefill_widths: tuple[int, ...]  # narrowest first; the widest is prefill_chunk (deterministic: the only one)
    page_size: int
    deterministic: bool
    _executor: Any
    _params: Params
    _cache: dict[str, Any]
    _capacity: int
    prefill_budget: int
    _index: RadixIndex | None
    _pool: PagePool | None
    _prefill: Callable[..., Any]
    _decode: Callable[..., Any]
    _get_row: Callable[..., Any]
    _put_row: Callable[..., Any]
    _resize: Callable[..., Any]

    def _init_scheduler(self) -> None:
        self._cache_epoch = 0  # += 1 on every weight update: cached keys and values of older epochs are stale
        self._index_epoch = 0  # the epoch the index holds (device thread)
        self._publish: list[tuple[int, np.ndarray, int]] = []  # (slot, tokens, epoch) to cache, device thread
        self._prefilling: collections.deque[tuple[int, Request]] = collections.deque()  # admitted, in order

        S = self.num_slots
        self._slots: list[Request | None] = [None] * S
        self._tok = np.zeros(S, np.int32)
        self._pos = np.zeros(S, np.int32)
        self._seed = np.zeros(S, np.uint32)
        self._count = np.zeros(S, np.int32)
        self._temp = np.ones(S, np.float32)
        self._top_k = np.full(S, -1, np.int32)
        self._top_p = np.ones(S, np.float32)
        self._greedy = np.zeros(S, bool)
        self._delta = np.zeros(S, np.int32)  # M-RoPE offset of each slot's prompt (VL models; 0 for text)
        self._queue: collections.deque[Request] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._failure: BaseException | None = None
        self.events: collections.deque[SchedulerEvent] = collections.deque(maxlen=100_000)
        self.decode_steps = 0
        self.prefills = 0
        self.generated_tokens = 0
        self.prefill_tokens = 0  # prompt tokens computed by prefill chunks
        self.cached_tokens = 0  # prompt tokens whose keys and values came from the prefix cache

    def _mesh_ctx(self) -> contextlib.AbstractContextManager[Any]:
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    def _cancel(self, req: Request) -> None:
        if req in self._queue:
            self._queue.remove(req)
        for slot, held in enumerate(self._slots):
            if held is req:
                self._finish(slot, req, "abort")
        if not req.future.done():
            req.future.cancel()

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self.name}-scheduler")

    def _bucket(self, n: int) -> int:
        for b in self.buckets:
            if b >= n:
                return b
        raise ValueError(f"length {n} exceeds max_len={self.max_len}")  # generate() rejects such prompts first

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        try:
            while not self._closed:
                for slot in range(self.num_slots):
                    if self._slots[slot] is None and self._queue:
                        req = self._queue.popleft()
                        self._slots[slot] = req
                        self._prefilling.append((slot, req))
                        self.events.append(SchedulerEvent("admit", req.request_id, slot, self.decode_steps, time.monotonic()))
                if not self._prefilling and not any(r is not None for r in self._slots):
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                params, version, epoch = self._params, self.version, self._cache_epoch
                publish, self._publish = self._publish, []
                first, decoded = await loop.run_in_executor(
                    self._executor, self._device_step, params, epoch, list(self._prefilling), publish)
                for slot, req, tok, lp in first:
                    with contextlib.suppress(ValueError):  # a request cancelled meanwhile is gone already
                        self._prefilling.remove((slot, req))
                    req.first_version = version
                    self.prefills += 1
                    self._append(slot, req, tok, lp, version)
                if decoded is not None:
                    self.decode_steps += 1
                    toks, lps, rows = decoded
                    for slot, req in rows:  # requests that finished on their first token are gone already
                        self._append(slot, req, int(toks[slot]), float(lps[slot]), version)
        except asyncio.CancelledError:
            if not self._closed:  # the event loop is shutting down: nobody waits for these any more
                self._drop_all(None)
            raise
        except Exception as exc:  # a device error must not leave callers waiting forever
            self._failure = exc
            self._drop_all(EngineError(f"engine {self.name!r} failed: {exc!r}"))

    def _drop_all(self, error: Exception | None) -> None:
        pending = [r for r in self._slots if r is not None] + list(self._queue)
        self._slots = [None] * self.num_slots
        self._queue.clear()
        self._prefilling.clear()
        for req in pending:
            if not req.future.done():
                if error is None:
                    req.future.cancel()
                else:
                    req.future.set_exception(error)

    def _device_step(
        self, params: Params, epoch: int, prefilling: list[tuple[int, Request]],
        publish: list[tuple[int, np.ndarray, int]],
    ) -> tuple[list[tuple[int, Request, int, float]], tuple[np.ndarray, np.ndarray, list[tuple[int, Request]]] | None]:
        """Worker thread: cache finished requests' blocks, prefill up to `prefill_chunk` prompt tokens of the
        admitted requests in order, then one decode step over the decoding slots. Returns the first tokens of
        the prompts completed and the decode step's tokens with the (slot, request) rows they belong to."""
        first: list[tuple[int, Request, int, float]] = []
        with self._mesh_ctx():
            if self._index is not None and self._index_epoch != epoch:  # new weights: every cached entry is stale
                self._index.clear()
                self._index_epoch = epoch
            for slot, tokens, ep in publish:
                if ep == epoch:
                    self._cache_blocks(slot, tokens)
            self._fit_capacity(prefilling)  # after the publishing: a cut must not drop blocks not cached yet
            budget = self.prefill_budget
            for slot, req in prefilling:
                if budget <= 0:
                    break
                if self._slots[slot] is not req:  # cancelled while queued for its prefill
                    continue
                done: tuple[int, float] | None = None
                if req.vl_inputs is not None:
                    done, used = self._prefill_vl(params, slot, req)
                    budget -= used
                while done is None and budget > 0:  # text: chunk after chunk of this prompt
                    done, width = self._prefill_chunk(params, epoch, slot, req)
                    budget -= width  # a padded chunk costs its whole width
                if done is None:
                    break  # prompts are prefilled in order: the next may extend this one
                first.append((slot, req, *done))
            # One snapshot: callers may cancel (free slots) on the loop thread while this runs. Slots whose
            # request just finished on its first token still decode here, harmlessly (the result is ignored).
            rows = [(slot, r) for slot, r in enumerate(self._slots) if r is not None and r.decoding]
            if not rows:
                return first, None
            self._grow(int(self._pos[[slot for slot, _ in rows]].max()) + 1)
            # Copies: on CPU jax may alias numpy memory, and the loop thread mutates these arrays later. Rows
            # not decoding (free, or mid-prefill) compute junk at their position (batched decode; the
            # deterministic one skips them), which their next prefill chunk (or page load) overwrites before
            # anything reads it.
            per_slot = (self._tok, self._pos) + ((self._delta,) if self.is_vl else ()) + (
                self._seed, self._count, self._temp, self._top_k, self._top_p, self._greedy)
            by_row: tuple[np.ndarray, ...] = ()
            if self.deterministic:  # `decode_by_row` steps the decoding rows only, in slot order
                order = np.zeros(self.num_slots, np.int32)
                order[:len(rows)] = [slot for slot, _ in rows]
                by_row = (order, np.int32(len(rows)))
            self._cache, toks, lps = self._decode(params, self._cache, *by_row, *(a.copy() for a in per_slot))
            return first, (np.asarray(toks), np.asarray(lps), rows)

    def _fit_capacity(self, prefilling: list[tuple[int, Request]]) -> None:
        """Cut the cache to the bucket of the longest request in flight (whole prompts of those prefilling,
        the next position of those decoding) once that is at most half the capacity: the halving keeps a
        request at a bucket's edge from resizing the cache back and forth. Steps grow it (`_grow`)."""
        if self.deterministic:  # the capacity stays at max_len
            return
        need = [req.prompt.size for slot, req in prefilling if self._slots[slot] is req]
        need += [int(self._pos[slot]) + 1 for slot, r in enumerate(self._slots) if r is not None and r.decoding]
        if need and (target := self._bucket(max(need))) <= self._capacity // 2:
            self._set_capacity(target)

    def _grow(self, n: int) -> None:
        """Make every row hold at least `n` positions. Device thread."""
        if n > self._capacity:
            self._set_capacity(self._bucket(n))

    def _set_capacity(self, length: int) -> None:
        if length == self._capacity:
            return
        self._cache = self._resize(self._cache, length)
        self._capacity = length

    def _prefill_vl(self, params: Params, slot: int, req: Request) -> tuple[tuple[int, float], int]:
        """A VL prompt, whole (its images' features are computed inside): (first token, logprob), tokens."""
        sp, n = req.params, req.prompt.size
        self._delta[slot] = req.rope_delta
        self._grow(n)  # the prompt's bucket, the length of the one-row cache the prefill writes
        self._cache, tok, lp = self._prefill(
            params, self._cache, req.vl_inputs, np.int32(n), np.int32(slot), np.uint32(req.seed),
            np.float32(sp.temperature), np.int32(sp.top_k), np.float32(sp.top_p), np.bool_(sp.is_greedy),
        )
        self.prefill_tokens += n
        self.events.append(SchedulerEvent("prefill", req.request_id, slot, self.decode_steps, time.monotonic(), n))
        self._set_slot(slot, req, int(tok), n)
        return (int(tok), float(lp)), n

    def _prefill_chunk(self, params: Params, epoch: int, slot: int,
                       req: Request) -> tuple[tuple[int, float] | None, int]:
        """Prefill the next chunk of a text prompt into row `slot` (at most `prefill_chunk` tokens, starting
        after its cached prefix, padded to the narrowest of `prefill_widths` that holds them); returns (first
        token, logprob) once the prompt is done, else None, and the chunk's width."""
        n, cached = req.prompt.size, 0
        if req.kv_epoch < 0:  # first chunk: take the longest cached prefix (always leaving one token to run)
            req.kv_epoch = epoch
            self._grow(n)  # the row holds the whole prompt, the cached pages first
            if self._index is not None and self._pool is not None:
                pages = self._index.match(req.prompt, limit=n - 1)
                if self.deterministic:  # whole grid chunks only: the next chunk starts where a fresh prefill's would
                    pages = pages[:len(pages) - len(pages) % (self.prefill_chunk // self.page_size)]
                if pages:
                    self._cache = self._pool.load(self._cache, slot, pages)
                    cached = len(pages) * self.page_size
                    req.prefilled = cached
                    self.cached_tokens += cached
        start = req.prefilled  # deterministic: a multiple of prefill_chunk, so chunks lie on the grid
        size = min(n - start, self.prefill_chunk)
        width = next(w for w in self.prefill_widths if w >= size)
        s0 = min(start, self.max_len - width)  # keep the padded window inside the row (recomputes a few)
        count = start + size - s0
        tokens = np.zeros((1, width), np.int32)
        tokens[0, :count] = req.prompt[s0:start + size]
        sp, ctx = req.params, self._bucket(s0 + width)
        self._grow(ctx)
        row = self._get_row(self._cache, np.int32(slot), ctx)
        row, tok, lp = self._prefill(
            params, row, tokens, np.int32(s0), np.int32(count), np.uint32(req.seed),
            np.float32(sp.temperature), np.int32(sp.top_k), np.float32(sp.top_p), np.bool_(sp.is_greedy),
        )
        self._cache = self._put_row(self._cache, row, np.int32(slot))
        req.prefilled = start + size
        self.prefill_tokens += size
        self.events.append(SchedulerEvent("prefill", req.request_id, slot, self.decode_steps, time.monotonic(),
                                          size, cached, width))
        if req.prefilled < n:
            self._pos[slot] = req.prefilled  # where a decode step's junk write lands: the next chunk's start
            return None, width
        if req.kv_epoch == epoch:
            self._cache_blocks(slot, req.prompt)
        self._set_slot(slot, req, int(tok), n)
        return (int(tok), float(lp)), width

    def _cache_blocks(self, slot: int, tokens: np.ndarray) -> None:
        """Index the full blocks of `tokens` (whose keys and values fill row `slot` from position 0) and copy
        the blocks not cached yet into their pages. Device thread."""
        if self._index is None or self._pool is None:
            return
        new = self._index.insert(tokens)
        if new:
            self._pool.store(self._cache, slot, [b for b, _ in new], [p for _, p in new])

    def _set_slot(self, slot: int, req: Request, tok: int, n: int) -> None:
        sp = req.params
        self._tok[slot], self._pos[slot], self._count[slot] = tok, n, 1
        self._seed[slot] = req.seed
        self._temp[slot], self._top_k[slot], self._top_p[slot] = sp.temperature, sp.top_k, sp.top_p
        self._greedy[slot] = sp.is_greedy
        req.decoding = True

    def _append(self, slot: int, req: Request, tok: int, lp: float, version: int) -> None:
        """Record one sampled token of the request in `slot` and finish it if a stop condition holds."""
        if self._slots[slot] is not req or req.future.done():
            return
        req.tokens.append(tok)
        req.logprobs.append(lp)
        req.last_version = version
        self.generated_tokens += 1
        if len(req.tokens) > 1:  # the prefill set the slot for the first token; advance for later ones
            self._tok[slot] = tok
            self._pos[slot] += 1
            self._count[slot] += 1
        reason = self._stop_reason(req)
        if reason is None and self._pos[slot] >= self.max_len:
            reason = "length"  # the slot's cache row is full
        if reason is not None:
            self._finish(slot, req, reason)

    def _stop_reason(self, req: Request) -> str | None:
        if req.tokens[-1] in req.stop_ids:
            return "stop"
        if req.params.stop:
            width = max(len(s) for s in req.params.stop) + 4
            tail = self.tokenizer.decode(req.tokens[-width:], skip_special_tokens=False)
            if any(s in tail for s in req.params.stop):
                return "stop"
        if len(req.tokens) >= req.params.max_new_tokens:
            return "length"
        return None

    def _finish(self, slot: int, req: Request, reason: str) -> None:
        if (self._index is not None and req.decoding and req.kv_epoch == self._cache_epoch and self._slots[slot] is req
                and not self.deterministic):  # deterministic: decode-computed keys and values are never reused
            # Cache prompt + response: positions below the slot's current one hold their keys and values (the
            # last sampled token's were never computed). The row stays intact until the next device step,
            # which copies the blocks before any prefill can reuse the slot.
            valid = int(self._pos[slot])
            if valid >= self.page_size:
                seq = np.concatenate([req.prompt, np.asarray(req.tokens, np.int32)])[:valid]
                self._publish.append((slot, seq, req.kv_epoch))
        with contextlib.suppress(ValueError):
            self._prefilling.remove((slot, req))
        self._slots[slot] = None
        # The free row's decode junk keeps landing at its last position, never below it: a cancel can free
        # the slot while a decode step is running on it, and the blocks below must stay intact to be cached.
        self._pos[slot] = min(int(self._pos[slot]), self.max_len - 1)
        self.events.append(SchedulerEvent("finish", req.request_id, slot, self.decode_steps, time.monotonic()))
        if not req.future.done():
            req.future.set_result(self._result(req, reason))

    def _result(self, req: Request, reason: str) -> Generation:
        first = req.first_version if req.first_version >= 0 else self.version
        last = req.last_version if req.last_version >= 0 else first
        return Generation(list(req.tokens), list(req.logprobs), reason, int(req.prompt.size), first, last,  # type: ignore[arg-type]
                          req.request_id, self.name)
