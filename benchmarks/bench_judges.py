#!/usr/bin/env python3
"""Judging throughput and the cost of a judging barrier, in one run.

1. Judged trajectories/s for the same OpenWebRL judge (same checkpoint, same episodes) on the in-process
   JaxEngine vs an sglang-jax server (through /generate, SGLangEngine, which asks for logprobs) vs the same
   server through its OpenAI-compatible /v1/chat/completions (OpenAIChatEngine). Each side runs the whole
   workload once to warm up, then once timed.
2. Iteration time of a rollout batch whose episodes end at spread-out times (simulated: a sleep per episode,
   no browser) with judging overlapped (JudgeQueue: each episode judged as soon as it ends) vs judging every
   episode after the whole batch ended (a barrier), same judge (JaxEngine).

The judge is a random Qwen3 (default 4 layers, hidden 256, 2 heads of head_dim 128 -- sglang-jax needs 128)
written as a HF checkpoint with a tiny tokenizer;
its answers hold no verdict, so every verdict is judge_error 'unparsable' -- the work per judgment (prompt
prefill + max_new_tokens decode) is what is measured, not the judge's quality.

  .venv/bin/python benchmarks/bench_judges.py                 # all sides (sglang needs .venv-sglang)
  .venv/bin/python benchmarks/bench_judges.py --skip-sglang
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from jaxwebrl.data.records import Trajectory, Turn  # noqa: E402
from jaxwebrl.engines import JaxEngine, OpenAIChatEngine, SGLangEngine, SGLangServer  # noqa: E402
from jaxwebrl.engines.sglang_server import default_sglang_jax_python  # noqa: E402
from jaxwebrl.judges import (  # noqa: E402
    ChatBackend, EngineBackend, JudgeOptions, JudgeQueue, OpenWebRLJudge, rollout_and_judge,
)
from jaxwebrl.models import load_tokenizer  # noqa: E402
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config  # noqa: E402

from interleave import await_timed  # noqa: E402

SYSTEM = "You judge web agents. End with Verdict: SUCCESS or Verdict: NOT SUCCESS."


def episodes(n: int, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        steps = rng.randint(1, 4)
        turns = [Turn([1], [2], observation=f"[{k}] button \"Submit\" page {i}.{k}",
                      action=f'<think>x</think><tool_call>{{"name": "click", "arguments": {{"x": {k}, "y": 5}}}}</tool_call>')
                 for k in range(steps - 1)]
        turns.append(Turn([1], [2], observation=f"result page {i}",
                          action=f'<think>x</think><tool_call>{{"name": "done", "arguments": {{"answer": "{i}"}}}}</tool_call>'))
        out.append(Trajectory(f"task{i}", turns, termination="done",
                              metadata={"goal": f"Find the answer {i}", "feedback": ["Succeed: clicked"] * steps}))
    return out


async def throughput(judge: OpenWebRLJudge, trajs: list[Trajectory], concurrency: int) -> dict[str, float]:
    queue = JudgeQueue(judge, concurrency=concurrency)
    for t in trajs:  # warm-up: the whole workload once (XLA compiles per batch shape on both sides)
        queue.submit(t)
    await queue.join()

    async def judge_all() -> list[Any]:
        for t in trajs:
            queue.submit(t)
        return await queue.join()

    dt, results = await await_timed(judge_all())
    called = sum(v.called for _, v in results)
    return {"trajectories": len(results), "judged_calls": called, "seconds": dt, "traj_per_s": len(results) / dt,
            "mean_reply_chars": sum(len(v.text) for _, v in results) / len(results),
            "errors_other_than_unparsable": sum(v.error_kind not in (None, "unparsable") for _, v in results)}


async def overlap(judge: OpenWebRLJudge, trajs: list[Trajectory], span_s: float, concurrency: int) -> dict[str, float]:
    rng = random.Random(1)
    ends = [rng.uniform(0.1, span_s) for _ in trajs]

    async def episode(t: Trajectory, end: float) -> Trajectory:
        await asyncio.sleep(end)
        return t

    async def overlapped_run() -> None:
        await rollout_and_judge([episode(t, e) for t, e in zip(trajs, ends)], JudgeQueue(judge, concurrency=concurrency))

    async def barrier_run() -> None:
        done = await asyncio.gather(*(episode(t, e) for t, e in zip(trajs, ends)))
        queue = JudgeQueue(judge, concurrency=concurrency)
        for t in done:
            queue.submit(t)
        await queue.join()

    overlapped, _ = await await_timed(overlapped_run())
    barrier, _ = await await_timed(barrier_run())
    return {"rollout_span_s": span_s, "overlapped_s": overlapped, "barrier_s": barrier,
            "barrier_over_overlapped": barrier / overlapped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--span", type=float, default=20.0, help="episodes end uniformly within this many seconds")
    ap.add_argument("--skip-sglang", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    path = Path(tempfile.mkdtemp(prefix="bench_judge_ckpt_"))
    from judge_fixtures import CORPUS

    model = tiny_config("qwen3", head_dim=128, num_heads=2, num_kv_heads=1, num_layers=args.layers,
                        hidden_size=args.hidden, intermediate_size=2 * args.hidden)
    cfg, _ = make_tiny_checkpoint(path, model, seed=0, std=0.3, corpus=CORPUS)
    tok = load_tokenizer(path)
    opts = JudgeOptions(max_new_tokens=args.max_new_tokens, retries=0, concurrency=args.concurrency, timeout_s=600)
    trajs = episodes(args.episodes)
    report: dict[str, Any] = {"episodes": args.episodes, "concurrency": args.concurrency,
                              "max_new_tokens": args.max_new_tokens, "layers": args.layers, "hidden": args.hidden}

    async def run_jax() -> None:
        engine = JaxEngine.from_checkpoint(path, tokenizer=tok, num_slots=args.concurrency, max_len=1024)
        judge = OpenWebRLJudge(EngineBackend(engine, tok), opts, system_prompt=SYSTEM)
        try:
            report["jax"] = await throughput(judge, trajs, args.concurrency)
            report["overlap_jax"] = await overlap(judge, trajs, args.span, args.concurrency)
        finally:
            await judge.close()

    asyncio.run(run_jax())
    print(json.dumps({k: report[k] for k in ("jax", "overlap_jax")}, indent=1), flush=True)

    python = default_sglang_jax_python()
    if not args.skip_sglang and python and Path(python).exists():
        server = SGLangServer(path, device="cpu", python=python, max_running_requests=max(8, args.concurrency))
        server.start()
        try:
            async def run_sglang() -> None:
                for name, backend in (("sglang_generate", EngineBackend(SGLangEngine(server.url), tok)),
                                      ("sglang_chat", ChatBackend(OpenAIChatEngine(server.url), tokenizer=tok))):
                    judge = OpenWebRLJudge(backend, opts, system_prompt=SYSTEM)
                    try:
                        report[name] = await throughput(judge, trajs, args.concurrency)
                    finally:
                        await judge.close()

            asyncio.run(run_sglang())
        finally:
            server.stop()
        for name in ("sglang_generate", "sglang_chat"):
            report[f"ratio_jax_over_{name}"] = report["jax"]["traj_per_s"] / report[name]["traj_per_s"]
    else:
        report["sglang"] = "skipped (no .venv-sglang / --skip-sglang)"
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
