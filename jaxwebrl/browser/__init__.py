"""jaxwebrl.browser: Playwright/Chromium environments for web agents.

The public surface the agent loop uses:

- `BrowserPool(PoolConfig, EnvConfig)` (pool.py): async context manager; `async with pool.lease(cfg) as env`,
  `await pool.new_env(cfg)` (the same lease, released by `env.close()`) or
  `async with pool.episode(task, seed, cfg) as (env, obs)`; `pool.stats()`, `pool.kill_browser(i)`.
  The env reaches the pool only through the `SessionLease` protocol (lease.py); egress.py is the network
  gate (per-context allowlisting proxy ports, host-resolver lock, no WebRTC); browsers.py keeps the pool's
  browsers alive, local or remote (fleet.py: the client of `python -m jaxwebrl.browser.serve`, serve.py).
- `BrowserEnv` (env.py): `await env.reset(task, seed) -> Observation`, `await env.step(text) -> StepResult`,
  `await env.evaluate() -> EvalResult`, `env.termination_reason`, `await env.close()`.
- `Observation` (observation.py): `goal`, `text` (a11y tree and/or simplified HTML, budgeted), `axtree`,
  `html`, `screenshot` (PNG bytes, optional set-of-marks), `metadata` (`PageMetadata`), `elements`.
- Action spaces (actions/): `get_action_space(name)` for "webarena", "webagent_r1", "openwebrl", "bid".
- `Task` protocol (task.py) implemented by suites in the top-level `envs` package.
"""

from jaxwebrl.browser.actions import ACTION_SPACES, get_action_space
from jaxwebrl.browser.config import EnvConfig, ObsConfig, PoolConfig, find_chromium
from jaxwebrl.browser.env import BrowserEnv, EnvError, StepResult
from jaxwebrl.browser.lease import SessionLease
from jaxwebrl.browser.observation import Observation, PageMetadata
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.browser.session import BrowserSession, InvalidAction
from jaxwebrl.browser.task import EvalResult, Task

__all__ = [
    "ACTION_SPACES", "BrowserEnv", "BrowserPool", "BrowserSession", "EnvConfig", "EnvError", "EvalResult",
    "InvalidAction", "ObsConfig", "Observation", "PageMetadata", "PoolConfig", "SessionLease", "StepResult", "Task",
    "find_chromium", "get_action_space",
]
