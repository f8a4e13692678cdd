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

Chunked prefill: a step prefills chunks of `prefill_chunk` tokens, at most `prefill_budget` tokens in all
(queued requests in order, each from where its cached prefix ends), and then runs one decode step for the
decoding slots, so a long prompt does not stall the others. Chunks have a few fixed widths (`prefill_chunk`,
and for a prompt's last chunk the narrowest of `prefill_min_chunk`, twice that, ... that holds the rest), so the
prefill programs are one per (width, context bucket): a new prompt length is never a new program (on
SmolLM2, chunks of every width up to 512 compiled new programs in every round of new lengths). Requests are
prefilled one after another, so a group's later members find the first member's prompt cached.

Threads: one asyncio task runs the scheduler; the jitted calls run in a single worker thread, so the event
loop (shared with browser episodes) stays responsive while the device works.

Where the parts are: this module builds the engine (params placed per layer, the slot cache, the prefix cache,
the jitted programs) and serves the Engine API (`generate`, `update_weights`, `health`, `close`, `stats`);
`jax_scheduler.SlotScheduler`, its base, admits, prefills, decodes and finishes requests; `jax_programs` holds
the device programs themselves.

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
import concurrent.futures
import contextlib
import functools
import itertools
import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxwebrl.engines.base import (
    EngineClosedError,
    EngineError,
    Generation,
    ImageInput,
    SamplingParams,
    WeightsSource,
)
from jaxwebrl.engines.jax_programs import (
    CountedProgram,
    chunk_prefill,
    compile_counts,
    decode,
    decode_by_row,
    decode_vl,
    drop_layer_axis,
    get_row,
    patch_bucket,
    prefill_buckets,
    prefill_vl,
    put_row,
    resize_cache,
)
from jaxwebrl.engines.jax_scheduler import Request, SchedulerEvent, SlotScheduler
from jaxwebrl.engines.page_pool import PagePool
from jaxwebrl.engines.radix_index import RadixIndex
from jaxwebrl.models import ModelConfig, Params, load_hf, logical_axes
from jaxwebrl.models import vl
from jaxwebrl.models.decoder import LAYER_CACHE_AXES, init_layer_cache, stack_layers, unstack_layers
from jaxwebrl.models.vl_config import VLConfig
from jaxwebrl.models.vl_hf_io import load_vl_hf
from jaxwebrl.models.vl_or_text import is_vl_checkpoint
from jaxwebrl.sharding import tree_shardings

__all__ = ["JaxEngine", "SchedulerEvent", "patch_bucket", "prefill_buckets"]

_ENGINE_IDS = itertools.count()


class JaxEngine(SlotScheduler):
    """Continuous-batching sampler over `forward` with a slot KV cache; implements `Engine`. `cfg` is a text
    `ModelConfig` or a `VLConfig` (then requests may carry images).

    `prefix_cache` (text models; a VL engine prefills every prompt whole and caches nothing, images or not)
    keeps up to `prefix_cache_tokens` tokens of keys and values (default: as many as the slots hold) in pages
    of `page_size` tokens; prompts are prefilled in chunks of `prefill_chunk` tokens, `prefill_budget` tokens
    (default max(prefill_chunk, 512)) between two decode steps. A prompt's last chunk takes the narrowest of
    the widths `prefill_min_chunk`, twice that, ... below `prefill_chunk`, and `prefill_chunk` that holds it
    (16 by default; `prefill_min_chunk=prefill_chunk` pads every last chunk to the full width).

    `deterministic`: a request's tokens and logprobs are bit-identical whatever else is in flight (see
    "Deterministic mode" in jax_scheduler's doc): chunks on a fixed grid of `prefill_chunk` positions, each
    padded to the full width; the decode cache fixed at `max_len`; the prefix cache reuses only whole
    prefilled grid chunks; sampled requests must carry `SamplingParams.seed`."""
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
        prefill_chunk: int = 128,
        prefill_budget: int | None = None,
        prefill_min_chunk: int = 16,
        deterministic: bool = False,
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
        if (prefill_chunk < 1 or page_size < 1 or prefill_min_chunk < 1
                or (prefill_budget is not None and prefill_budget < 1)):
            raise ValueError(f"prefill_chunk={prefill_chunk}, prefill_min_chunk={prefill_min_chunk}, prefill_budget="
                             f"{prefill_budget} and page_size={page_size} must be >= 1")
        # A prefill chunk is `prefill_chunk` tokens wide, but for a prompt's last chunk, which is padded to the
        # narrowest of a few fixed widths that holds it (`prefill_widths`): the prefill programs are one per
        # (width, context bucket) pair whatever the prompts' lengths, and a short tail (a group member after
        # its cached prefix, a second turn's new tokens) no longer costs a whole chunk (on SmolLM2 a 16-wide
        # chunk runs in ~0.3x a 128-wide one's time). Deterministic mode keeps the one width: its chunks lie
        # on a fixed grid, whatever the prompt's length. A step runs chunks until it has spent
        # `prefill_budget` positions.
        self.prefill_chunk = min(int(prefill_chunk), self.max_len)
        # the same series as the context buckets: powers of two from the narrowest, then the chunk itself
        self.prefill_widths = prefill_buckets(self.prefill_chunk, self.prefill_chunk if deterministic
                                              else min(int(prefill_min_chunk), self.prefill_chunk))
        self.prefill_budget = int(prefill_budget) if prefill_budget is not None else max(self.prefill_chunk, 512)
        # max_len is always the last bucket, so every prompt that fits and every decode span has one. The
        # default buckets start at the chunk width: a prefill reads at least that many positions anyway.
        self.buckets = (tuple(sorted(set(buckets) | {self.max_len})) if buckets
                        else prefill_buckets(self.max_len, min_bucket=self.prefill_chunk))
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
        self._unstack = jax.jit(self._unstacked, out_shardings=self._unstacked(self._param_shardings, drop_layer_axis))
        with self._mesh_ctx():
            self._params = self._unstack(stacked)
        del stacked
        # The slot cache is one array per layer (`init_layer_cache` says why) of `_capacity` positions per row:
        # a bucket just above the longest request in flight, grown and cut between device steps
        # (`_fit_capacity`). Attention reads the whole arrays, never a slice (a slice is a copy on CPU), so
        # its cost follows the requests in flight, not max_len.
        dtype = jnp.dtype(cache_dtype or text_cfg.dtype)
        L, K, hd = text_cfg.num_layers, text_cfg.num_kv_heads, text_cfg.head_dim
        layer = jax.ShapeDtypeStruct((self.num_slots, K, self.max_len, hd), dtype)
        layer_sharding = tree_shardings(layer, LAYER_CACHE_AXES, mesh) if mesh is not None else one
        self._cache_shardings = {n: (layer_sharding,) * L for n in ("k", "v")}  # the same at every capacity
        self.deterministic = bool(deterministic)
        # deterministic: one capacity for good, so a decode step's shapes never follow the requests in flight
        self._capacity = self.max_len if self.deterministic else self.buckets[0]
        with self._mesh_ctx():
            self._cache = jax.jit(lambda: init_layer_cache(text_cfg, self.num_slots, self._capacity, cache_dtype),
                                  out_shardings=self._cache_shardings)()
        self._uid = next(_ENGINE_IDS)
        if isinstance(cfg, VLConfig):  # one program per (prompt bucket, patch bucket, capacity)
            self._prefill = CountedProgram(functools.partial(prefill_vl, cfg, cache_dtype), self._uid, "prefill",
                                           donate_argnums=(1,))
        else:  # one program per (chunk width, context bucket), on a row copied out of the cache and back
            self._prefill = CountedProgram(functools.partial(chunk_prefill, cfg), self._uid, "prefill",
                                           donate_argnums=(1,))
        self._get_row = CountedProgram(get_row, self._uid, "row", static_argnums=(2,))
        self._put_row = CountedProgram(put_row, self._uid, "row", donate_argnums=(0,))
        self._resize = CountedProgram(resize_cache, self._uid, "resize", static_argnums=(1,),
                                      out_shardings=self._cache_shardings)
        decode_fn = functools.partial(decode_vl if isinstance(cfg, VLConfig) else decode, cfg)  # one program per capacity
        if self.deterministic:  # slot by slot: a row's numbers do not depend on its slot (jax_programs.decode_by_row)
            decode_fn = functools.partial(decode_by_row, decode_fn)
        self._decode = CountedProgram(decode_fn, self._uid, "decode", donate_argnums=(1,))

        self.page_size = int(page_size)
        if self.deterministic:  # every chunk is one full grid chunk: [k C, (k + 1) C), padded
            if self.max_len % self.prefill_chunk or (prefix_cache and self.prefill_chunk % self.page_size):
                raise ValueError(f"deterministic=True needs max_len={self.max_len} to be a multiple of prefill_chunk="
                                 f"{self.prefill_chunk}, and prefill_chunk a multiple of page_size={self.page_size} "
                                 "(prefixes are reused in whole chunks); e.g. prefill_chunk=128, page_size=16")
        self._index: RadixIndex | None = None
        self._pool: PagePool | None = None
        if prefix_cache and not self.is_vl:
            tokens = self.num_slots * self.max_len if prefix_cache_tokens is None else int(prefix_cache_tokens)
            if tokens < self.page_size or self.max_len < self.page_size:
                raise ValueError(f"prefix_cache_tokens={tokens} and max_len={self.max_len} must hold at least one "
                                 f"page of page_size={self.page_size} tokens; raise them or set prefix_cache=False")
            self._pool = PagePool(tokens // self.page_size, self.page_size, (L, self.num_slots, K, self.max_len, hd),
                                  dtype, self._placement, owner=self._uid)
            self._index = RadixIndex(self._pool.num_pages, self.page_size)
        self._init_scheduler()

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
        if self.deterministic and params.seed is None and not params.is_greedy:
            raise ValueError(f"engine {self.name!r} is deterministic: a sampled request needs SamplingParams.seed "
                             "(a seed drawn from the engine would depend on the order requests arrive)")
        seed = int(params.seed) if params.seed is not None else int(self._rng.integers(0, 2**32))
        req = Request(rid, prompt.astype(np.int32), params, seed % 2**32, frozenset(stop_ids), loop.create_future())
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
            "cache_capacity": self._capacity, "deterministic": self.deterministic,
        }

    async def warmup(self) -> dict[str, int]:
        """Compile every program the engine can ever run, before the first request, so that no later request
        waits for a compilation whatever its length: the prefill at every context bucket and its row copies,
        the decode step, the page copies at every capacity, and the resizes between every two capacities.
        Each call runs once on placeholder inputs in free rows (nothing a request reads). Returns the compile
        counts. Optional: without it each program compiles when a request first needs it (on SmolLM2 about
        1 s a program, ~11 the first time a request reaches a new capacity bucket)."""
        if self.is_vl:
            raise ValueError(f"engine {self.name!r}: warmup() covers text models (a VL prefill's programs follow "
                             "its images' patch buckets)")
        if any(r is not None for r in self._slots) or self._queue or self._closed:
            raise RuntimeError(f"engine {self.name!r}: warmup() needs an idle, open engine (call it before generate)")
        await asyncio.get_running_loop().run_in_executor(self._executor, self._warm_programs)
        return self.compile_counts()

    def _warm_programs(self) -> None:
        """Device thread: every program of `warmup`, on placeholder inputs in free rows."""
        caps = [self.max_len] if self.deterministic else list(self.buckets)
        start = self._capacity
        sampling = (np.uint32(0), np.float32(1.0), np.int32(-1), np.float32(1.0), np.bool_(True))
        with self._mesh_ctx():
            for cap in caps:
                for other in caps:  # every resize the scheduler can ask for: cap -> other
                    if other != cap:
                        self._set_capacity(cap)
                        self._set_capacity(other)
                self._set_capacity(cap)
                per_slot = (self._tok, self._pos, self._seed, self._count, self._temp, self._top_k, self._top_p,
                            self._greedy)
                by_row = (np.zeros(self.num_slots, np.int32), np.int32(0)) if self.deterministic else ()
                self._cache, _, _ = self._decode(self._params, self._cache, *by_row, *(a.copy() for a in per_slot))
                for width in self.prefill_widths:  # the (width, context) pairs `_prefill_chunk` can use
                    for ctx in (b for b in self.buckets if width <= b <= cap):
                        row = self._get_row(self._cache, np.int32(0), ctx)
                        row, _, _ = self._prefill(self._params, row, np.zeros((1, width), np.int32), np.int32(0),
                                                  np.int32(1), *sampling)
                        self._cache = self._put_row(self._cache, row, np.int32(0))
                if self._pool is not None:
                    self._pool.store(self._cache, 0, [], [])
                    self._cache = self._pool.load(self._cache, 0, [])
            self._set_capacity(start)
            jax.block_until_ready(self._cache)

    def compile_counts(self) -> dict[str, int]:
        """XLA compilations of this engine's programs so far (prefill: one per (chunk width, context bucket)
        used; decode: one per cache capacity; row: the prefill's row copies, per (capacity, context) pair; resize: capacity
        changes; the prefix cache's page copies: one per capacity), counted from JAX's own compile events, so
        any recompilation shows up."""
        return compile_counts(self._uid, ("prefill", "decode", "row", "resize", "store", "load"))
