"""Play every scripted demonstration in every action grammar in real Chromium and print, per grammar, how many
were tried and how many succeeded (MiniWoB++ solvable tasks x seeds, and every local-site task).

    python scripts/check_demonstrations.py --seeds 1,2,3 --concurrency 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs import site_solutions  # noqa: E402
from envs.local_sites import LocalSitesSuite  # noqa: E402
from envs.miniwob import MiniWoBSuite  # noqa: E402
from envs.miniwob_solvers import SOLVABLE, plan  # noqa: E402
from jaxwebrl.browser import BrowserPool, EnvConfig, PoolConfig  # noqa: E402
from jaxwebrl.demos.collect import collect_demonstrations  # noqa: E402

PAIRS = (("webarena", "browseragent"), ("webagent_r1", "webagent_r1"), ("bid", "bid"), ("openwebrl", "openwebrl"))


async def run(seeds: list[int], concurrency: int) -> dict:
    miniwob, sites = MiniWoBSuite().start(), LocalSitesSuite().start()
    results: dict = {}
    try:
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=concurrency), EnvConfig()) as pool:
            for space, fmt in PAIRS:
                cfg = EnvConfig(action_space=space)
                t0 = time.time()
                mw = await collect_demonstrations(pool, cfg, [miniwob.get_task(f"miniwob.{t}") for t in SOLVABLE], seeds,
                                                  plan, fmt, concurrency=concurrency, only_successful=False)
                st = await collect_demonstrations(pool, cfg, [sites.get_task(t) for t in sorted(site_solutions.SOLUTIONS)],
                                                  [0], site_solutions.plan, fmt, concurrency=concurrency,
                                                  only_successful=False)
                results[space] = {
                    "miniwob": [len(mw), sum(d.success for d in mw)],
                    "local_sites": [len(st), sum(d.success for d in st)],
                    "failures": [(d.task_id, d.seed, d.error) for d in mw + st if not d.success],
                    "seconds": round(time.time() - t0, 1),
                }
                print(space, json.dumps(results[space]), flush=True)
    finally:
        miniwob.stop()
        sites.stop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args()
    res = asyncio.run(run([int(s) for s in args.seeds.split(",")], args.concurrency))
    print("| action space | MiniWoB++ tried / succeeded | local sites tried / succeeded |")
    print("|---|---|---|")
    for space, r in res.items():
        print(f"| {space} | {r['miniwob'][0]} / {r['miniwob'][1]} | {r['local_sites'][0]} / {r['local_sites'][1]} |")


if __name__ == "__main__":
    main()
