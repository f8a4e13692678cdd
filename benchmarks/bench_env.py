"""Environment throughput benchmark: steps/s and memory per context with 1, 4, 8, 16 concurrent contexts
on MiniWoB++ with random valid `bid` actions, one Chromium, printed as a table.

    python benchmarks/bench_env.py [--seconds 15] [--concurrency 1,4,8,16] [--tasks click-button,...]

Each worker loops: reset a random task with a fresh seed, take random valid actions on visible
interactive elements (click / fill / select_option) until the page ends the episode or 10 steps, repeat.
Memory is the proportional set size (PSS) of the browser's process tree, minus the idle browser,
divided by the number of open contexts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.miniwob import MiniWoBSuite  # noqa: E402
from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig  # noqa: E402

TASKS = ["click-button", "click-checkboxes", "enter-text", "choose-list", "login-user", "click-option",
         "click-tab", "focus-text"]


def random_action(rng: random.Random, obs) -> str:
    cands = [e for e in obs.elements if e.interactive and e.visible and e.in_viewport]
    if not cands:
        return "noop(wait_ms=10)"
    el = rng.choice(cands)
    if el.role in ("textbox", "searchbox"):
        return f"fill('{el.id}', {rng.choice(['abc', 'hello', 'x1'])!r})"
    if el.role == "combobox":
        opts = [o for o in obs.elements if o.role == "option" and o.depth > el.depth]
        if opts:
            return f"select_option('{el.id}', {rng.choice(opts).name!r})"
    return f"click('{el.id}')"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    return kids


def tree_pss_mb(root: int) -> float:
    kids, total, stack = _children(), 0, [root]
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


async def run_level(pool: BrowserPool, suite: MiniWoBSuite, n: int, seconds: float, tasks: list[str]) -> tuple[float, float, int]:
    cfg = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", metadata=False), action_timeout_s=2.0)
    envs = [await pool.new_env(cfg) for _ in range(n)]
    rngs = [random.Random(1000 + i) for i in range(n)]
    steps = [0] * n
    mem: list[float] = []
    stop_at = time.monotonic() + seconds
    seed_base = [i * 100_000 for i in range(n)]

    async def worker(i: int) -> None:
        env, rng = envs[i], rngs[i]
        ep = 0
        while time.monotonic() < stop_at:
            obs = await env.reset(suite.get_task("miniwob." + rng.choice(tasks)), seed_base[i] + ep)
            ep += 1
            for _ in range(10):
                r = await env.step(random_action(rng, obs))
                steps[i] += 1
                obs = r.observation
                if r.done or time.monotonic() >= stop_at:
                    break

    async def sampler() -> None:
        await asyncio.sleep(min(3.0, seconds / 2))
        pid = pool.browser_pids(0)[0]
        mem.append(await asyncio.to_thread(tree_pss_mb, pid))

    t0 = time.monotonic()
    await asyncio.gather(sampler(), *(worker(i) for i in range(n)))
    elapsed = time.monotonic() - t0
    for env in envs:
        await env.close()
    return sum(steps) / elapsed, mem[0] if mem else float("nan"), sum(steps)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--tasks", default=",".join(TASKS))
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    tasks = args.tasks.split(",")
    suite = MiniWoBSuite(tasks=tasks).start()
    try:
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=max(levels))) as pool:
            await asyncio.sleep(1.0)
            idle = tree_pss_mb(pool.browser_pids(0)[0])
            rows = []
            for n in levels:
                sps, pss, total = await run_level(pool, suite, n, args.seconds, tasks)
                rows.append((n, sps, total, pss, (pss - idle) / n))
                await asyncio.sleep(0.5)
    finally:
        suite.stop()
    print(f"\nMiniWoB++ random valid bid actions, 1 Chromium, {os.cpu_count()} CPUs, {args.seconds:g} s per level; "
          f"idle browser PSS {idle:.0f} MB")
    print("| contexts | steps/s | steps | browser PSS (MB) | MB per context |")
    print("|---------:|--------:|------:|-----------------:|---------------:|")
    for n, sps, total, pss, per in rows:
        print(f"| {n:8d} | {sps:7.2f} | {total:5d} | {pss:16.0f} | {per:14.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
