"""Episodes per minute of asynchronous vs lock-step collection when environment time is waiting (web latency).

    python benchmarks/bench_rollout.py [--contexts 8 32 128] [--episodes-per-context 2] [--max-steps 4]
                                    [--latency lognormal:median=1.0,p90=3.0,max=20 | webgym] [--group-size 1]

Workload: the local sites (shop, wiki) serve every page after a heavy-tailed server-side delay
(envs/sites/latency.py: lognormal, median 1 s, 90th percentile 3 s by default), on the request's own thread, so
an environment step is mostly waiting on the network as on live websites, not CPU this machine may lack.

Policy: the JaxEngine serving a tiny random Qwen3 decodes `--new-tokens` tokens for every step (ignore_eos: a
fixed amount of engine work per step); a scripted navigator behind the Engine protocol turns each answer into
a click on a random link of the current page, so every step loads a page from the delayed server (a random
model's own text would rarely parse as an action). Episodes last 1..max_steps steps by task; the same task
stream runs through `Collector` twice: `async` (groups leave as they finish, freed contexts refilled at once)
and `lockstep` (every environment steps together and waits for the slowest, the next batch starts when the
whole batch ended).

Printed per level: episodes/min of both and the ratio; the engine's busy fraction (share of the wall time
with at least one request in flight: the JaxEngine decodes whenever it holds one); where episode time went;
browser memory per context (PSS of the browser process trees at the level's peak, minus idle, per context).
A level whose browsers would not fit in the memory this machine has free is skipped with the estimate.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import re
import sys
import tempfile
import time
from typing import Any, Sequence

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np

from bench_env import _children, tree_pss_mb
from envs import get_suite
from envs.sites.latency import PageLatency
from jaxwebrl.agent import AgentConfig
from jaxwebrl.browser import BrowserPool, EnvConfig, ObsConfig, PoolConfig
from jaxwebrl.engines.base import Generation, SamplingParams
from jaxwebrl.engines.jax_engine import JaxEngine
from jaxwebrl.models import load_hf, load_tokenizer
from jaxwebrl.models.tiny import make_tiny_checkpoint, tiny_config
from jaxwebrl.rollout import Collector, RolloutConfig

CONTEXTS_PER_BROWSER = 32
LINK = re.compile(r"\[(\w+)\] link ")


class Navigator:
    """Engine protocol. The wrapped engine does an answer's work; the answer becomes `click` on a random link
    of the page the prompt ends with. Counts the time with at least one request in flight (engine busy)."""

    name = "navigator"

    def __init__(self, engine: JaxEngine, tokenizer: Any, seed: int = 0):
        self.engine, self.tokenizer = engine, tokenizer
        self.rng = np.random.default_rng(seed)
        self.in_flight, self.busy_s, self._since = 0, 0.0, 0.0
        self.tokens = 0

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *, session_id: str | None = None) -> Generation:
        if self.in_flight == 0:
            self._since = time.perf_counter()
        self.in_flight += 1
        try:
            gen = await self.engine.generate(prompt_ids, dataclasses.replace(params, ignore_eos=True), session_id=session_id)
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += time.perf_counter() - self._since
        self.tokens += len(gen.token_ids)
        page = self.tokenizer.decode(list(prompt_ids)).rsplit("RootWebArea", 1)[-1]
        links = LINK.findall(page)
        action = f"click('{self.rng.choice(links)}')" if links else "scroll(0, 200)"
        ids = self.tokenizer.encode(action, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Generation(ids, [0.0] * len(ids), "stop", len(prompt_ids), gen.policy_version, gen.final_policy_version,
                          engine=self.name)

    async def update_weights(self, weights: Any, version: int) -> None:
        await self.engine.update_weights(weights, version)

    async def health(self) -> dict[str, Any]:
        return await self.engine.health()

    async def close(self) -> None:
        await self.engine.close()


def pool_pss_mb(pool: BrowserPool) -> float:
    return sum(tree_pss_mb(pid) for i in range(len(pool.slots)) for pid in pool.browser_pids(i))


def cpu_seconds() -> tuple[float, float]:
    """(this process, its child processes: Playwright's driver, the browsers and their renderers) CPU seconds,
    counting children that already exited through their parents' cumulative times."""
    tick = os.sysconf("SC_CLK_TCK")
    kids, stack, children = _children(), list(_children().get(os.getpid(), [])), 0.0
    while stack:
        pid = stack.pop()
        stack.extend(kids.get(pid, []))
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            children += sum(int(v) for v in fields[11:15]) / tick  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            pass
    me = os.times()
    return me.user + me.system, children


def mem_available_mb() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(mode: str, contexts: int, args: argparse.Namespace, cfg: Any, params: Any, tok: Any, suite: Any) -> dict:
    # the longest page wait must fit in an action (and a step): a capped page is slow, not an environment error
    cap = args.page_latency.max_s if args.page_latency else 0.0
    env_cfg = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=1200, metadata=False),
                        action_timeout_s=max(30.0, cap + 15.0), step_timeout_s=max(45.0, cap + 45.0))
    agent = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=args.max_steps, max_format_errors=100,
                        max_new_tokens=args.new_tokens, max_context_tokens=2048, generate_timeout_s=600.0,
                        viewer_screenshots=False)
    tasks = [suite.get_task(t) for t in suite.task_ids("all")]
    steps = {t.task_id: 1 + k % args.max_steps for k, t in enumerate(tasks)}  # episode lengths 1..max_steps
    n_groups = contexts * args.episodes_per_context // args.group_size
    order = np.random.default_rng(0).integers(0, len(tasks), n_groups)
    stream = [(tasks[i], int(k)) for k, i in enumerate(order)]
    engine = JaxEngine(cfg, params, num_slots=contexts, max_len=2048, tokenizer=tok, buckets=(256, 512, 1024, 2048))
    # Compile every program before timing: prompts of every bucket, alone and as a full batch (the decode
    # programs depend on how far the furthest busy slot reaches).
    warm = dataclasses.replace(agent.sampling(None, args.new_tokens), ignore_eos=True)
    for n in (100, 300, 600, 1200, 1900):
        await engine.generate([1] * n, warm)
        await asyncio.gather(*(engine.generate([1] * int(m), warm) for m in np.linspace(100, n, contexts)))
    policy = Navigator(engine, tok)
    browsers = math.ceil(contexts / CONTEXTS_PER_BROWSER)
    pool_cfg = PoolConfig(num_browsers=browsers, contexts_per_browser=math.ceil(contexts / browsers), max_idle_contexts=0)
    async with BrowserPool(pool_cfg, env_cfg) as pool:
        await pool.wait_ready()
        idle = await asyncio.to_thread(pool_pss_mb, pool)
        peak = [idle]

        async def sample_memory() -> None:
            while True:
                await asyncio.sleep(5.0)
                peak[0] = max(peak[0], await asyncio.to_thread(pool_pss_mb, pool))

        sampler = asyncio.ensure_future(sample_memory())
        col = Collector(pool, policy, tok, env_cfg, agent,
                        RolloutConfig(group_size=args.group_size, mode=mode, max_concurrent_groups=contexts // args.group_size))
        t0, cpu0 = time.perf_counter(), cpu_seconds()
        groups, stats = await col.collect(
            iter(stream), num_groups=len(stream),
            agent_for=lambda task: dataclasses.replace(agent, max_steps=steps[task.task_id]))
        wall = time.perf_counter() - t0
        cpu1 = cpu_seconds()
        sampler.cancel()
    await engine.close()
    episodes = [e for g in groups for e in g.episodes]
    failed = sum(e.trajectory.termination in ("env_error", "timeout") for e in episodes)
    steps_played = sum(len(e.trajectory.turns) for e in episodes)
    return {"episodes": len(episodes), "steps": steps_played, "wall_s": wall, "per_min": 60 * len(episodes) / wall,
            "busy": policy.busy_s / wall, "time": stats.time, "failed": failed,
            "lengths": [len(e.trajectory.turns) for e in episodes],
            "mb_per_context": (peak[0] - idle) / contexts, "idle_mb": idle,
            "cpu_self_s": cpu1[0] - cpu0[0], "cpu_browsers_s": cpu1[1] - cpu0[1],
            "cores_used": (cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1]) / wall,
            "cpu_per_reset_or_step": (cpu1[1] - cpu0[1]) / max(1, steps_played + len(episodes)),
            "engine_s_per_step": stats.time.get("engine", 0.0) / max(1, steps_played)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--episodes-per-context", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=1, help="episodes per group (1: independent rollouts, as WebGym)")
    ap.add_argument("--latency", default="lognormal:median=1.0,p90=3.0,max=20",
                    help="page waits (envs/sites/latency.py): a lognormal spec, a preset ('webgym': p90 10 s, cut at 45 s) or off")
    ap.add_argument("--memory-margin-mb", type=float, default=3000.0, help="free memory a level must leave")
    ap.add_argument("--json", default="", help="write the measurements here (benchmarks/sim_rollout.py --measured)")
    args = ap.parse_args()
    args.page_latency = PageLatency.parse(args.latency)
    with tempfile.TemporaryDirectory() as d:
        make_tiny_checkpoint(d, tiny_config("qwen3", vocab_size=512, max_position_embeddings=2048))
        cfg, params = load_hf(d)
        tok = load_tokenizer(d)
    suite = get_suite("local_sites", latency=args.latency).start()
    print(f"local sites, page latency {args.latency}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"group size {args.group_size}, {args.episodes_per_context} episodes per context, 1..{args.max_steps} steps")
    header = (f"{'contexts':>8} {'mode':>9} {'episodes':>8} {'steps':>6} {'wall s':>7} {'ep/min':>7} {'engine busy':>11} "
              f"{'browser s':>9} {'engine s':>8} {'wait s':>8} {'MB/ctx':>7}")
    print(header)
    per_context_mb = 60.0
    latency = args.page_latency
    measured: list[dict] = []
    try:
        for c in args.contexts:
            need = c * per_context_mb * 1.25
            if need > mem_available_mb() - args.memory_margin_mb:
                print(f"{c:>8} skipped: ~{need:.0f} MB of browsers needed ({per_context_mb:.0f} MB per context measured), "
                      f"{mem_available_mb():.0f} MB available, {args.memory_margin_mb:.0f} MB kept free")
                continue
            res = {}
            for mode in ("async", "lockstep"):
                r = asyncio.run(run(mode, c, args, cfg, params, tok, suite))
                res[mode] = r
                t = r["time"]
                per_context_mb = max(per_context_mb if c < 32 else 0.0, r["mb_per_context"])
                print(f"{c:>8} {mode:>9} {r['episodes']:>8} {r['steps']:>6} {r['wall_s']:>7.1f} {r['per_min']:>7.1f} "
                      f"{r['busy']:>11.1%} {t.get('browser', 0):>9.0f} {t.get('engine', 0):>8.0f} {t.get('wait', 0):>8.0f} "
                      f"{r['mb_per_context']:>7.0f}" + (f"  ({r['failed']} env errors/timeouts)" if r["failed"] else ""),
                      flush=True)
                print(f"{'':>8} {'':>9} browser CPU {r['cpu_per_reset_or_step']:.3f} s per reset/step, engine+loop CPU "
                      f"{r['cpu_self_s'] / max(1, r['steps']):.3f} s per step, engine {r['engine_s_per_step']:.2f} s per "
                      f"request, {r['cores_used']:.2f} cores used", flush=True)
            measured.append({"contexts": c, "load": os.getloadavg()[0], **res, "latency": {
                "median_s": latency.median_s, "p90_s": latency.p90_s, "max_s": latency.max_s} if latency else None})
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(measured, f, indent=1, default=float)
            print(f"{c:>8} ratio async/lockstep: {res['async']['per_min'] / res['lockstep']['per_min']:.2f}x episodes/min; "
                  f"engine busy {res['async']['busy']:.0%} vs {res['lockstep']['busy']:.0%}; load {os.getloadavg()[0]:.1f}",
                  flush=True)
    finally:
        suite.stop()


if __name__ == "__main__":
    main()
