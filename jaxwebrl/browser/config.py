"""Configuration dataclasses for the browser layer.

Plain frozen dataclasses, so the browser layer has no dependency on the training stack. `BrowserConfig` is
the run config's `env` section and builds the two runtime configs (`PoolConfig`, `EnvConfig`); every field
has the default the tests and benchmarks use.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from jaxwebrl.browser.actions import ACTION_SPACES
from jaxwebrl.fields import FieldError, at_least, one_of, positive

DEFAULT_CHROMIUM_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
)

TEXT_MODES = ("axtree", "html", "both", "none")


def find_chromium() -> str | None:
    """Chromium to launch: $JAXWEBRL_CHROMIUM, else `chromium` on PATH (Playwright's download is unavailable)."""
    env = os.environ.get("JAXWEBRL_CHROMIUM")
    if env:
        return env
    return shutil.which("chromium") or shutil.which("chromium-browser")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an IP literal) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def endpoint_host(url: str) -> str:
    return urlsplit(url).hostname or ""


@dataclass(frozen=True)
class PoolConfig:
    """How many browsers, how many contexts each, and where they come from.

    `remote_endpoints` (ws:// urls of `python -m jaxwebrl.browser.serve` servers) replace local launches when
    non-empty: one connection per endpoint, contexts spread over the live ones (least loaded first);
    `capacity` is `contexts_per_browser` per endpoint. The servers admit a pool that presents their secret,
    read from `remote_token_file` (or $JAXWEBRL_BROWSER_TOKEN when empty), and launch Chromium themselves
    (their binary, the safety flags; `executable_path` and `args` are for local browsers). A lost browser
    (crash, or a remote server gone) is reconnected or relaunched in the background, waiting
    `reconnect_backoff_s` after the first failed try, doubling up to `reconnect_backoff_max_s`.
    `egress_host` is the address the egress gateway binds and the browsers dial (a remote browser must reach
    it). `max_idle_contexts` bounds the finished contexts kept for reuse by tasks that allow it (None:
    `capacity`; 0: never reuse).
    """

    num_browsers: int = 1
    contexts_per_browser: int = 8
    executable_path: str | None = field(default_factory=find_chromium)
    args: tuple[str, ...] = DEFAULT_CHROMIUM_ARGS
    headless: bool = True
    remote_endpoints: tuple[str, ...] = ()
    remote_token_file: str = ""
    egress_host: str = "127.0.0.1"
    launch_timeout_s: float = 30.0
    relaunch_attempts: int = 3
    reconnect_backoff_s: float = 1.0
    reconnect_backoff_max_s: float = 60.0
    max_idle_contexts: int | None = None

    def validate(self) -> None:
        """Fail at start with a message naming the field, never mid-run."""
        if self.num_browsers < 1:
            raise ValueError("PoolConfig.num_browsers must be >= 1")
        if self.contexts_per_browser < 1:
            raise ValueError("PoolConfig.contexts_per_browser must be >= 1")
        if self.max_idle_contexts is not None and self.max_idle_contexts < 0:
            raise ValueError("PoolConfig.max_idle_contexts must be >= 0 (0 turns context reuse off) or None")
        if not 0 < self.reconnect_backoff_s <= self.reconnect_backoff_max_s:
            raise ValueError("PoolConfig.reconnect_backoff_s must be > 0 and <= reconnect_backoff_max_s")
        if len(set(self.remote_endpoints)) != len(self.remote_endpoints):
            raise ValueError(f"PoolConfig.remote_endpoints lists an endpoint twice: {self.remote_endpoints}")
        far = [u for u in self.remote_endpoints if not is_loopback(endpoint_host(u))]
        if far and is_loopback(self.egress_host):
            raise ValueError(
                f"PoolConfig.egress_host={self.egress_host!r} is loopback, so the browsers at {far[0]} cannot reach "
                "the egress gateway (every page load would fail); set it to this host's address they can reach")
        if not self.remote_endpoints and not self.executable_path:
            raise ValueError(
                "PoolConfig.executable_path: no Chromium found; install it (apt-get install chromium) "
                "or set JAXWEBRL_CHROMIUM"
            )

    @property
    def capacity(self) -> int:
        n = len(self.remote_endpoints) or self.num_browsers
        return n * self.contexts_per_browser


@dataclass(frozen=True)
class ObsConfig:
    """Which observation parts to produce. `text_mode` picks the text: a11y tree, simplified HTML, both, none.
    `relative_urls` shows same-origin link urls as paths, so a local server's random port stays out of the text."""

    text_mode: str = "axtree"
    screenshot: bool = False
    set_of_marks: bool = False
    metadata: bool = True
    text_budget_chars: int = 16_000
    include_hidden: bool = False
    relative_urls: bool = False
    box_centres: bool = False  # a11y lines of interactive elements in view end with `centre: (x, y)` on 0..1000
    ids_after_names: bool = False  # a11y lines as `button 'No' [12]` instead of `[12] button 'No'`

    def validate(self) -> None:
        if self.text_mode not in TEXT_MODES:
            raise ValueError(f"ObsConfig.text_mode must be one of {TEXT_MODES}, got {self.text_mode!r}")
        if self.text_budget_chars < 200:
            raise ValueError("ObsConfig.text_budget_chars must be >= 200")


@dataclass(frozen=True)
class EnvConfig:
    """Per-episode settings: action space, observation, viewport, timeouts and extra allowed origins.

    `step_timeout_s` bounds parse + execute + observe of one step; a wait the policy asks for must leave a
    reserve of min(step_timeout_s / 3, 2 * action_timeout_s) in it, else the episode ends `agent_timeout`."""

    action_space: str = "webarena"
    obs: ObsConfig = field(default_factory=ObsConfig)
    viewport: tuple[int, int] = (1280, 720)
    # CSS-to-device pixel ratio of the page (screenshots are viewport * ratio pixels; coordinates the agent
    # gives stay on the 0..1000 or CSS scale, so they mean the same spot at any ratio)
    device_scale_factor: float = 1.0
    action_timeout_s: float = 5.0
    step_timeout_s: float = 45.0
    episode_timeout_s: float = 600.0
    max_steps: int | None = None
    extra_allowed_origins: tuple[str, ...] = ()
    settle_s: float = 0.05
    # `data:` (and `about:` other than about:blank) pages may be opened by the agent or stay open. Off: a
    # data: page is a whole document the allowlist never saw (its scripts could open sockets anywhere).
    allow_data_urls: bool = False

    def validate(self) -> None:
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"EnvConfig.action_space must be one of {sorted(ACTION_SPACES)}, got {self.action_space!r}")
        self.obs.validate()
        if not 0.25 <= self.device_scale_factor <= 4:
            raise ValueError(f"EnvConfig.device_scale_factor must be in 0.25..4, got {self.device_scale_factor}")
        if self.action_timeout_s <= 0 or self.step_timeout_s <= 0 or self.episode_timeout_s <= 0:
            raise ValueError("EnvConfig timeouts must be > 0")


@dataclass(frozen=True)
class BrowserConfig:
    """The `env` config section: how browsers present pages to the agent and how many run.

    It builds the two runtime configs (`env_config()` for each episode, `pool_config()` for the pool), so
    the translation from config fields lives in one place. `remote_endpoints` is a comma-separated list of
    `python -m jaxwebrl.browser.serve` websocket urls that replace local launches."""

    action_space: str = "webagent_r1"  # jaxwebrl.browser.actions.ACTION_SPACES
    text_mode: str = "html"  # TEXT_MODES
    text_budget_chars: int = 16000
    page_metadata: bool = True  # url/tabs/scroll/focus with each observation (the URL line in text prompts)
    relative_urls: bool = False  # same-origin link urls as paths (keeps a local server's port out of prompts)
    # Each interactive element's box centre on the 0..1000 grid in the a11y text: coordinate tools (openwebrl)
    # can aim from text until the policy sees screenshots.
    box_centres: bool = False
    # A11y lines as `button 'No' [12]`: the id right after the name it belongs to, so copying it is "the token
    # after the match", the pattern a small model's attention learns first (the default, `[12] button 'No'`, is
    # the line format of BrowserGym, WebArena and the papers).
    ids_after_names: bool = False
    screenshot: bool = False  # a PNG of the viewport with each observation
    set_of_marks: bool = False  # element ids drawn on the screenshot
    viewport_width: int = 1280
    viewport_height: int = 720
    device_scale_factor: float = 1.0  # device pixels per CSS pixel (OpenWebRL: 1); screenshots scale with it
    num_browsers: int = 1
    contexts_per_browser: int = 8
    # Remote browser fleet: comma-separated ws:// urls of `python -m jaxwebrl.browser.serve` servers (replace local
    # launches; `contexts_per_browser` contexts each). A lost server is retried with exponential backoff
    # (remote_backoff_s doubling up to remote_backoff_max_s); its running episodes end `env_error` (masked).
    remote_endpoints: str = ""
    # The file holding the fleet's secret (the same one each server reads with --token-file; mode 600; read at each
    # connection, so rotating it needs no restart). "": $JAXWEBRL_BROWSER_TOKEN. Never the secret itself: configs
    # are saved with the run.
    remote_token_file: str = ""
    remote_backoff_s: float = 1.0
    remote_backoff_max_s: float = 60.0
    # Where the egress gateway (the allowlisting proxy every context goes through) listens and the browsers dial:
    # loopback for local browsers; this host's address reachable from the servers for a remote fleet.
    egress_host: str = "127.0.0.1"
    action_timeout_s: float = 5.0
    step_timeout_s: float = 45.0  # parse + execute + observe of one step
    allow_data_urls: bool = False  # let the agent open data:/about: pages (off: the allowlist never saw them)

    def __post_init__(self) -> None:
        one_of("action_space", self.action_space, tuple(ACTION_SPACES))
        one_of("text_mode", self.text_mode, TEXT_MODES)
        at_least("text_budget_chars", self.text_budget_chars, 200)
        for name in ("num_browsers", "contexts_per_browser", "viewport_width", "viewport_height"):
            at_least(name, getattr(self, name), 1)
        for name in ("action_timeout_s", "step_timeout_s"):
            positive(name, getattr(self, name))
        if not 0.25 <= self.device_scale_factor <= 4:
            raise FieldError("device_scale_factor", f"{self.device_scale_factor} is outside 0.25..4",
                             "use 1 (OpenWebRL) or 2 (a high-density screen)")
        for url in self.endpoints:
            if not url.startswith(("ws://", "wss://")) or not endpoint_host(url):
                raise FieldError("remote_endpoints", f"{url!r} is not a websocket url",
                                 "give `python -m jaxwebrl.browser.serve` endpoints as ws://host:port/, comma-separated")
        if len(set(self.endpoints)) != len(self.endpoints):
            raise FieldError("remote_endpoints", "an endpoint is listed twice", "list each server once")
        positive("remote_backoff_s", self.remote_backoff_s)
        at_least("remote_backoff_max_s", self.remote_backoff_max_s, self.remote_backoff_s,
                 "the longest wait between reconnection tries cannot be shorter than the first")
        if ":" in self.egress_host or not self.egress_host:
            raise FieldError("egress_host", f"{self.egress_host!r} is not an IPv4 address or host name",
                             "give the address the browsers dial, e.g. 127.0.0.1 or 10.0.0.5 (IPv6 is not supported)")
        far = [u for u in self.endpoints if not is_loopback(endpoint_host(u))]
        if far and is_loopback(self.egress_host):
            raise FieldError("egress_host", f"{self.egress_host!r} is loopback, so the browsers at {far[0]} cannot reach "
                             "the egress gateway on this host (every page load would fail)",
                             "set env.egress_host to this host's address that the browser servers can reach")

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(s.strip() for s in self.remote_endpoints.split(",") if s.strip())

    def env_config(self, episode_timeout_s: float = 600.0) -> EnvConfig:
        """The per-episode config; the episode's time budget is the agent's (`agent.episode_timeout_s`)."""
        obs = ObsConfig(text_mode=self.text_mode, text_budget_chars=self.text_budget_chars, metadata=self.page_metadata,
                        relative_urls=self.relative_urls, box_centres=self.box_centres, screenshot=self.screenshot,
                        ids_after_names=self.ids_after_names,
                        set_of_marks=self.set_of_marks)
        return EnvConfig(action_space=self.action_space, obs=obs, viewport=(self.viewport_width, self.viewport_height),
                         device_scale_factor=self.device_scale_factor, action_timeout_s=self.action_timeout_s, step_timeout_s=self.step_timeout_s,
                         episode_timeout_s=episode_timeout_s, allow_data_urls=self.allow_data_urls)

    def pool_config(self) -> PoolConfig:
        return PoolConfig(num_browsers=self.num_browsers, contexts_per_browser=self.contexts_per_browser,
                          remote_endpoints=self.endpoints, remote_token_file=self.remote_token_file,
                          egress_host=self.egress_host, reconnect_backoff_s=self.remote_backoff_s,
                          reconnect_backoff_max_s=self.remote_backoff_max_s)
