"""JaxEngine: the embedded sampler. A KV cache of fixed slots, a prefix cache of KV pages, chunked prefill,
jitted decode, continuous batching.

Why this shape: rollouts are many short, independent agent turns (DESIGN.md principle 7), so a request
must not wait for the longest one in its batch. The cache has `num_slots` rows; a new request is prefilled
into a free row between decode steps, and one decode step advances every decoding row by one token (each row
at its own position). Prompt lengths are bucketed (powers of two up to `max_len`), and so is the part of
the cache a decode step reads (up to just past the furthest decoding slot, since attention cost grows with
it), so a run compiles a handful of prefill and decode programs; `update_weights` swaps arrays of identical
shape, dtype and sharding, so it never recompiles.

Prefix cache: the RL workload shares prefixes (a group's G trajectories share their prompt; each turn of an
episode extends the previous turn's context). Full blocks of `page_size` tokens of every prefilled prompt,
and of every finished request's prompt + response, are copied into a page pool (`page_pool.PagePool`,
`prefix_cache_tokens` of memory) indexed by their tokens (`radix_index.RadixIndex`, LRU eviction). A new
request's longest cached prefix is copied into its row and only the rest is prefilled. `update_weights`
empties the index (an epoch counter also keeps requests that ran under the old weights from publishing).

Chunked prefill: a step prefills at most `prefill_chunk` prompt tokens (queued requests in order, each from
where its cached prefix ends) and then runs one decode step for the decoding slots, so a long prompt does not
stall the others. Requests are prefilled one after another, so a group's later members find the first
member's prompt cached.

Threads: one asyncio task runs the scheduler; the jitted calls run in a single worker thread, so the event
loop (shared with browser episodes) stays responsive while the device works.

The model math is `jaxwebrl.models.forward`, the trainer's own function, and logprobs are
`token_logprobs` of its logits (see engines/base.py for the temperature convention).

Vision-language models (a `VLConfig`: Qwen3-VL, Qwen2.5-VL) take the same path with `images`: the host turns
the request into `vl.prepare_inputs` arrays (M-RoPE positions, patch layout; the patch rows padded to a
power-of-two bucket, so prefill compiles once per (token bucket, patch bucket)), the prefill program runs
the vision encoder and the decoder over the prompt, and the slot keeps the prompt's M-RoPE offset
(`rope_delta`): decoding is the text decode step with positions cache index + delta on all three axes.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxwebrl.engines.page_pool import PagePool, named
from jaxwebrl.engines.radix_index import RadixIndex
from jaxwebrl.engines.base import (
    EngineClosedError,
    EngineError,
    Generation,
    ImageInput,
    SamplingParams,
    WeightsSource,
)
from jaxwebrl.engines.sampling import row_keys, sample
from jaxwebrl.models import ModelConfig, Params, forward, load_hf, logical_axes
from jaxwebrl.models import vl
from jaxwebrl.models.decoder import (
    LAYER_CACHE_AXES,
    hidden_states,
    init_layer_cache,
    lm_head,
    stack_layers,
    unstack_layers,
)
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_hf_io import load_vl_hf
from jaxwebrl.models.vl_or_text import is_vl_checkpoint
from jaxwebrl.sharding import tree_shardings


_ENGINE_IDS = itertools.count()
_COMPILES: collections.Counter[str] = collections.Counter()


def _count_compile(name: str, duration: float, **kwargs: Any) -> None:
    if name == "/jax/core/compile/backend_compile_duration":
        _COMPILES[str(kwargs.get("fun_name", ""))] += 1


jax.monitoring.register_event_duration_secs_listener(_count_compile)


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


@dataclasses.dataclass(eq=False)  # identity, not field, equality: requests are found in queues by `is`
class _Request:
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


def patch_bucket(n: int, unit: int, min_bucket: int = 64) -> int:
    """Patch rows a prefill pads its images to: the next power of two >= n (at least `min_bucket`), a
    multiple of the merge unit, so many image sizes share one compiled program."""
    b = min_bucket
    while b < n:
        b *= 2
    return -(-b // unit) * unit


def prefill_buckets(max_len: int, min_bucket: int = 16) -> tuple[int, ...]:
    """Powers of two from `min_bucket` below `max_len`, then `max_len` itself."""
    out, b = [], min_bucket
    while b < max_len:
        out.append(b)
        b *= 2
    return tuple(out) + (max_len,)


def _first_token_into_slot(
    logits: jax.Array, small: dict[str, jax.Array], cache: dict[str, jax.Array], length: jax.Array, slot: jax.Array,
    seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """The end of a prefill: sample the first token at position length-1 and write the prompt's one-row
    cache into the engine's cache at `slot`."""
    last = jax.lax.dynamic_index_in_dim(logits[0], length - 1, axis=0, keepdims=True)
    keys = row_keys(seed[None], jnp.zeros((1,), jnp.int32))
    tok, lp = sample(last, keys, temp[None], top_k[None], top_p[None], greedy[None])
    return put_row(cache, small, slot), tok[0], lp[0]


def get_row(cache: dict[str, Any], slot: jax.Array, length: int) -> dict[str, Any]:
    """Row `slot` of a per-layer cache, positions [0, length): a per-layer cache of one row."""
    zero = jnp.zeros((), jnp.int32)
    return jax.tree.map(lambda a: jax.lax.dynamic_slice(a, (slot, zero, zero, zero), (1, a.shape[1], length, a.shape[3])),
                        cache)


def put_row(cache: dict[str, Any], row: dict[str, Any], slot: jax.Array) -> dict[str, Any]:
    """The per-layer cache with a one-row per-layer cache written at `slot`, positions [0, its length)."""
    zero = jnp.zeros((), jnp.int32)
    return jax.tree.map(lambda a, r: jax.lax.dynamic_update_slice(a, r.astype(a.dtype), (slot, zero, zero, zero)),
                        cache, row)


def _drop_layer_axis(sharding: Any) -> Any:
    """The sharding of one layer's slice of a stacked array."""
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec[1:]))
    return sharding


def resize_cache(cache: dict[str, Any], length: int) -> dict[str, Any]:
    """The per-layer cache cut or zero-padded to `length` positions per row."""
    def one(a: jax.Array) -> jax.Array:
        if length <= a.shape[2]:
            return a[:, :, :length]
        return jnp.pad(a, ((0, 0), (0, 0), (0, length - a.shape[2]), (0, 0)))

    return jax.tree.map(one, cache)


class JaxEngine:
    """Continuous-batching sampler over `forward` with a slot KV cache; implements `Engine`. `cfg` is a text
    `ModelConfig` or a `VLConfig` (then requests may carry images).

    `prefix_cache` (text models; a VL engine prefills every prompt whole and caches nothing, images or not)
    keeps up to `prefix_cache_tokens` tokens of keys and values (default: as many as the slots hold) in pages
    of `page_size` tokens; `prefill_chunk` bounds the prompt tokens prefilled between two decode steps."""

    def __init__(
        self,
        cfg: ModelConfig | VLConfig,
        params: Params,
        *,
        num_slots: int = 8,
        max_len: int | None = None,
        buckets: Sequence[int] | None = None,
        mesh: Mesh | None = None,
        tokenizer: Any | None = None,
        version: int = 0,
        seed: int = 0,
        cache_dtype: str | None = None,
        eos_token_ids: Sequence[int] | None = None,
        name: str = "jax",
        prefix_cache: bool = True,
        prefix_cache_tokens: int | None = None,
        page_size: int = 16,
        prefill_chunk: int = 512,
    ) -> None:
        self.cfg = cfg
        self.is_vl = isinstance(cfg, VLConfig)
        text_cfg: ModelConfig = cfg.text if isinstance(cfg, VLConfig) else cfg
        self.text_cfg = text_cfg
        # EOS as SGLang sees it: config.json's, generation_config.json's (from_checkpoint) and the tokenizer's.
        eos = set(text_cfg.eos_token_ids) | set(eos_token_ids or ())
        if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
            eos.add(int(tokenizer.eos_token_id))
        self.eos_token_ids = frozenset(eos)
        self.name = name
        self.num_slots = int(num_slots)
        self.max_len = int(max_len or min(text_cfg.max_position_embeddings, 4096))
        if buckets and max(buckets) > self.max_len:
            raise ValueError(f"buckets {tuple(buckets)}: the largest must be <= max_len={self.max_len}")
        # max_len is always the last bucket, so every prompt that fits and every decode span has one.
        self.buckets = tuple(sorted(set(buckets) | {self.max_len})) if buckets else prefill_buckets(self.max_len)
        self.mesh = mesh
        self.tokenizer = tokenizer
        self.version = int(version)
        self._rng = np.random.default_rng(seed)
        self._ids = itertools.count()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{name}-device")

        # Every array the programs take is committed to an explicit sharding, so arrays swapped in later
        # (placed with the same shardings) hit the same compiled programs.
        axes = vl.logical_axes(cfg) if isinstance(cfg, VLConfig) else logical_axes(cfg)
        if mesh is not None:
            self._param_shardings = tree_shardings(params, axes, mesh)
        else:
            one = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])  # this host's (multi-host: its own engine)
            self._param_shardings = jax.tree.map(lambda _: one, params)
        self._placement = mesh if mesh is not None else one  # the page pool lives where the cache does
        # The programs take the params with one tree per layer (`unstack_layers` says why); callers give and
        # `weights()` returns the stacked layout.
        stacked = jax.device_put(params, self._param_shardings, may_alias=False)
        self._param_avals = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), stacked)
        self._unstack = jax.jit(self._unstacked, out_shardings=self._unstacked(self._param_shardings, _drop_layer_axis))
        with self._mesh_ctx():
            self._params = self._unstack(stacked)
        del stacked
        # The slot cache is one array per layer (`init_layer_cache` says why) of `_capacity` positions per row:
        # a bucket just above the longest request in flight, grown and cut between device steps
        # (`_fit_capacity`). Attention reads the whole arrays, never a slice (a slice is a copy on CPU), so
        # its cost follows the requests in flight, not max_len.
        self._cache_dtype = cache_dtype
        dtype = jnp.dtype(cache_dtype or text_cfg.dtype)
        L, K, hd = text_cfg.num_layers, text_cfg.num_kv_heads, text_cfg.head_dim
        layer = jax.ShapeDtypeStruct((self.num_slots, K, self.max_len, hd), dtype)
        layer_sharding = tree_shardings(layer, LAYER_CACHE_AXES, mesh) if mesh is not None else one
        self._cache_shardings = {n: (layer_sharding,) * L for n in ("k", "v")}  # the same at every capacity
        self._capacity = self.buckets[0]
        with self._mesh_ctx():
            self._cache = jax.jit(lambda: init_layer_cache(text_cfg, self.num_slots, self._capacity, cache_dtype),
                                  out_shardings=self._cache_shardings)()
        self._uid = next(_ENGINE_IDS)
        if self.is_vl:  # one program per (prompt bucket, patch bucket, capacity)
            self._prefill = jax.jit(named(self._prefill_vl_fn, f"jaxengine{self._uid}_prefill"), donate_argnums=(1,))
        else:  # one program per (chunk bucket, context bucket), on a row copied out of the cache and back
            self._prefill = jax.jit(named(self._chunk_fn, f"jaxengine{self._uid}_prefill"), donate_argnums=(1,))
        self._get_row = jax.jit(named(get_row, f"jaxengine{self._uid}_row"), static_argnums=(2,))
        self._put_row = jax.jit(named(put_row, f"jaxengine{self._uid}_row"), donate_argnums=(0,))
        self._resize = jax.jit(named(resize_cache, f"jaxengine{self._uid}_resize"), static_argnums=(1,),
                               out_shardings=self._cache_shardings)
        decode_fn = self._decode_vl_fn if self.is_vl else self._decode_fn  # one program per capacity
        self._decode = jax.jit(named(decode_fn, f"jaxengine{self._uid}_decode"), donate_argnums=(1,))

        if prefill_chunk < 1 or page_size < 1:
            raise ValueError(f"prefill_chunk={prefill_chunk} and page_size={page_size} must be >= 1")
        self.prefill_chunk = min(int(prefill_chunk), self.max_len)
        self._chunk_buckets = tuple(b for b in self.buckets if b < self.prefill_chunk) + (self.prefill_chunk,)
        self.page_size = int(page_size)
        self._index: RadixIndex | None = None
        self._pool: PagePool | None = None
        if prefix_cache and not self.is_vl:
            tokens = self.num_slots * self.max_len if prefix_cache_tokens is None else int(prefix_cache_tokens)
            if tokens < self.page_size or self.max_len < self.page_size:
                raise ValueError(f"prefix_cache_tokens={tokens} and max_len={self.max_len} must hold at least one "
                                 f"page of page_size={self.page_size} tokens; raise them or set prefix_cache=False")
            self._pool = PagePool(tokens // self.page_size, self.page_size, (L, self.num_slots, K, self.max_len, hd),
                                  dtype, self._placement, name=f"jaxengine{self._uid}")
            self._index = RadixIndex(self._pool.num_pages, self.page_size)
        self._cache_epoch = 0  # += 1 on every weight update: cached keys and values of older epochs are stale
        self._index_epoch = 0  # the epoch the index holds (device thread)
        self._publish: list[tuple[int, np.ndarray, int]] = []  # (slot, tokens, epoch) to cache, device thread
        self._prefilling: collections.deque[tuple[int, _Request]] = collections.deque()  # admitted, in order

        S = self.num_slots
        self._slots: list[_Request | None] = [None] * S
        self._tok = np.zeros(S, np.int32)
        self._pos = np.zeros(S, np.int32)
        self._seed = np.zeros(S, np.uint32)
        self._count = np.zeros(S, np.int32)
        self._temp = np.ones(S, np.float32)
        self._top_k = np.full(S, -1, np.int32)
        self._top_p = np.ones(S, np.float32)
        self._greedy = np.zeros(S, bool)
        self._delta = np.zeros(S, np.int32)  # M-RoPE offset of each slot's prompt (VL models; 0 for text)
        self._queue: collections.deque[_Request] = collections.deque()
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

    # ---- construction helpers -----------------------------------------------------------------

    @classmethod
    def from_checkpoint(
        cls, path: str | os.PathLike[str], *, mesh: Mesh | None = None, with_tokenizer: bool = True, **kwargs: Any
    ) -> "JaxEngine":
        """Load a HF checkpoint directory (sharded on `mesh`), text or vision-language by its config.json,
        and its tokenizer, for stop strings."""
        cfg, params = load_vl_hf(path, mesh) if is_vl_checkpoint(path) else load_hf(path, mesh)
        tokenizer = kwargs.pop("tokenizer", None)
        if tokenizer is None and with_tokenizer:
            from jaxwebrl.models import load_tokenizer

            with contextlib.suppress(Exception):
                tokenizer = load_tokenizer(path)
        gen_file = Path(path) / "generation_config.json"
        if "eos_token_ids" not in kwargs and gen_file.exists():
            eos = json.loads(gen_file.read_text()).get("eos_token_id")
            kwargs["eos_token_ids"] = [eos] if isinstance(eos, int) else list(eos or [])
        return cls(cfg, params, mesh=mesh, tokenizer=tokenizer, **kwargs)

    def _mesh_ctx(self) -> contextlib.AbstractContextManager[Any]:
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    def _unstacked(self, tree: Params, take: Callable[[Any], Any] | None = None) -> Params:
        """`tree` (params, or their shardings with `take`) with the text decoder's layers split per layer."""
        def split(text: Params) -> Params:
            if take is None:
                return unstack_layers(text)
            return {**text, "layers": (jax.tree.map(take, text["layers"]),) * self.text_cfg.num_layers}

        return {**tree, "text": split(tree["text"])} if self.is_vl else split(tree)

    def weights(self) -> Params:
        """A copy of the engine's current weights in the model's stacked layout (as `update_weights` takes)."""
        with self._mesh_ctx():
            text = self._params["text"] if self.is_vl else self._params
            stacked = stack_layers(text)
            return {**self._params, "text": stacked} if self.is_vl else stacked

    # ---- the jitted programs ------------------------------------------------------------------

    def _chunk_fn(
        self, params: Params, row: dict[str, jax.Array], tokens: jax.Array, start: jax.Array, count: jax.Array,
        seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """Prefill one chunk: `count` real tokens of the right-padded [1, chunk] `tokens` at positions start..,
        attending to `row` (a slot's first ctx >= start + chunk positions, stacked [L, 1, K, ctx, hd]: earlier
        chunks, cached pages); returns the row and the token sampled from the logits of the last real token
        (used when the chunk ends the prompt). Only that token's logits are computed, not [chunk, vocab]."""
        positions = (start + jnp.arange(tokens.shape[1], dtype=jnp.int32))[None]
        h, row = hidden_states(self.text_cfg, params, tokens, positions, cache=row)
        assert row is not None
        last = jax.lax.dynamic_index_in_dim(h, count - 1, axis=1, keepdims=True)  # [1, 1, D]
        head = lm_head(self.text_cfg, params).astype(last.dtype)
        logits = jnp.einsum("btd,dv->btv", last, head, preferred_element_type=jnp.float32)[0]  # as `forward`
        keys = row_keys(seed[None], jnp.zeros((1,), jnp.int32))
        tok, lp = sample(logits, keys, temp[None], top_k[None], top_p[None], greedy[None])
        return row, tok[0], lp[0]

    def _prefill_vl_fn(
        self, params: Params, cache: dict[str, jax.Array], inputs: dict[str, Any], length: jax.Array,
        slot: jax.Array, seed: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array, greedy: jax.Array,
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """`_prefill_fn` for a VL model: `inputs` are `vl.prepare_inputs` arrays of one right-padded prompt
        (with its images' patches, or vision None); the vision encoder runs here, inside the prefill."""
        bucket = inputs["tokens"].shape[1]
        small = init_layer_cache(self.text_cfg, 1, bucket, self._cache_dtype)
        logits, small = vl.forward(self.cfg, params, inputs, cache=small)
        return _first_token_into_slot(logits, small, cache, length, slot, seed, temp, top_k, top_p, greedy)

    def _decode_vl_fn(
        self, params: Params, cache: dict[str, jax.Array], tokens: jax.Array, positions: jax.Array,
        deltas: jax.Array, seeds: jax.Array, counters: jax.Array, temp: jax.Array, top_k: jax.Array,
        top_p: jax.Array, greedy: jax.Array,
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """`_decode_fn` for a VL model: each slot's M-RoPE position is its cache index + its prompt's delta."""
        inputs = vl.decode_inputs(tokens[:, None], positions[:, None], deltas)
        logits, cache = vl.forward(self.cfg, params, inputs, cache=cache)
        tok, lp = sample(logits[:, 0], row_keys(seeds, counters), temp, top_k, top_p, greedy)
        return cache, tok, lp

    def _decode_fn(
        self, params: Params, cache: dict[str, jax.Array], tokens: jax.Array, positions: jax.Array,
        seeds: jax.Array, counters: jax.Array, temp: jax.Array, top_k: jax.Array, top_p: jax.Array,
        greedy: jax.Array,
    ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        """One token for every slot: tokens/positions [S], each row at its own position, attending over the
        cache's whole capacity (a bucket just above the furthest busy slot); the donated cache is updated in
        place."""
        logits, cache = forward(self.cfg, params, tokens[:, None], positions[:, None], cache=cache)
        tok, lp = sample(logits[:, 0], row_keys(seeds, counters), temp, top_k, top_p, greedy)
        return cache, tok, lp

    def compile_counts(self) -> dict[str, int]:
        """XLA compilations of this engine's programs so far (prefill: one per (chunk, context) bucket pair used;
        decode: one per cache capacity; row: the prefill's row copies, resize: capacity changes; the prefix
        cache's page copies: one per (page-count bucket, capacity)), counted from JAX's own compile events, so
        any recompilation shows up."""
        return {kind: _COMPILES[f"jit(jaxengine{self._uid}_{kind})"]
                for kind in ("prefill", "decode", "row", "resize", "store", "load")}

    # ---- Engine API ---------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> Generation:
        """Queue the request; it is prefilled into the first free slot and decoded with the others."""
        if self._closed:
            raise EngineClosedError(f"engine {self.name!r} is closed")
        if self._failure is not None:
            raise EngineError(f"engine {self.name!r} stopped after an error: {self._failure!r}")
        prompt = np.asarray(list(prompt_ids), np.int64)
        if prompt.ndim != 1 or prompt.size == 0:
            raise ValueError("prompt_ids must be a non-empty sequence of token ids")
        vocab = self.text_cfg.vocab_size
        if prompt.min() < 0 or prompt.max() >= vocab:
            raise ValueError(f"prompt_ids must lie in [0, {vocab}); got {prompt.min()}..{prompt.max()}")
        images = tuple(images)
        self._check_images(prompt, images)
        if params.stop and self.tokenizer is None:
            raise ValueError("SamplingParams.stop (stop strings) needs a tokenizer: JaxEngine(..., tokenizer=...)")
        rid = f"{self.name}-{next(self._ids)}"
        if prompt.size >= self.max_len:
            return Generation([], [], "context_length", int(prompt.size), self.version, self.version, rid, self.name)
        loop = asyncio.get_running_loop()
        self._ensure_running()
        stop_ids = set() if params.ignore_eos else set(params.stop_token_ids) | set(self.eos_token_ids)
        seed = int(params.seed) if params.seed is not None else int(self._rng.integers(0, 2**32))
        req = _Request(rid, prompt.astype(np.int32), params, seed % 2**32, frozenset(stop_ids), loop.create_future())
        if self.is_vl:  # host work and its errors stay with this caller, never in the scheduler
            req.vl_inputs, req.rope_delta = self._vl_inputs(req.prompt, images)
        self._queue.append(req)
        assert self._wake is not None
        self._wake.set()
        try:
            return await asyncio.shield(req.future)
        except asyncio.CancelledError:  # the caller gave up (e.g. an episode timeout): free its slot
            self._cancel(req)
            raise

    def _check_images(self, prompt: np.ndarray, images: tuple[ImageInput, ...]) -> None:
        """Refuse, with what to do, images a text model cannot see or that do not match the prompt's
        placeholders (the prefill would otherwise fail inside the scheduler)."""
        if not self.is_vl:
            if images:
                raise ValueError(f"engine {self.name!r} serves a text-only model; images need a vision-language "
                                 "checkpoint (Qwen3-VL / Qwen2.5-VL)")
            return
        assert isinstance(self.cfg, VLConfig)
        unit = self.cfg.vision.merge_unit
        m = self.cfg.vision.spatial_merge_size
        for i, im in enumerate(images):
            if len(im.grid_thw) != 3 or min(im.grid_thw) < 1 or im.grid_thw[1] % m or im.grid_thw[2] % m:
                raise ValueError(f"image {i}: grid_thw {list(im.grid_thw)} is not a (t, h, w) grid with h and w "
                                 f"divisible by spatial_merge_size={m}; build it with the checkpoint's processor")
            pv = None if im.pixel_values is None else np.asarray(im.pixel_values)
            if pv is None or pv.shape != (im.num_patches, self.cfg.vision.patch_dim):
                raise ValueError(f"image {i}: pixel_values must be the processor's [{im.num_patches}, "
                                 f"{self.cfg.vision.patch_dim}] patches for grid_thw {list(im.grid_thw)}, got "
                                 f"{None if pv is None else list(pv.shape)}; build ImageInput from the checkpoint's processor")
        want = sum(im.num_patches for im in images) // unit
        have = int((prompt == self.cfg.image_token_id).sum())
        if have != want:
            raise ValueError(f"the prompt holds {have} image tokens (id {self.cfg.image_token_id}) but its "
                             f"{len(images)} image(s) give {want}; expand the placeholders with the checkpoint's processor")

    def _cancel(self, req: _Request) -> None:
        if req in self._queue:
            self._queue.remove(req)
        for slot, held in enumerate(self._slots):
            if held is req:
                self._finish(slot, req, "abort")
        if not req.future.done():
            req.future.cancel()

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Swap in new params (a tree, or a HF checkpoint dir) between decode steps; no recompilation."""
        if self._closed:
            raise EngineClosedError(f"engine {self.name!r} is closed")
        if isinstance(weights, (str, os.PathLike)):
            load = load_vl_hf if self.is_vl else load_hf
            cfg, new = await asyncio.get_running_loop().run_in_executor(
                self._executor, lambda: load(weights, self.mesh)
            )
            text = cfg.text if isinstance(cfg, VLConfig) else cfg
            if isinstance(cfg, VLConfig) != self.is_vl or (text.num_layers, text.hidden_size, text.vocab_size) != (
                self.text_cfg.num_layers, self.text_cfg.hidden_size, self.text_cfg.vocab_size,
            ):
                raise ValueError(f"{weights}: checkpoint config does not match the engine's model config")
        else:
            new = weights
        if jax.tree.structure(new) != jax.tree.structure(self._param_avals):
            raise ValueError("update_weights: the params tree differs from the engine's (another model config?)")
        bad = [
            f"{jax.tree_util.keystr(path)}: {tuple(np.shape(a))} != {av.shape}"
            for (path, a), av in zip(jax.tree_util.tree_leaves_with_path(new), jax.tree.leaves(self._param_avals))
            if tuple(np.shape(a)) != av.shape
        ]
        if bad:
            raise ValueError(f"update_weights: shapes differ from the engine's params: {bad[:3]}")

        def place() -> Params:
            # A fresh copy with the old dtype and sharding: the same compiled programs run, and the caller
            # may donate or delete its arrays afterwards.
            cast = jax.tree.map(lambda a, av: jnp.asarray(a, av.dtype), new, self._param_avals)
            with self._mesh_ctx():
                return self._unstack(jax.device_put(cast, self._param_shardings, may_alias=False))

        placed = await asyncio.get_running_loop().run_in_executor(self._executor, place)
        self._params, self.version = placed, int(version)
        self._cache_epoch += 1  # the device thread empties the prefix cache before its next step

    async def health(self) -> dict[str, Any]:
        if self._closed:
            raise EngineClosedError(f"engine {self.name!r} is closed")
        if self._failure is not None:
            raise EngineError(f"engine {self.name!r} stopped after an error: {self._failure!r}")
        return {"ok": True, **self.stats()}

    async def close(self) -> None:
        """Stop the scheduler; running and queued requests end with finish_reason 'abort'."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for slot, req in enumerate(self._slots):
            if req is not None:
                self._finish(slot, req, "abort")
        while self._queue:
            req = self._queue.popleft()
            if not req.future.done():
                req.future.set_result(self._result(req, "abort"))
        self._executor.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        return {
            "version": self.version, "active": sum(r is not None for r in self._slots), "queued": len(self._queue),
            "num_slots": self.num_slots, "decode_steps": self.decode_steps, "prefills": self.prefills,
            "generated_tokens": self.generated_tokens, "compiles": self.compile_counts(),
            "prefill_tokens": self.prefill_tokens, "cached_tokens": self.cached_tokens,
            "cache_pages": 0 if self._pool is None else self._pool.num_pages,
            "cache_pages_used": 0 if self._index is None else self._index.cached_blocks,
            "cache_evictions": 0 if self._index is None else self._index.evictions,
            "cache_capacity": self._capacity,
        }

    # ---- scheduler ----------------------------------------------------------------------------

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
        self, params: Params, epoch: int, prefilling: list[tuple[int, _Request]],
        publish: list[tuple[int, np.ndarray, int]],
    ) -> tuple[list[tuple[int, _Request, int, float]], tuple[np.ndarray, np.ndarray, list[tuple[int, _Request]]] | None]:
        """Worker thread: cache finished requests' blocks, prefill up to `prefill_chunk` prompt tokens of the
        admitted requests in order, then one decode step over the decoding slots. Returns the first tokens of
        the prompts completed and the decode step's tokens with the (slot, request) rows they belong to."""
        first: list[tuple[int, _Request, int, float]] = []
        with self._mesh_ctx():
            if self._index is not None and self._index_epoch != epoch:  # new weights: every cached entry is stale
                self._index.clear()
                self._index_epoch = epoch
            for slot, tokens, ep in publish:
                if ep == epoch:
                    self._cache_blocks(slot, tokens)
            self._fit_capacity(prefilling)  # after the publishing: a cut must not drop blocks not cached yet
            budget = self.prefill_chunk
            for slot, req in prefilling:
                if budget <= 0:
                    break
                if self._slots[slot] is not req:  # cancelled while queued for its prefill
                    continue
                done, used = self._prefill_vl(params, slot, req) if req.vl_inputs is not None else \
                    self._prefill_chunk(params, epoch, slot, req, budget)
                budget -= used
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
            # not decoding (free, or mid-prefill) compute junk at their position, which their next prefill
            # chunk (or page load) overwrites before anything reads it.
            per_slot = (self._tok, self._pos) + ((self._delta,) if self.is_vl else ()) + (
                self._seed, self._count, self._temp, self._top_k, self._top_p, self._greedy)
            self._cache, toks, lps = self._decode(params, self._cache, *(a.copy() for a in per_slot))
            return first, (np.asarray(toks), np.asarray(lps), rows)

    def _fit_capacity(self, prefilling: list[tuple[int, _Request]]) -> None:
        """Cut the cache to the bucket of the longest request in flight (whole prompts of those prefilling,
        the next position of those decoding) once that is at most half the capacity: the halving keeps a
        request at a bucket's edge from resizing the cache back and forth. Steps grow it (`_grow`)."""
        need = [req.prompt.size for slot, req in prefilling if self._slots[slot] is req]
        need += [int(self._pos[slot]) + 1 for slot, r in enumerate(self._slots) if r is not None and r.decoding]
        if need and (target := self._bucket(max(need))) <= self._capacity // 2:
            self._set_capacity(target)

    def _grow(self, n: int) -> None:
        """Make every row hold at least `n` positions. Device thread."""
        if n > self._capacity:
            self._set_capacity(self._bucket(n))

    def _set_capacity(self, length: int) -> None:
        self._cache = self._resize(self._cache, length)
        self._capacity = length

    def _prefill_vl(self, params: Params, slot: int, req: _Request) -> tuple[tuple[int, float], int]:
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

    def _prefill_chunk(
        self, params: Params, epoch: int, slot: int, req: _Request, budget: int
    ) -> tuple[tuple[int, float] | None, int]:
        """Prefill the next chunk (<= budget tokens) of a text prompt into row `slot`, starting after its cached
        prefix; returns ((first token, logprob) when the prompt is done, else None) and the tokens computed."""
        n, cached = req.prompt.size, 0
        if req.kv_epoch < 0:  # first chunk: take the longest cached prefix (always leaving one token to run)
            req.kv_epoch = epoch
            self._grow(n)  # the row holds the whole prompt, the cached pages first
            if self._index is not None and self._pool is not None:
                pages = self._index.match(req.prompt, limit=n - 1)
                if pages:
                    self._cache = self._pool.load(self._cache, slot, pages)
                    cached = len(pages) * self.page_size
                    req.prefilled = cached
                    self.cached_tokens += cached
        start = req.prefilled
        size = min(n - start, budget)
        width = next(b for b in self._chunk_buckets if b >= size)
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
                                          size, cached))
        if req.prefilled < n:
            self._pos[slot] = req.prefilled  # where a decode step's junk write lands: the next chunk's start
            return None, size
        if req.kv_epoch == epoch:
            self._cache_blocks(slot, req.prompt)
        self._set_slot(slot, req, int(tok), n)
        return (int(tok), float(lp)), size

    def _cache_blocks(self, slot: int, tokens: np.ndarray) -> None:
        """Index the full blocks of `tokens` (whose keys and values fill row `slot` from position 0) and copy
        the blocks not cached yet into their pages. Device thread."""
        if self._index is None or self._pool is None:
            return
        new = self._index.insert(tokens)
        if new:
            self._pool.store(self._cache, slot, [b for b, _ in new], [p for _, p in new])

    def _vl_inputs(self, prompt: np.ndarray, images: tuple[ImageInput, ...]) -> tuple[dict[str, Any], int]:
        """Host side of a VL prefill: `vl.prepare_inputs` of the prompt right-padded to its bucket, with its
        images' patches padded to a patch bucket; returns the inputs and the prompt's M-RoPE delta."""
        assert isinstance(self.cfg, VLConfig)
        n = prompt.size
        padded = np.zeros((1, self._bucket(n)), np.int32)
        padded[0, :n] = prompt
        mask = np.zeros_like(padded)
        mask[0, :n] = 1
        if images:
            pixels = np.concatenate([np.asarray(im.pixel_values, np.float32) for im in images])
            grid = np.asarray([im.grid_thw for im in images], np.int64)
            total = patch_bucket(pixels.shape[0], self.cfg.vision.merge_unit)
        else:
            pixels = grid = total = None
        inputs = vl.prepare_inputs(self.cfg, padded, mask, pixels, grid, num_patches=total)
        return inputs, int(inputs.pop("rope_deltas")[0])

    def _set_slot(self, slot: int, req: _Request, tok: int, n: int) -> None:
        sp = req.params
        self._tok[slot], self._pos[slot], self._count[slot] = tok, n, 1
        self._seed[slot] = req.seed
        self._temp[slot], self._top_k[slot], self._top_p[slot] = sp.temperature, sp.top_k, sp.top_p
        self._greedy[slot] = sp.is_greedy
        req.decoding = True

    def _append(self, slot: int, req: _Request, tok: int, lp: float, version: int) -> None:
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

    def _stop_reason(self, req: _Request) -> str | None:
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

    def _finish(self, slot: int, req: _Request, reason: str) -> None:
        if self._index is not None and req.decoding and req.kv_epoch == self._cache_epoch and self._slots[slot] is req:
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

    def _result(self, req: _Request, reason: str) -> Generation:
        first = req.first_version if req.first_version >= 0 else self.version
        last = req.last_version if req.last_version >= 0 else first
        return Generation(list(req.tokens), list(req.logprobs), reason, int(req.prompt.size), first, last,  # type: ignore[arg-type]
                          req.request_id, self.name)
