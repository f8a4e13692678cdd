"""Episode reset benchmark: MiniWoB++ resets per second with parked contexts (ours) against a fresh context
per episode (what BrowserGym's reset does), same browser, same tasks and seeds, side by side.

    python benchmarks/bench_reset.py [--episodes 60] [--concurrency 1,4] [--tasks click-button,...]

A reset is `env.reset(task, seed)` up to the first observation (page load, seeded start, element marking),
then one action so the episode is a real one; each worker plays its share of episodes back to back.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.miniwob import MiniWoBSuite  # noqa: E402
from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig  # noqa: E402

from interleave import await_timed  # noqa: E402

TASKS = ["click-button", "click-link", "click-option", "click-tab", "click-checkboxes", "focus-text"]
CFG = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", metadata=False))


async def episodes_per_s(suite: MiniWoBSuite, tasks: list[str], episodes: int, workers: int, reuse: bool) -> float:
    """Episodes per second with `workers` concurrent envs; reuse=False turns parking off (max_idle_contexts=0)."""
    pool_cfg = PoolConfig(contexts_per_browser=workers, max_idle_contexts=None if reuse else 0)
    async with BrowserPool(pool_cfg, CFG) as pool:

        async def worker(w: int) -> None:
            for i in range(w, episodes, workers):
                async with pool.episode(suite.get_task("miniwob." + tasks[i % len(tasks)]), i) as (env, obs):
                    await env.step("noop(wait_ms=0)")

        await worker(0)  # warm the page cache and the JS on both sides alike
        async def all_workers() -> None:
            await asyncio.gather(*(worker(w) for w in range(workers)))

        seconds, _ = await await_timed(all_workers())
        return episodes / seconds


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=60)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--tasks", default=",".join(TASKS))
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    suite = MiniWoBSuite(tasks=tasks).start()
    rows = []
    try:
        for n in (int(x) for x in args.concurrency.split(",")):
            fresh = await episodes_per_s(suite, tasks, args.episodes, n, reuse=False)
            parked = await episodes_per_s(suite, tasks, args.episodes, n, reuse=True)
            rows.append((n, parked, fresh))
    finally:
        suite.stop()
    print(f"\nMiniWoB++ reset + 1 step, {args.episodes} episodes per cell, 1 Chromium, {os.cpu_count()} CPUs")
    print("| concurrent envs | parked contexts (episodes/s) | fresh context per episode | ratio |")
    print("|---:|---:|---:|---:|")
    for n, parked, fresh in rows:
        print(f"| {n} | {parked:.2f} | {fresh:.2f} | {parked / fresh:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
