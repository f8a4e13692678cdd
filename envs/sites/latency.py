"""Server-side page delays with a heavy tail, so that an environment step is mostly waiting, as on the open web.

The local sites answer in about a millisecond; live websites do not. With a `PageLatency` a site server holds
every page (not its static files) for a delay drawn from a lognormal distribution before answering, on its own
request thread, so the wait costs no CPU and concurrent pages wait side by side. That is what makes the gap
between asynchronous and lock-step collection real on a 2-core machine: a lock-step batch waits for its
slowest page at every step, while asynchronous episodes spend that time on other work.

Why a lognormal and these numbers. Web response times are right-skewed and commonly modelled as lognormal
(Ciemiewicz, "What Do You 'Mean'? Revisiting Statistics for Web Response Time Measurements", CMG 2001). The
default, median 1.0 s and 90th percentile 3.0 s (sigma 0.86, mean 1.44 s, 99th percentile 7.3 s, capped at
20 s), puts the typical page wait of an agent step at the scale the HTTP Archive reports for real pages: the
Chrome UX Report calls a time to first byte "good" at <= 0.8 s and "poor" above 1.8 s, and the 2020 Web
Almanac found only 18% of mobile sites with a good (75th percentile) TTFB, before the page's own resources
load. The papers report no per-step page times (WebGym and OpenWebRL give only totals, 48.6 vs 264 minutes,
and timeouts of 45 s per browser step), so the distribution is an assumption informed by public web data, not
a fit; change it with `spec` (e.g. 'lognormal:median=0.5,p90=1.5,max=10' or 'off').

The preset 'webgym' (median 1 s, p90 10 s, cut at 45 s) is the tail WebGym's own report implies: 45 s is its
per-step browser timeout, and benchmarks/sim_rollout.py reproduces its reported synchronous time (264 min
against 48.6 asynchronous) only with page waits whose 90th percentile is 10-20 s (BUILD.md, Collection); 10 s
is the lower end. Live sites with retries, slow third-party resources and timeouts, not a typical page's TTFB.

Config: `LocalSitesSuite(latency=...)` or the environment variable `JAXWEBRL_SITE_LATENCY`.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, field

ENV_VAR = "JAXWEBRL_SITE_LATENCY"
DEFAULT_SPEC = "lognormal:median=1.0,p90=3.0,max=20"
PRESETS = {"webgym": "lognormal:median=1.0,p90=10.0,max=45"}
_Z90 = 1.2815515655446004  # the standard normal's 90th percentile


@dataclass(frozen=True)
class PageLatency:
    """Lognormal page delays: `median_s`, `p90_s`, cut at `max_s`; seeded, safe to draw from many threads."""

    median_s: float = 1.0
    p90_s: float = 3.0
    max_s: float = 20.0
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False, compare=False)
    _lock: threading.Lock = field(init=False, repr=False, compare=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0 < self.median_s <= self.p90_s <= self.max_s:
            raise ValueError(f"PageLatency: need 0 < median ({self.median_s}) <= p90 ({self.p90_s}) <= max "
                             f"({self.max_s}); e.g. {DEFAULT_SPEC!r}")
        object.__setattr__(self, "_rng", random.Random(self.seed))

    @property
    def sigma(self) -> float:
        """The log-space standard deviation that puts the 90th percentile at `p90_s`."""
        return math.log(self.p90_s / self.median_s) / _Z90

    def draw(self) -> float:
        """One delay in seconds."""
        with self._lock:
            z = self._rng.gauss(0.0, 1.0)
        return min(self.max_s, self.median_s * math.exp(self.sigma * z))

    @classmethod
    def parse(cls, spec: str | None, seed: int = 0) -> "PageLatency | None":
        """'off' / '' -> None; 'lognormal' -> the default; 'lognormal:median=1,p90=3,max=20' -> those values;
        a preset's name ('webgym') -> its values."""
        spec = (spec or "").strip()
        spec = PRESETS.get(spec, spec)
        if spec in ("", "off", "none", "0"):
            return None
        kind, _, args = spec.partition(":")
        if kind != "lognormal":
            raise ValueError(f"site latency {spec!r}: the only kind is 'lognormal', e.g. {DEFAULT_SPEC!r}, "
                             f"a preset ({', '.join(PRESETS)}), or 'off'")
        names = {"median": "median_s", "p90": "p90_s", "max": "max_s"}
        values: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in args.split(","))):
            key, _, value = part.partition("=")
            if key not in names:
                raise ValueError(f"site latency {spec!r}: unknown parameter {key!r}; use median, p90 and max (seconds)")
            try:
                values[names[key]] = float(value)
            except ValueError:
                raise ValueError(f"site latency {spec!r}: {key}={value!r} is not a number of seconds") from None
        return cls(**values, seed=seed)
