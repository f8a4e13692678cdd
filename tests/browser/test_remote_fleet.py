"""A remote browser fleet: two real `python -m jaxwebrl.browser.serve` processes on loopback, each launching
/usr/bin/chromium with the safety flags for the pool's gateway (egress lock included), behind one BrowserPool
that presents the fleet's secret.

The collector runs MiniWoB++ groups over both servers; one server is killed mid-iteration (its process group,
Chromium included). Its running episodes end `env_error` with mask 0 and do not count as failures of the
policy, the episodes on the other server finish, the collector goes on with the live server, and the
killed one rejoins (exponential backoff) once it is restarted on its port and takes contexts again. The
policy is the scripted `idle` role of tests/recipe_fixtures.py (scroll until the horizon, through the
Engine protocol), held at its second turn until the server is killed, so all four episodes are running
when it dies and the counts are exact.
An endpoint that refuses the connection, a server that refuses the pool's token, or a server whose browser
lacks the safety flags (a plain Playwright server) stops the pool at start with one error naming the setting,
the url and the fix.
(About 40 s on an idle 2-core machine, most of it two server and Chromium starts.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import subprocess
import sys

import pytest

from envs import get_suite
from jaxwebrl.agent import AgentConfig
from jaxwebrl.browser import BrowserPool, PoolConfig
from jaxwebrl.browser.config import BrowserConfig
from jaxwebrl.browser.pool import RemoteEndpointError
from jaxwebrl.fields import FieldError
from jaxwebrl.rollout import Collector, RolloutConfig
from jaxwebrl.models.tiny import SAMPLE_TEXT
from jaxwebrl.models.tokenizer import train_tokenizer
from tests.agent_fixtures import ENV, RecordingEngine
from jaxwebrl.procs import start_group, stop_group
from tests.browser.conftest import pg_task
from tests.browser.fleet_fixtures import FleetServer, token_file
from tests.recipe_fixtures import ScriptedPolicy

pytestmark = pytest.mark.timeout(240)
HORIZON = 6
AGENT = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=HORIZON, max_format_errors=100,
                    max_new_tokens=16, max_context_tokens=4096)


class GatedPolicy(RecordingEngine):
    """The scripted policy, but every episode's second request waits for `gate` (Engine protocol)."""

    def __init__(self, inner: ScriptedPolicy):
        super().__init__(inner)
        self.gate, self.waiting = asyncio.Event(), 0

    async def generate(self, prompt_ids, params, *, session_id=None):
        if self.inner.sessions.get(session_id, ("", 0))[1] >= 1 and not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
        return await super().generate(prompt_ids, params, session_id=session_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def token(tmp_path_factory) -> str:
    return token_file(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def servers(token, tmp_path_factory):
    logs = tmp_path_factory.mktemp("fleet_logs")
    pair = [FleetServer(token, logs, name="a"), FleetServer(token, logs, name="b")]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as ex:  # the two servers start side by side
            list(ex.map(FleetServer.start, pair))
        yield pair
    finally:
        for s in pair:
            s.stop()


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny checkpoints' tokenizer (the scripted policy needs no model)."""
    return train_tokenizer([SAMPLE_TEXT] * 4, vocab_size=512)


@pytest.fixture(scope="module")
def suite():
    s = get_suite("miniwob", tasks=["click-button"]).start()
    yield s
    s.stop()


def test_lost_server_ends_its_episodes_and_rejoins(servers, token, tokenizer, suite):
    a, b = servers
    task = suite.get_task(suite.task_ids("all")[0])
    # no context reuse, so every episode opens a context and the spread over the servers is visible
    cfg = PoolConfig(remote_endpoints=(a.url, b.url), remote_token_file=token, contexts_per_browser=2,
                     max_idle_contexts=0, reconnect_backoff_s=0.2, reconnect_backoff_max_s=1.0)

    async def go():
        policy = GatedPolicy(ScriptedPolicy(tokenizer, "bid", "bid", roles=("idle",)))
        async with BrowserPool(cfg, ENV) as pool:
            col = Collector(pool, policy, tokenizer, ENV, AGENT, RolloutConfig(group_size=2, max_concurrent_groups=2))
            inflight: dict[str, int] = {}

            async def kill_server_a():
                while policy.waiting < 4:  # all four episodes past their first step, waiting for their second
                    await asyncio.sleep(0.02)
                inflight.update({s.endpoint: len(s.envs) for s in pool.slots})  # least loaded first: 2 + 2
                a.kill()
                while pool.slots[0].ready.is_set():  # the pool saw the server go
                    await asyncio.sleep(0.02)
                policy.gate.set()

            killer = asyncio.ensure_future(asyncio.wait_for(kill_server_a(), 90))
            groups, stats = await col.collect(iter([(task, 0), (task, 1)]), num_groups=2)
            await killer
            first = [t for g in groups for t in g.trajectories]
            down = pool.browsers()
            # the collector goes on while server a is down: the new group plays on server b only
            opened_b = down[1]["opened"]
            (while_down,), _ = await col.collect(iter([(task, 2)]), num_groups=1)
            retried = pool.browsers()
            after_b = retried[1]["opened"]
            # server a comes back on its port; the pool reconnects (backoff <= 1 s) and uses it again
            await asyncio.to_thread(a.start)
            await asyncio.wait_for(pool.slots[0].ready.wait(), 60)
            opened_a = pool.browsers()[0]["opened"]
            (rejoined,), _ = await col.collect(iter([(task, 3)]), num_groups=1)
            return inflight, first, stats, down, retried, opened_b, after_b, while_down, opened_a, rejoined, pool.browsers()

    inflight, first, stats, down, retried, opened_b, after_b, while_down, opened_a, rejoined, final = asyncio.run(go())
    assert inflight == {a.url: 2, b.url: 2}, inflight  # contexts spread over both servers
    terms = sorted(t.termination for t in first)
    assert terms == ["env_error", "env_error", "max_steps", "max_steps"], terms
    for t in first:
        masks = [m for turn in t.turns for m in turn.mask]
        assert masks and (all(m == 0 for m in masks) if t.termination == "env_error" else all(m == 1 for m in masks))
    # not failures of the policy: counted apart, left out of the success rate's denominator
    assert stats.episodes == 4 and stats.env_errors == 2 and stats.success_rate == stats.successes / 2
    assert down[0]["live"] is False and down[0]["losses"] == 1 and down[1]["live"] and down[1]["losses"] == 0
    # the pool kept retrying the lost server: refused while it was down
    assert not retried[0]["live"] and f"{a.url} refused the connection" in retried[0]["last_error"], retried[0]
    assert [t.termination for t in while_down.trajectories] == ["max_steps", "max_steps"]
    assert after_b - opened_b == 2  # both of the group's contexts on the live server
    assert [t.termination for t in rejoined.trajectories] == ["max_steps", "max_steps"]
    assert final[0]["live"] and final[0]["launches"] == 2 and final[0]["opened"] > opened_a, final


def test_refused_endpoint_stops_the_start_with_the_fix(servers, token):
    dead = f"ws://127.0.0.1:{_free_port()}/"

    async def go():
        with pytest.raises(RemoteEndpointError) as info:
            await BrowserPool(PoolConfig(remote_endpoints=(servers[1].url, dead), remote_token_file=token,
                                         contexts_per_browser=1)).start()
        return str(info.value)

    msg = asyncio.run(go())
    assert msg.startswith("config.env.remote_endpoints: 1 of 2 browser servers cannot be used"), msg
    assert f"{dead} refused the connection" in msg and "python -m jaxwebrl.browser.serve --host 127.0.0.1" in msg, msg
    assert servers[1].url not in msg
    assert "run-server" not in msg and "--unsafe" not in msg and "0.0.0.0" not in msg, msg


def test_wrong_secret_stops_the_start_with_the_fix(servers, tmp_path):
    other = token_file(tmp_path, "other.token")

    async def go():
        with pytest.raises(RemoteEndpointError) as info:
            await BrowserPool(PoolConfig(remote_endpoints=(servers[1].url,), remote_token_file=other,
                                         contexts_per_browser=1)).start()
        return str(info.value)

    msg = asyncio.run(go())
    assert f"{servers[1].url} refused this pool's token; fix: give config.env.remote_token_file" in msg, msg
    assert "wrong token" in servers[1].log(), servers[1].log()


def test_plain_playwright_server_is_refused(tmp_path):
    """A plain `playwright run-server` (here on loopback, without --unsafe) would launch a browser without the
    safety flags: the pool reads the command line back and refuses it."""
    port = _free_port()
    proc = start_group([sys.executable, "-m", "playwright", "run-server", "--port", str(port), "--host", "127.0.0.1"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None and "Listening on" in proc.stdout.readline()
        url = f"ws://127.0.0.1:{port}/"

        async def go():
            with pytest.raises(RemoteEndpointError) as info:
                await BrowserPool(PoolConfig(remote_endpoints=(url,), remote_token_file=token_file(tmp_path),
                                             contexts_per_browser=1)).start()
            return str(info.value)

        msg = asyncio.run(go())
    finally:
        stop_group(proc, grace_s=0)
    assert f"{url} is not a jaxwebrl browser server" in msg and "python -m jaxwebrl.browser.serve" in msg, msg


def test_fleet_config_errors_name_the_field():
    far = "ws://10.1.2.3:3000/"
    with pytest.raises(FieldError, match=r"egress_host: '127\.0\.0\.1' is loopback, so the browsers at ws://10\.1\.2\.3"):
        BrowserConfig(remote_endpoints=far)
    assert BrowserConfig(remote_endpoints=far, egress_host="10.1.2.9").pool_config().egress_host == "10.1.2.9"
    with pytest.raises(FieldError, match="egress_host: '::1' is not an IPv4 address or host name"):
        BrowserConfig(egress_host="::1")
    with pytest.raises(FieldError, match="remote_endpoints: an endpoint is listed twice"):
        BrowserConfig(remote_endpoints="ws://127.0.0.1:1/, ws://127.0.0.1:1/")
    with pytest.raises(FieldError, match="remote_backoff_max_s"):
        BrowserConfig(remote_backoff_s=5.0, remote_backoff_max_s=1.0)
    pc = BrowserConfig(remote_endpoints="ws://127.0.0.1:1/", remote_token_file="/etc/fleet.token",
                       remote_backoff_s=0.5, remote_backoff_max_s=8).pool_config()
    assert pc.remote_token_file == "/etc/fleet.token" and (pc.reconnect_backoff_s, pc.reconnect_backoff_max_s) == (0.5, 8)


def test_remote_browsers_dial_the_gateway_at_egress_host(servers, token, sites):
    """`egress_host` (here 127.0.0.2; on a cluster this host's address the servers reach) is where the gateway
    listens and what the remote browsers' proxy and resolver rules name: pages load through it, and a
    request to an origin outside the episode's allowlist is refused there."""
    shop = sites.urls["shop"]
    cfg = PoolConfig(remote_endpoints=(servers[1].url,), remote_token_file=token, contexts_per_browser=1,
                     egress_host="127.0.0.2")

    async def go():
        async with BrowserPool(cfg, ENV) as pool:
            async with pool.episode(pg_task(sites, f"/?fetch={shop}/"), 0) as (env, obs):
                page = env.session.page
                await page.wait_for_function("() => document.getElementById('log').textContent !== 'ready'")
                return (obs.text, await page.locator("#log").inner_text(), pool.gateway.forwarded,
                        pool.gateway.refused, pool.launch_args())

    text, log, forwarded, refused, args = asyncio.run(go())
    assert "Playground" in text and forwarded >= 1  # the page came through the gateway at 127.0.0.2
    assert log == "fetch blocked" and refused >= 1  # the other origin was refused there
    rules = next(a for a in args if a.startswith("--host-resolver-rules="))
    assert "MAP 127.0.0.2:" in rules and "127.0.0.1:" not in rules and rules.endswith("MAP * ~NOTFOUND")
