"""The trajectory viewer in real Chromium: episodes come from real episodes (real Chromium pages on
loopback, the real agent loop and `evaluation.evaluate`) played by a scripted policy that goes through the
Engine protocol (it reads the prompt and answers with fixed rules, so the test knows what each step did).
The page is then opened in Chromium with Playwright: it loads, the filters filter, a step shows the right
action, hostile page text and model output do not run script, and empty / failed runs still render."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import functools
import http.server
import io
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from jaxwebrl.agent import AgentConfig, run_episode
from jaxwebrl.browser import BrowserPool, EnvConfig, EvalResult, ObsConfig, PoolConfig
from jaxwebrl.browser.config import DEFAULT_CHROMIUM_ARGS, find_chromium
from jaxwebrl.browser.session import BrowserSession
from jaxwebrl.engines.base import Generation, SamplingParams
from jaxwebrl.evaluation.evaluate import evaluate
from jaxwebrl.models.tokenizer import train_tokenizer
from jaxwebrl.viewer import (
    TURN_INFO_KEY,
    ViewerLog,
    episodes_from_reports,
    episodes_from_trajectories,
    sample_trajectories,
    write_viewer,
)

HOSTILE_OUTPUT = ("<script>window.__xss = 'output-script'; alert('output')</script>"
                  "<img src=x onerror=\"window.__xss = 'output-img'; alert('output')\">")
# page text without single quotes, so the a11y tree's repr() shows it verbatim
HOSTILE_TEXT_1 = "<script>window.__xss = 3; alert(3)</script>"
HOSTILE_TEXT_2 = '<img src=x onerror="window.__xss = 4; alert(4)">'

PAGE = """<!DOCTYPE html><html><head><title>{title}</title></head><body>
<h1>{title}</h1>
<p>{text}</p>
<button onclick="document.getElementById('out').textContent = 'clicked Yes'">Yes</button>
<button onclick="document.getElementById('out').textContent = 'clicked No'">No</button>
<div id="out"></div>
</body></html>"""


def _html_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


@dataclass
class ButtonTask:
    """Open `url`; the goal names a button; done once a button was clicked; success if it was `target`."""

    task_id: str
    url: str
    target: str

    def allowed_origins(self) -> tuple[str, ...]:
        return (self.url.rsplit("/", 1)[0],)

    async def setup(self, session: BrowserSession, seed: int) -> str:
        await session.goto(self.url)
        return f'Click the "{self.target}" button.'

    async def is_done(self, session: BrowserSession) -> bool:
        return bool(await session.page.inner_text("#out"))

    async def evaluate(self, session: BrowserSession, answer: str | None) -> EvalResult:
        ok = await session.page.inner_text("#out") == f"clicked {self.target}"
        return EvalResult(float(ok), ok)


class ScriptedEngine:
    """A scripted policy behind the Engine protocol: it decodes the prompt, and on the first turn of a page
    titled "hostile" answers with hostile markup (not an action); otherwise it clicks the "Yes" button.
    Logprobs are -(i+1)/10 for token i, so their sum and mean are known."""

    name = "scripted"

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.clicked: dict[str, list[str]] = {}  # session -> element ids clicked

    async def generate(self, prompt_ids, params: SamplingParams, *, session_id=None) -> Generation:
        prompt = self.tok.decode(prompt_ids, skip_special_tokens=False)
        current = prompt.rsplit("<|im_start|>user\n", 1)[-1]
        first_turn = prompt.count("<|im_start|>user\n") == 1
        if "hostile" in current and first_turn:
            text = HOSTILE_OUTPUT
        else:
            found = re.search(r"\[(\w+)\] button 'Yes'", current)
            assert found, f"the scripted policy found no 'Yes' button in the prompt's last turn:\n{current[-3000:]}"
            bid = found.group(1)
            self.clicked.setdefault(session_id, []).append(bid)
            text = f"click('{bid}')"
        ids = self.tok.encode(text, add_special_tokens=False) + [self.end]
        return Generation(ids, [-(i + 1) / 10 for i in range(len(ids))], "stop", len(prompt_ids), 0, 0)

    async def update_weights(self, weights, version: int) -> None:
        return None

    async def health(self):
        return {"ok": True}

    async def close(self) -> None:
        return None


@pytest.fixture(scope="module")
def down_url():
    """A loopback url that refuses connections for the whole module: its port stays bound (never listening), so
    no other server (the pool's own egress ports included) can be given it between now and the episode."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/gone.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "hostile.html").write_text(PAGE.format(title="hostile", text=_html_escape(HOSTILE_TEXT_1) + "<br>"
                                                   + _html_escape(HOSTILE_TEXT_2)))
    (root / "plain.html").write_text(PAGE.format(title="plain", text="Two buttons."))
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    texts = ["click('12') button 'Yes' Click the button", "<script>alert(1)</script> <img src=x onerror=1>"] * 20
    return train_tokenizer(texts, vocab_size=300, out_dir=tmp_path_factory.mktemp("tok"))


AGENT = AgentConfig(strategy="compress_past", prompt_format="bid", max_steps=3, max_format_errors=3,
                    max_new_tokens=512, max_context_tokens=8192)


@pytest.fixture(scope="module")
def run(site, down_url, tokenizer):
    """Real episodes: two 'training iterations' through run_episode and one evaluation through
    evaluation.evaluate (hostile page, a task the scripted policy solves, one it fails, one whose page is down)."""
    tasks = [ButtonTask("hostile", f"{site}/hostile.html", "Yes"), ButtonTask("plain-yes", f"{site}/plain.html", "Yes"),
             ButtonTask("plain-no", f"{site}/plain.html", "No"),
             ButtonTask("down", down_url, "Yes")]
    env = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", text_budget_chars=2000),
                    step_timeout_s=20.0)
    shot_env = EnvConfig(action_space="bid", obs=ObsConfig(text_mode="axtree", screenshot=True), step_timeout_s=20.0)
    engine = ScriptedEngine(tokenizer)

    async def go():
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=4), env) as pool:
            training = {}
            for it in range(2):
                trajs = []
                for task in tasks:
                    e = await pool.new_env(env)
                    try:
                        trajs.append((await run_episode(e, engine, tokenizer, task, seed=it, cfg=AGENT)).trajectory)
                    finally:
                        await e.close()
                training[it] = trajs
            report = await evaluate(engine, tokenizer, pool, env, tasks, [100, 101], AGENT, concurrency=2)
            shots = []
            for agent in (AGENT, dataclasses.replace(AGENT, viewer_screenshots=False)):
                e = await pool.new_env(shot_env)
                try:
                    shots.append((await run_episode(e, engine, tokenizer, tasks[1], seed=7, cfg=agent)).trajectory)
                finally:
                    await e.close()
            return training, report, shots

    # in a thread of its own: the sync Playwright of the `browser` fixture may already run a loop in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        training, report, (shot, no_shot) = pool.submit(asyncio.run, go()).result()
    return {"tasks": tasks, "training": training, "report": report, "shot": shot, "no_shot": no_shot,
            "engine": engine}


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=find_chromium(), args=list(DEFAULT_CHROMIUM_ARGS), headless=True)
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page()
    events: list[str] = []
    page.on("dialog", lambda d: (events.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("pageerror", lambda exc: events.append(f"pageerror: {exc}"))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    return page, events


def _visible(page) -> int:
    return page.locator("#episodes .episode:visible").count()


@pytest.fixture(scope="module")
def viewer_file(run, tmp_path_factory, tokenizer):
    """The run's viewer as the online loop / report would write it: sampled training episodes kept in a
    ViewerLog per iteration, plus every evaluated episode."""
    out = tmp_path_factory.mktemp("viewer")
    log = ViewerLog(out / "viewer_episodes.jsonl")
    for it, trajs in run["training"].items():
        log.add_trajectories(trajs, policy="scripted", iteration=it, k=3, seed=it)
    log.add_trajectories(run["training"][1], policy="scripted", iteration=1, k=3, seed=1)  # iteration 1 again (resume)
    assert len(log.read()) == 6
    episodes = log.read() + episodes_from_reports({"eval": run["report"]}, tokenizer=tokenizer)
    return write_viewer(out / "viewer.html", episodes), episodes


def test_records_carry_what_the_viewer_shows(run):
    hostile = next(t for t in run["training"][0] if t.task_id == "hostile")
    info = hostile.metadata[TURN_INFO_KEY]
    assert len(info) == len(hostile.turns) == 2
    assert info[0]["parsed_action"] == "" and info[0]["feedback"].startswith("Invalid action")
    assert HOSTILE_TEXT_1 in info[0]["observation"] and "Task: " in info[0]["observation"]
    assert info[1]["parsed_action"].startswith("click(bid=")
    assert info[1]["element"]["role"] == "button" and info[1]["element"]["name"] == "Yes"
    assert info[1]["observation"].startswith("Feedback: Invalid action")  # the feedback line the model saw
    assert len(run["report"].trajectories) == run["report"].episodes == 8


def test_viewer_loads_and_filters_filter(browser, viewer_file):
    path, episodes = viewer_file
    assert len(episodes) == 14  # 2 iterations x 3 sampled + 4 tasks x 2 eval seeds
    page, events = _open(browser, path)
    assert _visible(page) == len(episodes) and page.inner_text("#count") == str(len(episodes))
    cases = [
        ("#f-task", "plain-no", sum(e.task == "plain-no" for e in episodes)),
        ("#f-policy", "eval", 8),
        ("#f-success", "solved", sum(e.success for e in episodes)),
        ("#f-termination", "env_error", sum(e.termination == "env_error" for e in episodes)),
        ("#f-iteration", "1", 3),
    ]
    for select, value, expected in cases:
        assert 0 < expected < len(episodes)
        page.select_option(select, value)
        assert _visible(page) == expected, (select, value)
        assert page.inner_text("#count") == str(expected)
        page.select_option(select, "")
        assert _visible(page) == len(episodes)
    # filters combine: eval episodes of the task the policy fails, all failed
    page.select_option("#f-policy", "eval")
    page.select_option("#f-task", "plain-no")
    assert _visible(page) == 2
    page.select_option("#f-success", "solved")
    assert _visible(page) == 0
    assert events == []


def test_a_step_shows_its_action(browser, viewer_file, run):
    path, episodes = viewer_file
    index = next(i for i, e in enumerate(episodes) if e.policy == "eval" and e.task == "hostile")
    ep = episodes[index]
    traj = next(t for t in run["report"].trajectories if t.metadata["episode_id"] == ep.key)
    (clicked,) = run["engine"].clicked[ep.key]  # the element the scripted policy clicked at step 2
    page, events = _open(browser, path)
    page.click(f"#episodes .episode[data-index='{index}']")
    assert page.locator("#steps .step").count() == 2
    page.click("#steps .step[data-index='1']")
    assert page.inner_text("#step-action") == f"click(bid='{clicked}', button='left')"
    assert page.inner_text("#step-output") == f"click('{clicked}')" == traj.turns[1].action
    assert page.inner_text("#step-element") == f'[{clicked}] button "Yes"'
    assert page.inner_text("#step-feedback").startswith(f"Clicked [{clicked}] button 'Yes'")
    numbers = page.inner_text("#step-numbers")
    lp = traj.turns[1].response_logprobs
    assert f"prompt tokens {len(traj.turns[1].prompt_ids)}" in numbers
    assert f"logprob sum {sum(lp):.3f}, mean {sum(lp) / len(lp):.3f}" in numbers
    assert "reward 1.000 (episode reward)" in numbers
    assert page.locator("#step-prompt").count() == 1  # eval episodes were built with the tokenizer
    page.keyboard.press("ArrowLeft")  # keys move between steps
    assert page.inner_text("#step-action") == "(none)"
    assert page.inner_text("#step-feedback").startswith("Invalid action")
    assert events == []


def test_hostile_page_text_and_model_output_do_not_run(browser, viewer_file):
    path, episodes = viewer_file
    hostile = [i for i, e in enumerate(episodes) if e.task == "hostile"]
    assert hostile
    page, events = _open(browser, path)
    shown_output = shown_page = 0
    for i in hostile:
        page.click(f"#episodes .episode[data-index='{i}']")
        for j in range(page.locator("#steps .step").count()):
            page.click(f"#steps .step[data-index='{j}']")
            shown_output += page.inner_text("#step-output") == HOSTILE_OUTPUT
            obs = page.inner_text("#step-observation")
            shown_page += HOSTILE_TEXT_1 in obs and HOSTILE_TEXT_2 in obs
    assert shown_output == len(hostile) and shown_page >= len(hostile)  # shown, as text
    page.wait_for_timeout(300)
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.scripts.length") == 2  # the data block and the viewer's own script
    assert page.evaluate("Array.from(document.images).every(i => i.src.startsWith('data:image/'))")
    assert events == []


def test_failed_and_empty_runs_render(browser, viewer_file, tmp_path):
    path, episodes = viewer_file
    index = next(i for i, e in enumerate(episodes) if e.termination == "env_error")
    assert episodes[index].steps == [] and "reset failed" in episodes[index].error
    page, events = _open(browser, path)
    page.click(f"#episodes .episode[data-index='{index}']")
    assert "reset failed" in page.inner_text("#episode-error")
    assert "No step was played" in page.inner_text("#steps")
    empty, events_empty = _open(browser, write_viewer(tmp_path / "empty.html", []))
    assert empty.inner_text("#count") == "0" and _visible(empty) == 0
    assert "no episodes" in empty.inner_text("#steps")
    assert events == [] and events_empty == []


def test_screenshot_with_the_hit_element_marked(browser, run, tmp_path):
    from PIL import Image

    traj = run["shot"]
    info = traj.metadata[TURN_INFO_KEY][0]
    (x, y, w, h), size = info["element"]["bbox"], info["screenshot_size"]
    assert info["screenshot"].startswith("data:image/png;base64,") and info["element"]["name"] == "Yes"
    assert tuple(size) == EnvConfig().viewport
    png = Image.open(io.BytesIO(base64.b64decode(info["screenshot"].split(",", 1)[1])))
    assert png.size == tuple(size)
    assert "screenshot" not in run["no_shot"].metadata[TURN_INFO_KEY][0]  # AgentConfig.viewer_screenshots=False
    log = ViewerLog(tmp_path / "log.jsonl")
    log.add_trajectories([traj], "scripted", 0, k=1)
    (stored,) = log.read()  # the log keeps thumbnails, not the PNG as taken
    thumb = Image.open(io.BytesIO(base64.b64decode(stored.steps[0]["screenshot"].split(",", 1)[1])))
    assert thumb.width == 640 and stored.steps[0]["screenshot_size"] == list(size)
    page, events = _open(browser, write_viewer(tmp_path / "shot.html", episodes_from_trajectories([traj], "scripted")))
    page.click("#episodes .episode[data-index='0']")
    assert page.evaluate("document.getElementById('step-screenshot').naturalWidth") == 640  # the thumbnail
    img = page.locator("#step-screenshot").bounding_box()
    mark = page.locator("#step-marker").bounding_box()
    scale = img["width"] / size[0]
    border = 3  # the marker's border sits just outside the element's box
    assert abs(mark["x"] + border - (img["x"] + x * scale)) < 1.5
    assert abs(mark["y"] + border - (img["y"] + y * scale)) < 1.5
    assert abs(mark["width"] - 2 * border - w * scale) < 1.5 and abs(mark["height"] - 2 * border - h * scale) < 1.5
    assert events == []


def test_sampling_and_caps_bound_the_page(run, tmp_path):
    trajs = [t for ts in run["training"].values() for t in ts]
    picked = sample_trajectories(trajs, 4, seed=0)
    assert len(picked) == 4 and {t.task_id for t in picked} == {"hostile", "plain-yes", "plain-no", "down"}
    eps = episodes_from_trajectories(trajs, "scripted", 0, max_chars=50)
    assert any("more characters cut by the viewer" in s["observation"] for e in eps for s in e.steps)
    html = (write_viewer(tmp_path / "v.html", eps, max_episodes=3)).read_text()
    assert '"left_out":5' in html and html.count('"key":') == 3
    with pytest.raises(TypeError, match="episodes_from_trajectories"):
        write_viewer(tmp_path / "bad.html", trajs)


def test_trajectory_files_render_through_the_command_line(browser, run, tmp_path):
    from jaxwebrl.data.records import write_jsonl
    from jaxwebrl.viewer.__main__ import main

    files = []
    for it, trajs in run["training"].items():
        files.append(tmp_path / f"iter{it}.jsonl")
        assert write_jsonl(files[-1], trajs) == 4
    out = main([str(f) for f in files] + ["-o", str(tmp_path / "cli.html"), "--title", "from files"])
    page, events = _open(browser, out)
    assert _visible(page) == 8 and page.inner_text("#title") == "from files"
    page.select_option("#f-policy", "iter1")
    assert _visible(page) == 4
    index = page.locator("#episodes .episode:visible", has_text="hostile").first.get_attribute("data-index")
    page.click(f"#episodes .episode[data-index='{index}']")
    page.click("#steps .step[data-index='1']")
    assert page.inner_text("#step-action").startswith("click(bid=")  # turn_info survived the JSON round trip
    assert events == []
