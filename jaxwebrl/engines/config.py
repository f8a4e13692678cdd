"""The `engine` config section: which engine generates the rollouts and how it is reached.

`type="jax"`: the in-process JaxEngine on the trainer's params (continuous batching over a KV cache, a
prefix cache of KV pages that requests sharing a prompt prefix reuse, chunked prefill).
`type="sglang"`: SGLang servers at `url` / `urls` (several -> a Router), or one the run launches on
`checkpoint` (`launch=True`, with the `server` options). `weight_sync` says how new params reach a server:
"disk" (default) exports them and the running server loads them in place through SGLang's
`/update_weights_from_disk`, no restart: CUDA SGLang natively, sglang-jax through `sglang_jax_worker.py`, which
`launch=True` starts (or scripts/launch_sglang.py --weight-reload); "restart" restarts a launched server on the
export (any server, slow).
"""

from __future__ import annotations

import dataclasses

from jaxwebrl.fields import FieldError, at_least, comma_list, one_of, positive

ENGINE_TYPES = ("jax", "sglang")
WEIGHT_SYNC = ("disk", "restart")  # disk: export + in-place /update_weights_from_disk | restart: relaunch the server
DEVICES = ("", "cpu", "tpu", "gpu")


@dataclasses.dataclass(frozen=True)
class SGLangServerConfig:
    """Options of a server the run launches (`engine.launch=True`); 0 / '' = the server's default."""

    device: str = ""  # cpu | tpu | gpu ('' = detect)
    port: int = 0
    python: str = ""  # interpreter with the server package ('' = .venv-sglang for sglang-jax)
    context_length: int = 0
    max_total_tokens: int = 0
    max_running_requests: int = 0
    tp_size: int = 0
    extra_args: str = ""  # extra command-line arguments, space-separated

    def __post_init__(self) -> None:
        one_of("device", self.device, DEVICES)

    def kwargs(self) -> dict[str, object]:
        """Keyword arguments of `SGLangServer` (unset options left to its defaults)."""
        out: dict[str, object] = {k: v for k, v in dataclasses.asdict(self).items() if v and k != "extra_args"}
        out["extra_args"] = tuple(self.extra_args.split())
        return out


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    type: str = "jax"  # jax | sglang
    num_slots: int = 8  # jax: concurrent sequences in the KV cache
    max_len: int = 4096  # jax: KV-cache length per slot
    prefix_cache: bool = True  # jax: reuse the keys and values of cached prompt prefixes (text models)
    prefix_cache_tokens: int = 0  # jax: tokens the prefix cache holds (0: num_slots * max_len, as the slots)
    page_size: int = 16  # jax: tokens per cached block (prefixes are reused in whole blocks)
    prefill_chunk: int = 128  # jax: width of a prefill chunk
    # jax: the narrowest a prompt's last chunk may be: it is padded to the first of this, twice this, ... (below
    # prefill_chunk), prefill_chunk that holds it (one program per width and context; prefill_min_chunk=
    # prefill_chunk pads every last chunk to the full width)
    prefill_min_chunk: int = 16
    prefill_budget: int = 512  # jax: prompt tokens prefilled between two decode steps
    # jax: a request's tokens and logprobs do not depend on what else is in flight (chunks on a fixed grid,
    # fixed decode capacity, slot-by-slot decode, prefix reuse in whole chunks; jax_scheduler's doc).
    # rl.schedule='deterministic' turns it on.
    deterministic: bool = False
    seed: int = 0
    checkpoint: str = ""  # HF dir: the JaxEngine's model when no params are given; a launched server's start
    url: str = ""  # sglang: one server
    urls: str = ""  # sglang: several servers, comma-separated (requests spread by a Router)
    launch: bool = False  # sglang: start a server on `checkpoint` (or the current policy) and own it
    weight_sync: str = "disk"
    export_dir: str = ""  # where params are exported for servers to load (shared filesystem for remote ones)
    request_timeout: float = 600.0
    retries: int = 3
    server: SGLangServerConfig = dataclasses.field(default_factory=SGLangServerConfig)

    def __post_init__(self) -> None:
        one_of("type", self.type, ENGINE_TYPES)
        one_of("weight_sync", self.weight_sync, WEIGHT_SYNC)
        at_least("num_slots", self.num_slots, 1)
        at_least("max_len", self.max_len, 16)
        at_least("prefix_cache_tokens", self.prefix_cache_tokens, 0)
        at_least("page_size", self.page_size, 1)
        at_least("prefill_chunk", self.prefill_chunk, 1)
        at_least("prefill_min_chunk", self.prefill_min_chunk, 1)
        at_least("prefill_budget", self.prefill_budget, 1)
        if self.prefix_cache and self.page_size > self.max_len:
            raise FieldError("page_size", f"{self.page_size} exceeds max_len={self.max_len}",
                             "use a page_size of at most max_len (16 is a good default)")
        if self.prefix_cache and 0 < self.prefix_cache_tokens < self.page_size:
            raise FieldError("prefix_cache_tokens", f"{self.prefix_cache_tokens} is less than one page "
                             f"(page_size={self.page_size})", "raise it, or set engine.prefix_cache=False")
        if self.deterministic and (self.max_len % self.prefill_chunk
                                   or (self.prefix_cache and self.prefill_chunk % self.page_size)):
            raise FieldError("prefill_chunk", f"{self.prefill_chunk} with deterministic=True must divide max_len="
                             f"{self.max_len} and be a multiple of page_size={self.page_size}",
                             "use e.g. prefill_chunk=128 (prompts are cut on a fixed grid of whole chunks)")
        at_least("retries", self.retries, 0)
        positive("request_timeout", self.request_timeout)
        if self.type == "sglang" and self.weight_sync == "restart" and not self.launch:
            raise FieldError("weight_sync", "'restart' needs engine.launch=True (the engine must own the server)",
                             "set engine.launch=True or weight_sync='disk'")

    def jax_kwargs(self) -> dict[str, object]:
        """Keyword arguments of `JaxEngine` (and `JaxEngine.from_checkpoint`) this section sets."""
        return dict(num_slots=self.num_slots, max_len=self.max_len or None, seed=self.seed,
                    prefix_cache=self.prefix_cache, prefix_cache_tokens=self.prefix_cache_tokens or None,
                    page_size=self.page_size, prefill_chunk=self.prefill_chunk, prefill_budget=self.prefill_budget,
                    prefill_min_chunk=self.prefill_min_chunk, deterministic=self.deterministic)

    @property
    def server_urls(self) -> list[str]:
        return comma_list(self.urls) or ([self.url] if self.url else [])
