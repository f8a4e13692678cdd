"""A discrete-event model of rollout collection: asynchronous vs lock-step, at any scale.

Each environment plays episodes of L steps. A step is one policy request, then the environment's own work:
`cpu_s` seconds of CPU on a pool of `cpus` cores (first come first served), then a page wait drawn from a
lognormal (no CPU: the server and the network). An episode starts with a reset (CPU + page wait, no request).
The inference service is a continuous-batching server seen from outside: up to `gpu_slots` requests in
flight, each answered `gen_s` seconds after it was admitted, the rest queue (first come first served).

- `async`: every environment takes the next episode as soon as its last one ends (WebGym's design; our
  `Collector` with `mode="async"` and groups of one).
- `lockstep`: a batch of `envs` episodes; at every step all live episodes issue their requests together and
  the next step starts when the slowest has finished its page; the next batch starts when the whole batch
  ended (our `mode="lockstep"`, the synchronous baseline WebGym compares with).

Plain `heapq` events; processes are generators that yield what they need: ("gen", s), ("cpu", s),
("wait", s) or ("barrier", b). `benchmarks/sim_rollout.py` calibrates it on `benchmarks/bench_rollout.py`'s
measurements and extends the comparison to the papers' scale.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections import deque
from typing import Callable, Generator, Iterator

import numpy as np

Need = tuple[str, object]
Process = Generator[Need, None, None]


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one run collects and what each part of a step costs."""

    episodes: int
    envs: int  # concurrent environments (browser contexts)
    cpus: float  # cores for the environments' own work
    cpu_s: float  # CPU seconds per step (and per reset) of one environment
    gen_s: float  # seconds per policy request once admitted
    gpu_slots: int  # requests the inference service holds at once
    latency_median_s: float = 1.0  # page wait, lognormal
    latency_p90_s: float = 3.0
    latency_max_s: float = 20.0
    lengths: Callable[[np.random.Generator, int], np.ndarray] | None = None  # episode lengths (None: all 1..4 mixed)
    seed: int = 0

    def draw_lengths(self, rng: np.random.Generator) -> np.ndarray:
        if self.lengths is not None:
            return self.lengths(rng, self.episodes)
        return 1 + np.arange(self.episodes) % 4


@dataclasses.dataclass
class Result:
    mode: str
    wall_s: float
    episodes: int
    steps: int
    cpu_busy: float  # mean share of the cores in use
    gen_busy: float  # share of the time with at least one policy request in flight

    @property
    def episodes_per_min(self) -> float:
        return 60.0 * self.episodes / self.wall_s


class _Pool:
    """`servers` identical servers, first come first served; tracks busy time."""

    def __init__(self, servers: float) -> None:
        self.free = servers
        self.queue: deque[tuple[float, Process]] = deque()
        self.busy_area = 0.0  # integral of servers in use over time
        self.any_busy_s = 0.0
        self.in_use = 0.0
        self.last = 0.0

    def account(self, now: float) -> None:
        dt = now - self.last
        self.busy_area += self.in_use * dt
        self.any_busy_s += dt if self.in_use > 0 else 0.0
        self.last = now


class Barrier:
    """The lock-step barrier: releases everyone waiting once all `parties` arrived; leavers lower `parties`."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.waiting: list[Process] = []


class Simulation:
    def __init__(self, w: Workload) -> None:
        self.w = w
        self.rng = np.random.default_rng(w.seed)
        self.sigma = math.log(w.latency_p90_s / w.latency_median_s) / 1.2815515655446004
        self.now = 0.0
        self.events: list[tuple[float, int, Process]] = []
        self.order = itertools.count()
        # a fractional core count keeps its capacity: round(cpus) cores (at least one), each proportionally slower
        self.cores = max(1, round(w.cpus))
        self.cpu_scale = self.cores / w.cpus
        self.cpu, self.gpu = _Pool(self.cores), _Pool(w.gpu_slots)
        self.steps = 0

    def latency(self) -> float:
        return min(self.w.latency_max_s, self.w.latency_median_s * math.exp(self.sigma * self.rng.standard_normal()))

    # ---- the event loop ---------------------------------------------------------------------------

    def _at(self, t: float, proc: Process) -> None:
        heapq.heappush(self.events, (t, next(self.order), proc))

    def _advance(self, proc: Process) -> None:
        """Run `proc` until it needs something that takes time."""
        try:
            kind, arg = next(proc)
        except StopIteration:
            return
        if kind == "wait":
            self._at(self.now + float(arg), proc)
        elif kind == "cpu":
            self.cpu.queue.append((float(arg) * self.cpu_scale, proc))
            self._serve(self.cpu)
        elif kind == "gen":
            self.gpu.queue.append((float(arg), proc))
            self._serve(self.gpu)
        elif kind == "barrier":
            b: Barrier = arg  # type: ignore[assignment]
            b.waiting.append(proc)
            self._release(b)
        else:
            raise ValueError(f"unknown need {kind!r}")

    def _serve(self, pool: _Pool) -> None:
        while pool.queue and pool.free >= 1:
            seconds, proc = pool.queue.popleft()
            pool.account(self.now)
            pool.free -= 1
            pool.in_use += 1
            self._at(self.now + seconds, self._done(pool, proc))

    def _done(self, pool: _Pool, proc: Process) -> Process:
        """A one-shot process: when it runs, `pool` gets its server back and `proc` continues."""
        pool.account(self.now)
        pool.free += 1
        pool.in_use -= 1
        self._serve(pool)
        self._advance(proc)
        return
        yield  # pragma: no cover  (makes this a generator)

    def _release(self, b: Barrier) -> None:
        if b.waiting and len(b.waiting) >= b.parties:
            ready, b.waiting = b.waiting, []
            for proc in ready:
                self._advance(proc)

    def leave(self, b: Barrier) -> None:
        b.parties -= 1
        self._release(b)

    def run(self, starts: list[Process]) -> float:
        for p in starts:
            self._at(0.0, p)
        while self.events:
            self.now, _, proc = heapq.heappop(self.events)
            self._advance(proc)
        self.cpu.account(self.now)
        self.gpu.account(self.now)
        return self.now

    # ---- one environment's work ----------------------------------------------------------------

    def episode(self, length: int, barrier: Barrier | None = None) -> Iterator[Need]:
        yield ("cpu", self.w.cpu_s)  # reset: open the start page
        yield ("wait", self.latency())
        for _ in range(int(length)):
            if barrier is not None:
                yield ("barrier", barrier)
            yield ("gen", self.w.gen_s)  # the policy's request
            yield ("cpu", self.w.cpu_s)
            yield ("wait", self.latency())
            self.steps += 1
        if barrier is not None:
            self.leave(barrier)


def simulate(w: Workload, mode: str) -> Result:
    """One collection of `w.episodes` episodes in `mode` ('async' or 'lockstep')."""
    sim = Simulation(w)
    lengths = list(w.draw_lengths(sim.rng))
    if mode == "async":
        queue = deque(lengths)

        def env() -> Iterator[Need]:
            while queue:
                yield from sim.episode(queue.popleft())

        wall = sim.run([env() for _ in range(w.envs)])
    elif mode == "lockstep":
        batches = [lengths[i:i + w.envs] for i in range(0, len(lengths), w.envs)]

        def driver() -> Iterator[Need]:
            for batch in batches:
                barrier, done = Barrier(len(batch)), Barrier(len(batch) + 1)

                def one(n: int) -> Iterator[Need]:
                    yield from sim.episode(n, barrier)
                    yield ("barrier", done)

                for n in batch:
                    sim._at(sim.now, one(n))
                yield ("barrier", done)  # the whole batch ended

        wall = sim.run([driver()])
    else:
        raise ValueError(f"mode {mode!r}: use 'async' or 'lockstep'")
    return Result(mode, wall, len(lengths), sim.steps, sim.cpu.busy_area / (wall * sim.cores) if wall else 0.0,
                  sim.gpu.any_busy_s / wall if wall else 0.0)
