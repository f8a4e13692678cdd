#!/usr/bin/env python3
"""Generated tokens/s of JaxEngine vs batched `transformers.generate` vs an sglang-jax server, same model,
same requests, EOS disabled everywhere so every request generates exactly `--new-tokens` tokens.

Workloads (`--workload`):
- `mixed`: N concurrent requests with prompts of random length (`--min-prompt`..`--max-prompt`), all
  different, one turn: no prefix is shared, so it measures prefill + decode alone.
- `grpo`: the RL rollout shape. `--groups` groups of `--group-size` identical prompts (a GRPO group; each
  group's length drawn from `--min-prompt`..`--max-prompt`), all concurrent; then a second turn where each
  request's prompt is its first prompt + the response it got + its own new observation tokens
  (`--min-ext`..`--max-ext`), as an agent's next turn. Prefix caches (the JaxEngine's, sglang-jax's
  radix cache) reuse the group's prompt and the first turn's context; `transformers.generate` recomputes them.
  The JaxEngine runs with its prefix cache on and off (`--jax-cache`).

The model is a random Qwen3 (default 8 layers, hidden 512, 4 heads of head_dim 128 -- sglang-jax needs
head_dim 128) written as a HF checkpoint that all three load, or `--checkpoint DIR` (any HF checkpoint
directory, or `smollm2`: the pretrained SmolLM2-135M-Instruct, fetched and converted once by
`jaxwebrl.models.pretrained`). Each engine runs the workload once to warm up (XLA compiles, torch
allocations), then `--rounds` timed rounds, every engine once per round in turn. Every load (the warm-up's
and each round's) draws its own prompt lengths and tokens, as an RL run's pages change from round to round:
the timed rounds see lengths the warm-up did not, so programs compiled for new lengths show up in the rounds'
compile counts (`--jax-warmup` compiles every program first, `JaxEngine.warmup`, and says how many), and no
prefix cache carries one round's work into the next. Greedy decoding, fp32, the same
generated-token count for every engine. Each round reports wall seconds and this process's CPU seconds
(transformers and the JaxEngine run here; on a machine shared with other jobs the CPU seconds say how much
work each side did).

  .venv/bin/python benchmarks/bench_engine.py                  # mixed, all three (sglang needs .venv-sglang)
  .venv/bin/python benchmarks/bench_engine.py --skip-sglang --requests 8
  .venv/bin/python benchmarks/bench_engine.py --workload grpo  # 4 groups x 4, prompts 300-2000, two turns
  .venv/bin/python benchmarks/bench_engine.py --checkpoint smollm2 --skip-sglang --requests 8 \
      --min-prompt 150 --max-prompt 700 --new-tokens 48 --rounds 3 --max-len 1024 --torch-threads 1  # issue 41
  .venv/bin/python benchmarks/bench_engine.py --checkpoint smollm2 --skip-sglang --workload grpo --groups 2 \
      --group-size 4 --min-prompt 300 --max-prompt 600 --min-ext 32 --max-ext 128 --new-tokens 48 --rounds 3 \
      --max-len 1024 --jax-cache on --torch-threads 1 --jax-warmup   # issue 41's shared-prefix workload
(run under `taskset -c 0` on a machine other jobs share: one core each side, in turn.) `--program-times` adds
where the JaxEngine's time goes, by program kind, each round (`program_times.py`).
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from jaxwebrl.engines import JaxEngine, SamplingParams, SGLangEngine, SGLangServer  # noqa: E402
from jaxwebrl.engines.sglang_server import default_sglang_jax_python  # noqa: E402
from jaxwebrl.models import ModelConfig  # noqa: E402
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config  # noqa: E402

from checkpoint_arg import resolve_checkpoint  # noqa: E402
from interleave import await_timed, call_timed  # noqa: E402
from program_times import ProgramTimes, describe, since  # noqa: E402


@dataclasses.dataclass
class Load:
    """The requests of one run: first-turn prompts, and for a second turn each request's extension."""

    prompts: list[list[int]]
    extensions: list[list[int]] | None = None  # grpo: turn 2 = prompt + response + extension

    @property
    def turns(self) -> int:
        return 1 if self.extensions is None else 2

    def prompts_for(self, turn: int, outputs: list[list[int]]) -> list[list[int]]:
        if turn == 0:
            return self.prompts
        assert self.extensions is not None
        return [p + o + e for p, o, e in zip(self.prompts, outputs, self.extensions)]

    def max_context(self, new_tokens: int) -> int:
        """Longest prompt + new tokens over the turns."""
        ext = max(map(len, self.extensions)) + new_tokens if self.extensions else 0
        return max(map(len, self.prompts)) + new_tokens + ext

    def describe(self, args: argparse.Namespace) -> str:
        if self.extensions is None:
            return (f"{len(self.prompts)} concurrent requests, prompts {args.min_prompt}-{args.max_prompt} tokens "
                    f"(sum {sum(map(len, self.prompts))}), one turn")
        lens = sorted({len(p) for p in self.prompts})
        return (f"{args.groups} groups x {args.group_size} identical prompts (lengths {lens}), then a second turn "
                f"each: prompt + response + {args.min_ext}-{args.max_ext} new tokens "
                f"(sum {sum(map(len, self.extensions or []))}); {len(self.prompts)} concurrent requests per turn")


def workload(args: argparse.Namespace, vocab: int) -> list[Load]:
    """The warm-up load, then one timed load per round, each with its own prompt lengths and tokens: the
    rounds' lengths differ from the warm-up's (a new length must not mean a new program) and no prefix cache
    carries one run's work into another."""
    rng = np.random.default_rng(args.seed)

    def tokens(n: int) -> list[int]:
        return list(map(int, rng.integers(3, vocab, n)))

    def mixed() -> Load:
        return Load([tokens(int(n)) for n in rng.integers(args.min_prompt, args.max_prompt + 1, args.requests)])

    def grpo() -> Load:
        lengths = [int(n) for n in rng.integers(args.min_prompt, args.max_prompt + 1, args.groups)]
        ext = [int(n) for n in rng.integers(args.min_ext, args.max_ext + 1, args.groups * args.group_size)]
        prompts = [p for n in lengths for p in [tokens(n)] * args.group_size]
        return Load(prompts, [tokens(n) for n in ext])

    return [(mixed if args.workload == "mixed" else grpo)() for _ in range(1 + args.rounds)]


class Runner(abc.ABC):
    """One engine under test: `start`, then `run(load)` any number of times (each returns seconds, generated
    tokens and the prompt tokens it prefilled / reused where the engine says), then `stop`."""

    name = ""

    async def start(self) -> None: ...

    @abc.abstractmethod
    async def run(self, load: Load) -> dict[str, float]: ...

    async def stop(self) -> None: ...


async def _generate_turns(engine: Any, load: Load, sp: SamplingParams) -> tuple[float, int]:
    async def turns() -> int:
        outputs: list[list[int]] = []
        tokens = 0
        for turn in range(load.turns):
            gens = await asyncio.gather(*(engine.generate(p, sp) for p in load.prompts_for(turn, outputs)))
            outputs = [g.token_ids for g in gens]
            tokens += sum(map(len, outputs))
        return tokens

    return await await_timed(turns())


class JaxRunner(Runner):
    def __init__(self, path: Path, args: argparse.Namespace, max_len: int, slots: int, prefix_cache: bool) -> None:
        self.name = "jax" if prefix_cache else "jax_nocache"
        self.engine = JaxEngine.from_checkpoint(path, num_slots=slots, max_len=max_len, prefix_cache=prefix_cache,
                                                prefill_chunk=args.prefill_chunk, prefill_budget=args.prefill_budget,
                                                prefill_min_chunk=args.prefill_min_chunk)
        self.sp = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)
        self.warmup = args.jax_warmup
        self.times = ProgramTimes() if args.program_times else None

    async def start(self) -> None:
        if self.warmup:  # every program compiled before any request (JaxEngine.warmup)
            t = time.perf_counter()
            counts = await self.engine.warmup()
            print(f"  {self.name}: warmup() compiled {sum(counts.values())} programs in {time.perf_counter() - t:.1f}s "
                  f"{counts}", flush=True)

    async def run(self, load: Load) -> dict[str, Any]:
        before, compiled = self.engine.stats(), sum(self.engine.compile_counts().values())
        cpu = time.process_time()
        if self.times is None:
            seconds, tokens = await _generate_turns(self.engine, load, self.sp)
        else:
            with self.times:
                start = self.times.snapshot()
                seconds, tokens = await _generate_turns(self.engine, load, self.sp)
                programs = since(start, self.times.snapshot())
        cpu = time.process_time() - cpu
        after = self.engine.stats()
        # programs compiled during this run (the counts are cumulative over the engine's life)
        out: dict[str, Any] = {"s": seconds, "cpu_s": cpu, "tokens": tokens,
                               "compiles": sum(self.engine.compile_counts().values()) - compiled,
                               "prefilled": after["prefill_tokens"] - before["prefill_tokens"],
                               "reused": after["cached_tokens"] - before["cached_tokens"]}
        if self.times is not None:
            out["programs"] = {k: {"calls": n, "s": round(t, 3)} for k, (n, t) in programs.items()}
            print(f"  {self.name} program time by kind: {describe(programs)}", flush=True)
        return out

    async def stop(self) -> None:
        await self.engine.close()


class TransformersRunner(Runner):
    """Batched `generate` over each turn's requests (left-padded), as a user without a serving engine would."""

    name = "transformers"

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        import torch
        import transformers

        torch.set_num_threads(args.torch_threads or os.cpu_count() or 1)
        self.torch = torch
        self.model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.new_tokens = args.new_tokens

    def _generate(self, batch: list[list[int]]) -> list[list[int]]:
        torch, pad = self.torch, 0
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(batch):  # left padding, as decoder-only generate expects
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        with torch.no_grad():
            out = self.model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=self.new_tokens,
                                      min_new_tokens=self.new_tokens, pad_token_id=pad)
        return out[:, width:].tolist()

    async def run(self, load: Load) -> dict[str, float]:
        def turns() -> int:
            outputs: list[list[int]] = []
            tokens = 0
            for turn in range(load.turns):
                outputs = self._generate(load.prompts_for(turn, outputs))
                tokens += sum(map(len, outputs))
            return tokens

        cpu = time.process_time()
        seconds, tokens = call_timed(turns)
        return {"s": seconds, "cpu_s": time.process_time() - cpu, "tokens": tokens}


def _sglang_cached_tokens(log: str) -> int:
    """Prompt tokens the server took from its radix cache, from its prefill log lines."""
    return sum(int(m) for m in re.findall(r"#cached-token: (\d+)", log))


class SGLangRunner(Runner):
    """An sglang-jax server (radix cache on, its default) on loopback, through our SGLangEngine client."""

    name = "sglang_jax"

    def __init__(self, path: Path, args: argparse.Namespace, max_context: int, slots: int, python: str) -> None:
        ctx = 1 << max_context.bit_length()
        self.server = SGLangServer(path, device="cpu", python=python, context_length=ctx, max_running_requests=slots,
                                   max_total_tokens=max(8192, slots * ctx))
        self.sp = SamplingParams(greedy=True, max_new_tokens=args.new_tokens, ignore_eos=True)
        self.engine: Any = None
        self.startup_s = 0.0

    async def start(self) -> None:
        async def start_server() -> None:
            await asyncio.get_running_loop().run_in_executor(None, self.server.start)

        self.startup_s, _ = await await_timed(start_server())
        self.engine = SGLangEngine(self.server.url)

    def _cached(self) -> int:
        return _sglang_cached_tokens(self.server.log_path.read_text(errors="replace"))

    async def run(self, load: Load) -> dict[str, float]:
        before = self._cached()
        seconds, tokens = await _generate_turns(self.engine, load, self.sp)
        return {"s": seconds, "tokens": tokens, "reused": self._cached() - before}

    async def stop(self) -> None:
        if self.engine is not None:
            await self.engine.close()
        self.server.stop()


async def bench(runners: list[Runner], loads: list[Load]) -> dict[str, Any]:
    """Warm every runner on loads[0] (compiles, allocations), then time loads[1:] in rounds, every runner once
    per round, so a change in the machine's load falls on all of them alike. Each load has fresh tokens:
    no prefix cache carries one round's work into the next."""
    results: dict[str, Any] = {}
    try:
        for r in runners:
            await r.start()
            cold = await r.run(loads[0])
            results[r.name] = {"cold_s": cold["s"], "cold_compiles": cold.get("compiles"), "rounds": []}
            compiled = f", {cold['compiles']} programs compiled" if "compiles" in cold else ""
            print(f"  {r.name}: warmed up in {cold['s']:.1f}s{compiled} (loadavg {os.getloadavg()[0]:.1f})", flush=True)
        for i, load in enumerate(loads[1:]):
            for r in runners:
                out = await r.run(load)
                out["loadavg"] = os.getloadavg()[0]
                results[r.name]["rounds"].append(out)
                print(f"  round {i + 1} {r.name}: {out}", flush=True)
    finally:
        for r in runners:
            await r.stop()
    for r in runners:
        rounds = results[r.name]["rounds"]
        best = min(rounds, key=lambda o: o["s"])  # the least disturbed round
        results[r.name].update(best, warm_s=best["s"], tok_s=best["tokens"] / best["s"],
                               tok_s_rounds=[o["tokens"] / o["s"] for o in rounds],
                               cpu_s_rounds=[o["cpu_s"] for o in rounds if "cpu_s" in o],
                               compiles_rounds=[o["compiles"] for o in rounds if "compiles" in o])
        if isinstance(r, SGLangRunner):
            results[r.name]["startup_s"] = r.startup_s
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None,
                   help="a HF checkpoint directory, or a pretrained name (smollm2); default: a random Qwen3 of the "
                        "shape below")
    p.add_argument("--max-len", type=int, default=0, help="JaxEngine max_len (0: the longest context of the loads)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--intermediate", type=int, default=1536)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--workload", choices=("mixed", "grpo"), default="mixed")
    p.add_argument("--requests", type=int, default=16, help="mixed: concurrent requests")
    p.add_argument("--groups", type=int, default=4, help="grpo: groups of identical prompts")
    p.add_argument("--group-size", type=int, default=4, help="grpo: requests per group")
    p.add_argument("--min-ext", type=int, default=64, help="grpo: new tokens of the second turn, at least")
    p.add_argument("--max-ext", type=int, default=256, help="grpo: new tokens of the second turn, at most")
    p.add_argument("--jax-cache", choices=("on", "off", "both"), default=None,
                   help="JaxEngine prefix cache runs (default: both for grpo, on for mixed)")
    p.add_argument("--prefill-chunk", type=int, default=128, help="JaxEngine prefill chunk width")
    p.add_argument("--prefill-min-chunk", type=int, default=16,
                   help="JaxEngine: narrowest width of a prompt's last chunk (--prefill-chunk: every chunk full width)")
    p.add_argument("--prefill-budget", type=int, default=512, help="JaxEngine prompt tokens between decode steps")
    p.add_argument("--jax-warmup", action=argparse.BooleanOptionalAction, default=False,
                   help="call JaxEngine.warmup() before the warm-up load (every program compiled up front)")
    p.add_argument("--program-times", action="store_true",
                   help="JaxEngine: wait for every program call and report its time per kind (prefill, decode, "
                        "page load/store, row copy, resize) each round; the calls then no longer overlap the host")
    p.add_argument("--slots", type=int, default=0, help="engine slots / server max running requests (0: = requests)")
    p.add_argument("--min-prompt", type=int, default=None, help="default: 64 (mixed), 300 (grpo)")
    p.add_argument("--max-prompt", type=int, default=None, help="default: 512 (mixed), 2000 (grpo)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1, help="timed rounds (every engine once per round, interleaved)")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="transformers' threads (0: one per CPU core; on a machine other jobs load, 1 can be faster)")
    p.add_argument("--skip-jax", action="store_true")
    p.add_argument("--skip-sglang", action="store_true")
    p.add_argument("--skip-transformers", action="store_true")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    grpo = args.workload == "grpo"
    args.min_prompt = args.min_prompt if args.min_prompt is not None else (300 if grpo else 64)
    args.max_prompt = args.max_prompt if args.max_prompt is not None else (2000 if grpo else 512)

    with tempfile.TemporaryDirectory(prefix="bench_engine_") as tmp:
        if args.checkpoint:
            path = resolve_checkpoint(args.checkpoint)
            cfg = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
            name = f"{cfg.architecture} from {path}"
        else:
            cfg = tiny_config("qwen3", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                              num_kv_heads=args.kv_heads, head_dim=args.head_dim, intermediate_size=args.intermediate,
                              vocab_size=args.vocab, max_position_embeddings=4096)
            path = Path(tmp) / "model"
            cfg, _ = make_tiny_checkpoint(path, cfg, seed=0, std=0.05)
            name = "random qwen3"
        loads = workload(args, cfg.vocab_size)
        print(f"model: {name} L={cfg.num_layers} D={cfg.hidden_size} H={cfg.num_heads}x{cfg.head_dim} "
              f"KV={cfg.num_kv_heads} F={cfg.intermediate_size} V={cfg.vocab_size} params={cfg.num_params() / 1e6:.1f}M")
        print(f"load ({args.workload}): {loads[1].describe(args)}; {args.new_tokens} new tokens each, EOS disabled, "
              f"greedy, fp32; prompt lengths drawn anew for the warm-up and every round; {args.rounds} timed "
              f"round(s); {os.cpu_count()} CPU cores, loadavg {os.getloadavg()[0]:.1f}", flush=True)
        slots = args.slots or len(loads[1].prompts)
        max_context = max(load.max_context(args.new_tokens) for load in loads)
        if args.max_len and args.max_len < max_context:
            raise SystemExit(f"--max-len {args.max_len} is shorter than the longest context of the loads ({max_context})")
        runners: list[Runner] = []
        caches = {"on": [True], "off": [False], "both": [True, False]}[args.jax_cache or ("both" if grpo else "on")]
        for on in [] if args.skip_jax else caches:
            runners.append(JaxRunner(path, args, args.max_len or max_context, slots, prefix_cache=on))
        if not args.skip_transformers:
            runners.append(TransformersRunner(path, args))
        skipped: dict[str, str] = {}
        if not args.skip_sglang:
            python = default_sglang_jax_python()
            if python is None:
                skipped["sglang_jax"] = "skipped: no .venv-sglang (run scripts/setup_sglang_env.sh)"
            else:
                runners.append(SGLangRunner(path, args, max_context, slots, python))
        results: dict[str, Any] = asyncio.run(bench(runners, loads))
        results.update(skipped)

    print("\ngenerated tokens/s (best timed round; all rounds in brackets):")
    for name, r in results.items():
        if isinstance(r, dict):
            reuse = f"; prompt tokens reused {r['reused']}" if "reused" in r else ""
            reuse += f", prefilled {r['prefilled']}" if "prefilled" in r else ""
            rounds = ", ".join(f"{x:.1f}" for x in r["tok_s_rounds"])
            print(f"  {name:14s} {r['tok_s']:8.1f} tok/s [{rounds}]  ({r['tokens']} tokens in {r['warm_s']:.2f}s; "
                  f"warm-up {r['cold_s']:.2f}s{reuse})")
            if r.get("cpu_s_rounds"):
                print(f"  {'':14s} CPU seconds of this process per round: "
                      f"[{', '.join(f'{x:.1f}' for x in r['cpu_s_rounds'])}]")
            if r.get("compiles_rounds"):
                print(f"  {'':14s} programs compiled: warm-up {r['cold_compiles']}, then per round "
                      f"{r['compiles_rounds']}")
        else:
            print(f"  {name:14s} {r}")
    for ours in ("jax", "jax_nocache"):
        if ours not in results:
            continue
        for name in ("jax_nocache", "transformers", "sglang_jax"):
            if name != ours and isinstance(results.get(name), dict):
                per_round = [a / b for a, b in zip(results[ours]["tok_s_rounds"], results[name]["tok_s_rounds"])]
                print(f"  ratio {ours} / {name}: {results[ours]['tok_s'] / results[name]['tok_s']:.2f}x best rounds, "
                      f"{statistics.median(per_round):.2f}x median of rounds (round by round: "
                      f"{', '.join(f'{x:.2f}' for x in per_round)})")
    print(f"  loadavg after: {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
