"""Local sites: every task file entry is solved by its scripted solution (through the webarena action
space), and each evaluator type accepts a correct end state and rejects a wrong one."""

from __future__ import annotations

import asyncio

import pytest

from envs.evaluators import contents_match, string_match, url_match
from envs.local_sites import load_task_specs
from jaxwebrl.browser import EnvConfig
from tests.browser.conftest import find_id
from envs.site_solutions import SOLUTIONS

pytestmark = pytest.mark.timeout(300)
CFG = EnvConfig(action_space="webarena")


async def run_solution(pool, sites, task_id: str, steps: list[tuple]):
    task = sites.get_task(task_id)
    async with pool.episode(task, 0, CFG) as (env, obs):
        for step in steps:
            kind = step[0]
            if kind == "see":
                assert step[1] in obs.text, (task_id, step, obs.text[:2000])
                continue
            if kind == "click":
                text = f"```click [{find_id(obs, step[1], step[2])}]```"
            elif kind == "type":
                text = f"```type [{find_id(obs, step[1], step[2])}] [{step[3]}] [{step[4]}]```"
            elif kind == "select":
                text = f'<answer>do(action="Select Dropdown Option", argument="{step[3]}", element="{find_id(obs, step[1], step[2])}")</answer>'
            elif kind == "back":
                text = "```go_back```"
            else:
                text = f"```stop [{step[1]}]```"
            if kind == "select":  # exercise a second action space on the same session
                from jaxwebrl.browser.actions import get_action_space

                space = get_action_space("webagent_r1")
                res = await space.execute(env.session, space.parse(text)[0])
                assert not res.invalid and not res.failed, res.feedback
                r = await env.step("```scroll [up]```")
            else:
                r = await env.step(text)
            assert not r.format_error and not r.feedback.startswith("Failed"), (task_id, step, r.feedback)
            obs = r.observation
        return await env.evaluate()


def test_task_files_are_well_formed(sites):
    specs = load_task_specs()
    assert len(specs) >= 30
    assert {s["site"] for s in specs} == {"shop", "wiki"}
    assert {s["difficulty"] for s in specs} == {"easy", "medium", "hard"}
    assert {"search", "navigation", "forms", "multi-step"} <= {s["category"] for s in specs}
    kinds = {k for s in specs for k in s["eval"]["eval_types"]}
    assert kinds == {"string_match", "url_match", "program_html"}
    assert set(SOLUTIONS) == {s["task_id"] for s in specs}
    train, test = set(sites.task_ids("train")), set(sites.task_ids("test"))
    assert train and test and not train & test


def test_every_task_is_solvable(runner, pool, sites):
    async def go():
        ids = sorted(SOLUTIONS)
        failures = []
        for i in range(0, len(ids), 4):
            batch = ids[i:i + 4]
            results = await asyncio.gather(*(run_solution(pool, sites, t, SOLUTIONS[t]) for t in batch))
            failures += [(t, r.info) for t, r in zip(batch, results) if not r.success]
        assert not failures, failures

    runner.run(go(), timeout=280)


WRONG = {
    # exact string_match: a wrong count
    "shop_004": [("click", "link", "Outdoor"), ("stop", "4")],
    # must_include string_match: another product's price
    "shop_001": [("stop", "$19.99")],
    # url_match: wrong category
    "shop_002": [("click", "link", "Outdoor")],
    # program_html: wrong color in the cart
    "shop_005": [("click", "link", "Outdoor"), ("click", "link", "Trail Water Bottle"),
                 ("select", "combobox", "Color", "Green"), ("type", "spinbutton", "Quantity", "2", 0),
                 ("click", "button", "Add to cart")],
    # program_html with must_exclude: the lamp was not removed
    "shop_012": SOLUTIONS["shop_012"][:-1],
    # program_html: comment posted under another name
    "wiki_007": [("click", "link", "Talk"), ("type", "textbox", "Your name", "Samuel", 0),
                 ("type", "textbox", "Comment", "Something else.", 0), ("click", "button", "Post comment")],
}


def test_evaluators_reject_wrong_end_states(runner, pool, sites):
    async def go():
        results = await asyncio.gather(*(run_solution(pool, sites, t, s) for t, s in WRONG.items()))
        assert [r.success for r in results] == [False] * len(WRONG), [(t, r.info) for t, r in zip(WRONG, results)]

    runner.run(go())


def test_evaluator_functions():
    assert string_match("3", {"exact_match": "3"}) and not string_match("3 items", {"exact_match": "3"})
    assert string_match("The price is $34.99.", {"must_include": ["34.99"]})
    assert not string_match(None, {"must_include": ["x"]})
    assert string_match("48200 people", {"must_include": ["48,200 |OR| 48200"]})
    assert url_match("http://h:1/category/home?sort=price_desc&x=1", "http://h:1/category/home/?sort=price_desc")
    assert not url_match("http://h:1/category/home", "http://h:1/category/home?sort=price_desc")
    assert not url_match("http://h:2/category/home", "http://h:1/category/home")
    assert contents_match("a b c", {"must_include": ["a", "c"]}) and not contents_match("a", {"must_exclude": ["a"]})


def test_page_latency_is_lognormal_and_waits_on_the_request_thread():
    """Draws follow the configured quantiles; a server with latency holds each page (not its static files) on
    the request's own thread, so 8 concurrent pages wait side by side, not one after another."""
    import concurrent.futures
    import time
    import urllib.request

    import numpy as np

    from envs.sites import SITES
    from envs.sites.latency import PageLatency
    from envs.sites.server import SiteServer

    lat = PageLatency.parse("lognormal:median=1.0,p90=3.0,max=20", seed=1)
    draws = np.array([lat.draw() for _ in range(40_000)])
    assert abs(np.median(draws) - 1.0) < 0.03 and abs(np.quantile(draws, 0.9) - 3.0) < 0.1 and draws.max() <= 20
    assert PageLatency.parse("off") is None and PageLatency.parse("lognormal") == PageLatency()
    assert PageLatency.parse("webgym") == PageLatency(1.0, 10.0, 45.0)  # the preset is the spec it names
    with pytest.raises(ValueError, match="unknown parameter 'p95'"):
        PageLatency.parse("lognormal:p95=3")
    with pytest.raises(ValueError, match="the only kind is 'lognormal'"):
        PageLatency.parse("pareto:alpha=1")

    import threading

    class SideBySide(PageLatency):
        """0.4 s per page, drawn only once all 8 pages are waiting at once (a barrier, with a safety limit):
        pages served one after another would break it, whatever the machine's speed."""

        def __init__(self) -> None:
            super().__init__(0.4, 0.4, 0.4)  # sigma 0: always 0.4 s
            self.draws, self.together = 0, threading.Barrier(8)

        def draw(self) -> float:
            self.draws += 1
            self.together.wait(120)
            return super().draw()

    latency = SideBySide()
    with SiteServer(SITES["shop"], latency=latency) as server:
        def fetch(path: str) -> float:
            t0 = time.perf_counter()
            with urllib.request.urlopen(server.url + path, timeout=300) as r:
                assert r.status == 200 and r.read()
            return time.perf_counter() - t0

        fetch("/static/site.css")
        assert latency.draws == 0  # static files are not delayed
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            each = list(ex.map(fetch, ["/"] * 8))
        assert latency.draws == 8 and not latency.together.broken and min(each) >= 0.4
