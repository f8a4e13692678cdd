"""Scripted demonstrations in every action grammar, played in real Chromium: MiniWoB++ and local-site plans
written as webarena fenced actions, webagent_r1 do()/exit(), bid calls and openwebrl coordinate tool calls
(element box centres on 0..1000) all succeed; and every (action space, prompt format, context strategy) a
paper config uses renders them into BC trajectories whose loss falls on the response tokens."""

from __future__ import annotations

import asyncio
import importlib
import re

import pytest

from envs import site_solutions
from envs.miniwob_solvers import SOLVABLE, plan
from jaxwebrl.agent.context import COMPRESSED, OMITTED_SCREENSHOT
from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.agent.prompts import extract_tag, get_format
from jaxwebrl.browser import EnvConfig, ObsConfig
from jaxwebrl.browser.actions import ParseError, get_action_space
from jaxwebrl.config import apply_variants
from jaxwebrl.data.samples import build_samples
from jaxwebrl.demos.collect import collect_demonstrations, demo_texts, render_demonstrations
from jaxwebrl.models.tokenizer import train_tokenizer

pytestmark = pytest.mark.timeout(300)

# (action space, prompt format reading it): the four papers' grammars and the local run's bid.
PAIRS = [("webarena", "browseragent"), ("webarena", "webgym"), ("webagent_r1", "webagent_r1"), ("bid", "bid"),
         ("openwebrl", "openwebrl")]
SEEDS = (3, 4, 11)
PAPER_CONFIGS = ("grpo_openwebrl", "reinforce_webgym", "rft_browseragent", "grpo_tpu", "sft_webagent_r1",
                 "sft_browseragent")
SITE_TASKS_FOR_RENDER = ("shop_001", "shop_006", "wiki_011")  # a noted fact, a dropdown, a go-back
# every step kind: type + Enter, noted facts, answers, dropdowns, checkboxes, multi-page forms, textareas, go-back
# (scripts/check_demonstrations.py plays all 32 local-site tasks in every grammar)
SITE_TASKS = ("shop_001", "shop_005", "shop_006", "shop_007", "shop_012", "wiki_007", "wiki_009", "wiki_011")
_CACHE: dict[tuple, list] = {}


def env_config(space: str, text_mode: str = "axtree") -> EnvConfig:
    return EnvConfig(action_space=space, obs=ObsConfig(text_mode=text_mode))


def miniwob_plan(name, goal, elements):
    return plan(name, goal, elements)


async def collect(pool, suite, task_ids, seeds, solver, space, fmt, text_mode="axtree"):
    tasks = [suite.get_task(t) for t in task_ids]
    return await collect_demonstrations(pool, env_config(space, text_mode), tasks, seeds, solver, fmt,
                                        concurrency=8, only_successful=False)


def cached(runner, pool, suite, kind, space, fmt, text_mode="axtree"):
    key = (kind, space, fmt, text_mode)
    if key not in _CACHE:
        if kind == "miniwob":
            coro = collect(pool, suite, [f"miniwob.{t}" for t in SOLVABLE], SEEDS, miniwob_plan, space, fmt, text_mode)
        else:
            coro = collect(pool, suite, SITE_TASKS_FOR_RENDER, [0], site_solutions.plan, space, fmt, text_mode)
        _CACHE[key] = runner.run(coro, timeout=280)
    return _CACHE[key]


def check_responses(demos, space: str, fmt: str) -> int:
    """Every response parses in the grammar and passes the format gate; returns the number of responses."""
    n = 0
    for d in demos:
        for s in d.steps:
            parsed = get_action_space(space).parse(s.response_text)
            assert not isinstance(parsed, ParseError), (d.task_id, s.response_text, parsed)
            assert get_format(fmt).format_ok(s.response_text), s.response_text
            n += 1
    return n


@pytest.mark.parametrize("space,fmt", PAIRS)
def test_miniwob_demonstrations_succeed_in_every_grammar(runner, pool, miniwob, space, fmt):
    demos = cached(runner, pool, miniwob, "miniwob", space, fmt)
    assert len(demos) == len(SOLVABLE) * len(SEEDS) > 0
    failed = [(d.task_id, d.seed, d.error) for d in demos if not d.success]
    assert not failed, failed
    assert check_responses(demos, space, fmt) >= len(demos)
    if space == "openwebrl":  # coordinates, never element ids
        first = demos[0].steps[0].response_text
        assert '"x": ' in first and '"y": ' in first, first
    if (space, fmt) == ("webarena", "webgym"):
        assert all(extract_tag(s.response_text, "memory") for d in demos for s in d.steps)


@pytest.mark.parametrize("space,fmt", [p for p in PAIRS if p[1] != "webgym"])
def test_local_site_demonstrations_succeed_in_every_grammar(runner, pool, sites, space, fmt):
    tasks = [sites.get_task(t) for t in SITE_TASKS]
    demos = runner.run(collect_demonstrations(pool, env_config(space), tasks, [0], site_solutions.plan, fmt,
                                              concurrency=4, only_successful=False), timeout=290)
    assert len(demos) == len(SITE_TASKS) > 0
    failed = [(d.task_id, d.error) for d in demos if not d.success]
    assert not failed, failed
    assert check_responses(demos, space, fmt) > len(demos)


def test_mismatched_prompt_format_is_refused(runner, pool, miniwob):
    with pytest.raises(ValueError, match="env.action_space='webagent_r1'"):
        runner.run(collect(pool, miniwob, ["miniwob.click-button"], [1], miniwob_plan, "bid", "webagent_r1"))


def paper_setup(name: str) -> tuple[str, str, str, str, int, str]:
    """A paper config's prompt setup. A screenshot config (text_mode 'none') renders here with its text stand-in,
    the local variant's page text (prompt format, strategy and action space stay the paper's); the screenshot
    prompts are tested in tests/test_agent_vl.py."""
    c = importlib.import_module(f"configs.{name}").get_config()
    if c.env.text_mode == "none":
        c.local = True
        c = apply_variants(c)
    return c.env.action_space, c.agent.prompt_format, c.agent.strategy, c.env.text_mode, int(c.agent.last_k), c.data.per


@pytest.mark.parametrize("config", PAPER_CONFIGS)
def test_paper_configs_render_their_demonstrations(runner, pool, miniwob, sites, config):
    space, fmt, strategy, text_mode, last_k, per = paper_setup(config)
    demos = cached(runner, pool, miniwob, "miniwob", space, fmt, text_mode) + cached(runner, pool, sites, "sites", space, fmt, text_mode)
    assert demos and all(d.success for d in demos), [(d.task_id, d.error) for d in demos if not d.success]
    agent = AgentConfig(strategy=strategy, prompt_format=fmt, last_k=last_k)
    tok = train_tokenizer(demo_texts(demos, agent), vocab_size=800)
    trajs = render_demonstrations(demos, tok, agent)
    assert len(trajs) == len(demos)
    system = get_format(fmt).system_prompt()
    later_turns = 0
    for d, t in zip(demos, trajs):
        assert len(t.turns) == len(d.steps) > 0
        for k, (step, turn) in enumerate(zip(d.steps, t.turns)):
            prompt = tok.decode(turn.prompt_ids)
            assert system in prompt and d.goal in prompt
            assert tok.decode(turn.response_ids[:-1]) == step.response_text
            assert step.observation.text in prompt  # the current page is always shown in full
            if k == 0:
                continue
            later_turns += 1
            prev = d.steps[k - 1]
            if strategy == "compress_past":
                assert COMPRESSED in prompt and prev.response_text in prompt and turn.history_ids is not None
            elif strategy == "last_k_screenshots":
                assert OMITTED_SCREENSHOT in prompt and prev.response_text in prompt
            elif strategy == "memory":
                assert f"Memory: {extract_tag(prev.response_text, 'memory')}" in prompt
            elif strategy == "current_plus_history":
                assert f"{k}. {prev.action}" in prompt
                for s in d.steps[:k]:
                    assert s.conclusion is None or s.conclusion in prompt
    assert later_turns > 0
    if strategy == "current_plus_history":  # a fact noted on a site page reaches later prompts
        assert any(s.conclusion for d in demos for s in d.steps)
    samples = build_samples(trajs, per=per, norm="token_mean")
    assert samples
    trained = sum(s.num_trained for s in samples)
    assert trained == sum(len(turn.response_ids) for t in trajs for turn in t.turns)
    for s in samples[:5]:  # the loss is on the response tokens, which decode to a parsable action
        text = tok.decode(s.tokens[s.loss_mask.astype(bool)])
        assert not isinstance(get_action_space(space).parse(text), ParseError), text


@pytest.mark.parametrize("fmt,form", [("bid", "element"), ("webagent_r1", "element"), ("bid", "name")])
def test_rationale_names_each_target_as_its_page_line_does(runner, pool, miniwob, fmt, form):
    """bc.rationale: before each action on an element the demonstration writes that element's id, role and
    name exactly as the page text shows them (ids after names), so every token of it is a copy; the action
    still parses to the same call, and the solver's episodes still succeed. bc.rationale_form="name" writes
    the name and id only (`'Okay' [3]`), still a piece of the page's line, and the role only for an element
    without a name."""
    space = "webagent_r1" if fmt == "webagent_r1" else "bid"
    cfg = EnvConfig(action_space=space, obs=ObsConfig(text_mode="axtree", ids_after_names=True))
    tasks = [miniwob.get_task(f"miniwob.{t}") for t in ("click-button", "click-link", "click-checkboxes", "enter-text")]
    demos = runner.run(collect_demonstrations(pool, cfg, tasks, [3, 5], miniwob_plan, fmt, concurrency=8,
                                              only_successful=False, rationale=True, rationale_form=form), timeout=280)
    assert len(demos) == 8 and all(d.success for d in demos), [(d.task_id, d.seed, d.error) for d in demos]
    named = with_role = role_off_enter_text = 0
    for d in demos:
        for s in d.steps:
            why = extract_tag(s.response_text, "think")
            ids = re.findall(r"'(\d+)'|element=\"(\d+)\"|\[(\d+)\]", s.action)
            assert ids, s.action  # every step of these plans acts on an element
            target = next(x for x in ids[0] if x)
            assert why and why.endswith(f"[{target}]"), (s.response_text, s.action)
            assert why in s.observation.text, (why, s.observation.text)  # a copy of the page's own line
            line = next(ln.strip() for ln in s.observation.text.splitlines() if re.search(rf" \[{target}\](\s|$)", ln))
            head = line.split(f" [{target}]")[0] + f" [{target}]"  # role, name, id: the line without its properties
            assert why == head if form == "element" else head.endswith(why), (why, line)
            with_role += why == head
            role_off_enter_text += why == head and "enter-text" not in d.task_id
            parsed = get_action_space(space).parse(s.response_text)
            assert not isinstance(parsed, ParseError), s.response_text
            plain = get_action_space(space).parse(s.response_text.replace(why, ""))
            assert [(a.name, a.args) for a in parsed] == [(a.name, a.args) for a in plain]
            named += 1
    assert named >= 8
    thinks = [extract_tag(s.response_text, "think") for d in demos for s in d.steps]
    # element form: every think is the whole head. name form: the named buttons, links and checkboxes start with
    # their name, and only enter-text's nameless box keeps its role.
    assert (with_role == named) is (form == "element"), thinks
    assert (role_off_enter_text == 0) is (form == "name"), thinks
    assert sum(t.startswith("'") for t in thinks) == named - with_role, thinks


def test_a_play_lost_to_a_killed_browser_is_played_again(runner, miniwob):
    """A load-independent demonstration set: the browser is SIGKILLed right after the first play of
    click-button seed 3 loaded its page, so that play fails on its first action. With the default attempts
    the pair is played again in a fresh context and the collection equals a clean one, every observation and
    response text included (the tokenizer is trained on them); with attempts=1 the same kill loses it."""
    from jaxwebrl.browser.pool import BrowserPool, PoolConfig

    cfg = env_config("bid")
    tasks = [miniwob.get_task(f"miniwob.{t}") for t in ("click-button", "enter-text")]

    async def go(attempts: int) -> tuple[list, list, list[str]]:
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=2), cfg) as pool:
            clean = await collect_demonstrations(pool, cfg, tasks, [3], miniwob_plan, "bid", concurrency=1,
                                                 only_successful=False)
            kills: list[str] = []
            new_env = pool.new_env

            async def killing_env(*args, **kwargs):
                env = await new_env(*args, **kwargs)
                reset = env.reset

                async def reset_then_kill(task, seed):
                    obs = await reset(task, seed)
                    if not kills and task.task_id == "miniwob.click-button":
                        kills.append(task.task_id)
                        await pool.kill_browser(0)
                    return obs

                env.reset = reset_then_kill
                return env

            pool.new_env = killing_env
            again = await collect_demonstrations(pool, cfg, tasks, [3], miniwob_plan, "bid", concurrency=1,
                                                 only_successful=False, attempts=attempts)
            return clean, again, kills

    clean, again, kills = runner.run(go(3), timeout=280)
    assert kills == ["miniwob.click-button"]  # the kill happened, in the first play of that pair
    assert [d.success for d in clean] == [True, True] and [d.attempts for d in clean] == [1, 1]
    assert [d.attempts for d in again] == [2, 1] and len(again[0].earlier_errors) == 1, [d.earlier_errors for d in again]
    assert [d.success for d in again] == [True, True]
    assert demo_texts(again, AgentConfig()) == demo_texts(clean, AgentConfig())

    _, once, kills = runner.run(go(1), timeout=280)
    assert kills == ["miniwob.click-button"] and [d.success for d in once] == [False, True]
    assert once[0].attempts == 1 and once[0].error
