"""Asynchronous vs lock-step collection at the papers' scale, by the discrete-event model of
`jaxwebrl.rollout.sim`, calibrated on this machine's measurements and checked against WebGym's report.

    python benchmarks/sim_rollout.py [--measured runs/bench_rollout.json] [--gen-s 3.0] [--seeds 3]

1. Local check (with `--measured`, the JSON `benchmarks/bench_rollout.py --json` writes): each measured level is
   simulated with what was measured there (cores the run got, browser CPU per reset/step, the engine's time
   per request, the same page-latency distribution, episode lengths and counts), and the predicted
   episodes/min of both modes are printed beside the measured ones.
2. WebGym's setup (webgym.txt, section 4.2): 1,800 trajectories of 13.2 steps on average (23,760 steps), 256
   environments, 64 CPUs, inference on 3 nodes of 8 H100 (never short of slots: 256 requests at once).
   Unknown there: the CPU seconds a live-site step costs and the policy's time per request. The CPU cost is
   fitted so that asynchronous collection takes WebGym's 48.6 minutes; the lock-step time is then a
   prediction, compared with WebGym's 264 minutes. Episode lengths: horizon 10/20/30 by difficulty in the
   ratio 2:5:3 (RECIPES.md), 22% of episodes run to the horizon and the rest end uniformly before it, which
   gives the reported mean of 13.2. A table shows how the prediction moves with the page-latency tail and
   the time per request.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from jaxwebrl.rollout.sim import Workload, simulate

WEBGYM_ASYNC_MIN, WEBGYM_SYNC_MIN = 48.6, 264.0
WEBGYM = dict(episodes=1800, envs=256, cpus=64)


def webgym_lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    """Horizons 10/20/30 at 2:5:3; 22% reach the horizon, the rest end uniformly in 1..horizon (mean 13.2)."""
    horizon = rng.choice([10, 20, 30], size=n, p=[0.2, 0.5, 0.3])
    return np.where(rng.random(n) < 0.22, horizon, rng.integers(1, horizon + 1))


def mean_minutes(w: Workload, mode: str, seeds: int) -> float:
    return float(np.mean([simulate(dataclasses.replace(w, seed=s), mode).wall_s for s in range(seeds)])) / 60


def fit_cpu_s(base: Workload, target_min: float, seeds: int) -> float:
    """CPU seconds per step that make asynchronous collection take `target_min`: secant steps from the
    CPU-bound estimate (all cores busy for the whole run)."""
    work = float(np.sum(base.draw_lengths(np.random.default_rng(0)))) + base.episodes  # steps + resets
    x0 = target_min * 60 * base.cpus / work
    x1 = 0.9 * x0
    f = lambda c: mean_minutes(dataclasses.replace(base, cpu_s=c), "async", seeds) - target_min  # noqa: E731
    f0, f1 = f(x0), f(x1)
    for _ in range(6):
        if abs(f1) < 0.05 or f1 == f0:
            break
        x0, x1, f0 = x1, max(1e-3, x1 - f1 * (x1 - x0) / (f1 - f0)), f1
        f1 = f(x1)
    return x1


def measured_workload(level: dict, mode: str, cpus: float | None = None) -> Workload:
    """A measured level as the model sees it: the cores the async run got (or `cpus`), its browser CPU per
    reset/step, the engine's time per request, the page waits, episode lengths and counts."""
    m = level[mode]
    return Workload(episodes=m["episodes"], envs=level["contexts"], cpus=cpus or max(0.1, level["async"]["cores_used"]),
                    cpu_s=m["cpu_per_reset_or_step"], gen_s=m["engine_s_per_step"], gpu_slots=level["contexts"],
                    latency_median_s=level["latency"]["median_s"], latency_p90_s=level["latency"]["p90_s"],
                    latency_max_s=level["latency"]["max_s"],
                    lengths=lambda rng, n, ls=tuple(m["lengths"]): np.resize(np.asarray(ls), n))


def per_min(w: Workload, mode: str, seeds: int) -> float:
    return float(np.mean([simulate(dataclasses.replace(w, seed=s), mode).episodes_per_min for s in range(seeds)]))


def local_check(path: str, seeds: int, cores: tuple[float, ...] = (4, 8, 16)) -> None:
    levels = json.loads(open(path).read())
    print(f"1. Local check against {path} (measured on this machine):")
    print("| contexts | mode | measured ep/min | simulated ep/min | measured ratio | simulated ratio |")
    print("|---:|---|---:|---:|---:|---:|")
    for level in levels:
        a, l = level["async"], level["lockstep"]
        sim = {mode: per_min(measured_workload(level, mode), mode, seeds) for mode in ("async", "lockstep")}
        for mode, m in (("async", a), ("lockstep", l)):
            print(f"| {level['contexts']} | {mode} | {m['per_min']:.1f} | {sim[mode]:.1f} | "
                  f"{a['per_min'] / l['per_min']:.2f}x | {sim['async'] / sim['lockstep']:.2f}x |")
    print("\nThe same measured costs on a machine with more cores (the model above, only `cpus` changed):")
    print("| contexts | cores | async ep/min | lock-step ep/min | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for level in levels:
        for c in cores:
            sim = {mode: per_min(measured_workload(level, mode, c), mode, seeds) for mode in ("async", "lockstep")}
            print(f"| {level['contexts']} | {c:g} | {sim['async']:.1f} | {sim['lockstep']:.1f} | "
                  f"{sim['async'] / sim['lockstep']:.2f}x |")


def webgym_check(gen_s: float, seeds: int, median: float, p90: float, cap: float) -> None:
    base = Workload(**WEBGYM, cpu_s=1.0, gen_s=gen_s, gpu_slots=256, latency_median_s=median, latency_p90_s=p90,
                    latency_max_s=cap, lengths=webgym_lengths)
    cpu_s = fit_cpu_s(base, WEBGYM_ASYNC_MIN, seeds)
    w = dataclasses.replace(base, cpu_s=cpu_s)
    a, l = (simulate(w, m) for m in ("async", "lockstep"))
    steps = a.steps
    print(f"\n2. WebGym's setup: {WEBGYM['episodes']} episodes ({steps} steps, mean {steps / WEBGYM['episodes']:.1f}), "
          f"{WEBGYM['envs']} environments, {WEBGYM['cpus']} CPUs, {gen_s:g} s per request, page wait lognormal "
          f"median {median:g} s / p90 {p90:g} s / cap {cap:g} s; fitted CPU per step {cpu_s:.2f} s")
    print("| | asynchronous | lock-step | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| WebGym (reported) | {WEBGYM_ASYNC_MIN} min | {WEBGYM_SYNC_MIN} min | {WEBGYM_SYNC_MIN / WEBGYM_ASYNC_MIN:.2f}x |")
    am, lm = mean_minutes(w, "async", seeds), mean_minutes(w, "lockstep", seeds)
    print(f"| simulated | {am:.1f} min (fitted) | {lm:.1f} min (predicted) | {lm / am:.2f}x |")
    print(f"(simulated CPU busy {a.cpu_busy:.0%} async vs {l.cpu_busy:.0%} lock-step; a policy request in flight "
          f"{a.gen_busy:.0%} vs {l.gen_busy:.0%} of the time)")

    print("\nSensitivity of the lock-step prediction (CPU per step refitted to 48.6 min async in every row):")
    print("| page wait p90 / cap | s per request | CPU per step | lock-step min | ratio |")
    print("|---|---:|---:|---:|---:|")
    for p, c in ((p90, cap), (5.0, 45.0), (10.0, 45.0), (20.0, 45.0)):
        for g in (gen_s, 10.0):
            b = dataclasses.replace(base, latency_p90_s=p, latency_max_s=c, gen_s=g)
            cs = fit_cpu_s(b, WEBGYM_ASYNC_MIN, seeds)
            lm = mean_minutes(dataclasses.replace(b, cpu_s=cs), "lockstep", seeds)
            print(f"| {p:g} s / {c:g} s | {g:g} | {cs:.2f} s | {lm:.0f} | {lm / WEBGYM_ASYNC_MIN:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measured", default="", help="JSON from benchmarks/bench_rollout.py --json (local check)")
    ap.add_argument("--gen-s", type=float, default=3.0, help="seconds per policy request at WebGym's scale (assumed)")
    ap.add_argument("--median", type=float, default=1.0, help="page wait median, s")
    ap.add_argument("--p90", type=float, default=3.0, help="page wait 90th percentile, s")
    ap.add_argument("--cap", type=float, default=20.0, help="page wait cap (timeout), s")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    if args.measured:
        local_check(args.measured, args.seeds)
    webgym_check(args.gen_s, args.seeds, args.median, args.p90, args.cap)


if __name__ == "__main__":
    main()
