"""Episodes per minute of asynchronous vs lock-step collection on MiniWoB++, same policy and engine.

    python scripts/bench_rollout.py [--contexts 8 16] [--episodes 32] [--max-steps 4]

For each number of concurrent contexts it runs the same task stream twice through `Collector`: `async`
(groups leave as they finish, freed contexts refilled at once) and `lockstep` (all environments step
together, the next batch starts when the slowest episode ends). The policy is a random tiny model served by
the JaxEngine; its episode lengths vary (steps 1..max-steps drawn per task), which is what makes the
barrier cost. Prints episodes/min of both, the ratio, and where the time went (browser, engine, waiting).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from envs import get_suite
from jaxwebrl.agent import AgentConfig
from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig
from jaxwebrl.engines.jax_engine import JaxEngine
from jaxwebrl.models import load_hf, load_tokenizer
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
from jaxwebrl.rollout import Collector, RolloutConfig

TASKS = ["click-button", "click-link", "click-dialog", "click-checkboxes", "focus-text", "click-tab"]


async def run(mode: str, contexts: int, episodes: int, max_steps: int, cfg, params, tok, suite) -> dict:
    env_cfg = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=400))
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=max_steps, max_format_errors=100,
                        max_new_tokens=8, max_context_tokens=2048)
    rng = np.random.default_rng(0)
    tasks = [suite.get_task(t) for t in suite.task_ids("all")]
    order = rng.permutation(episodes // 2)
    stream = [(tasks[i % len(tasks)], int(i)) for i in order]
    steps = {t.task_id: 1 + k % max_steps for k, t in enumerate(tasks)}  # episode lengths 1..max_steps
    engine = JaxEngine(cfg, params, num_slots=contexts, max_len=2048, tokenizer=tok, buckets=(256, 512, 1024, 2048))
    # Compile every program before timing.
    await asyncio.gather(*(engine.generate([1] * n, agent.sampling(None, 8)) for n in (100, 300, 600, 1200)))
    async with BrowserPool(PoolConfig(num_browsers=max(1, contexts // 8), contexts_per_browser=min(contexts, 8)), env_cfg) as pool:
        await pool.wait_ready()
        col = Collector(pool, engine, tok, env_cfg, agent,
                        RolloutConfig(group_size=2, mode=mode, max_concurrent_groups=contexts // 2))
        t0 = time.perf_counter()
        groups, stats = await col.collect(
            iter(stream), num_groups=len(stream),
            agent_for=lambda task: dataclasses.replace(agent, max_steps=steps[task.task_id]))
        wall = time.perf_counter() - t0
    await engine.close()
    n = sum(len(g.episodes) for g in groups)
    return {"episodes": n, "wall_s": wall, "per_min": 60 * n / wall, "time": stats.time}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        make_tiny_checkpoint(d, tiny_config("qwen3", vocab_size=512, max_position_embeddings=2048))
        cfg, params = load_hf(d)
        tok = load_tokenizer(d)
    suite = get_suite("miniwob", tasks=TASKS).start()
    try:
        print(f"{'contexts':>8} {'mode':>9} {'episodes':>8} {'wall s':>8} {'ep/min':>8} "
              f"{'browser s':>9} {'engine s':>9} {'wait s':>8}")
        for c in args.contexts:
            res = {}
            for mode in ("async", "lockstep"):
                r = asyncio.run(run(mode, c, args.episodes, args.max_steps, cfg, params, tok, suite))
                res[mode] = r
                t = r["time"]
                print(f"{c:>8} {mode:>9} {r['episodes']:>8} {r['wall_s']:>8.1f} {r['per_min']:>8.1f} "
                      f"{t.get('browser', 0):>9.1f} {t.get('engine', 0):>9.1f} {t.get('wait', 0):>8.1f}")
            print(f"{c:>8} ratio async/lockstep: {res['async']['per_min'] / res['lockstep']['per_min']:.2f}x")
    finally:
        suite.stop()


if __name__ == "__main__":
    main()
