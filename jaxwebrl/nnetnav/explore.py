"""NNetNav (papers/nnetnav.txt §3): demonstrations without demonstrators.

1. **Explore**: the policy engine at temperature plays episodes through the same browser pool and episode loop
   as RL (`agent.episode.run_episode`), its task line a persona sampled from an editable file. The env is
   wrapped by `ExplorationEnv`, which after every action asks the summariser for Delta(o_t, a_t, o_t+1) and at
   t in {4, 8, ..., t_max} (and, optionally, when the episode ends) labels the prefix (summaries ->
   instruction) and scores it with the ORM (1..5, pass >= 4). A rejected prefix ends the episode (pruning);
   an accepted one is written to `demonstrations.jsonl` at once and exploration goes on (nested
   demonstrations). A labeler / ORM / summariser failure (garbage, timeout, dead server) drops that prefix
   with its reason in `dropped.jsonl`; the episode goes on. Politeness limits hold per origin.
2. **Relabel**: for every stored (instruction, prefix) the agent's own prompt (the run's prompt format and
   context strategy, the instruction as the task) regenerates each step's response (reasoning + action) with
   the policy engine, and a final `stop [answer]` turn is appended (the answer from the stop prompt).
   Optional best-of-K: K-1 more agent episodes on the instruction, all scored by the ORM, the best kept.
   The output is per-step SFT data (`Trajectory` records: prompt ids -> response ids) with the instruction,
   persona, ORM score and pruning step in metadata.
3. **Report**: explorations, prefixes labelled / accepted / rejected / dropped, demonstrations per episode.

Every component is a prompt + an Engine call, so it runs with one model (the paper) or separate ones, in
process (JaxEngine) or on servers (SGLang, OpenAI-compatible), by what `NNetNavJudges` is given.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from jaxwebrl.agent.context import APPEND_ONLY, ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.episode import AgentConfig, run_episode
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.actions import get_action_space
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.env import StepResult
from jaxwebrl.browser.observation import Observation
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory, Turn
from jaxwebrl.demos.collect import answer_text
from jaxwebrl.engines.base import Engine, SamplingParams
from jaxwebrl.judges.backends import CallRunner, EngineBackend, JudgeBackend, JudgeOptions
from jaxwebrl.judges.base import Verdict
from jaxwebrl.judges.nnetnav import NNetNavORM, StateChangeSummarizer, TrajectoryLabeler
from jaxwebrl.nnetnav.config import NNetNavConfig
from jaxwebrl.nnetnav.politeness import Politeness, origin_of_task
from jaxwebrl.nnetnav.prompts import (
    explore_system_prompt, load_personas, parse_stop_answer, persona_task, sample_persona, stop_messages,
)

STOP_ACTION = {"bid": "send_msg_to_user('{answer}')", "webarena": "stop [{answer}]",
               "webagent_r1": 'exit(message="{answer}")',
               "openwebrl": '<tool_call>{{"name": "done", "arguments": {{"answer": "{answer}"}}}}</tool_call>'}


# ---- the three judges ---------------------------------------------------------------------------------


@dataclasses.dataclass
class NNetNavJudges:
    """Summariser, labeler and ORM; each on its own backend (the same one for the paper's single model)."""

    summarizer: StateChangeSummarizer
    labeler: TrajectoryLabeler
    orm: NNetNavORM

    @classmethod
    def on(cls, backend: JudgeBackend, options: JudgeOptions | None = None, *, action_space: str = "bid",
           pass_score: int = 4, labeler_backend: JudgeBackend | None = None,
           orm_backend: JudgeBackend | None = None) -> "NNetNavJudges":
        kw = {"action_space": action_space}
        return cls(StateChangeSummarizer(backend, options, **kw),
                   TrajectoryLabeler(labeler_backend or backend, options, **kw),
                   NNetNavORM(orm_backend or backend, options, pass_score=pass_score, **kw))

    @classmethod
    def on_engine(cls, engine: Engine, tokenizer: Any, options: JudgeOptions | None = None, **kw: Any) -> "NNetNavJudges":
        """All three on one engine that someone else owns (closing the judges leaves it running)."""
        return cls.on(EngineBackend(engine, tokenizer, owns_engine=False), options, **kw)

    async def summarize(self, before: str, action: str, after: str, task_id: str = "") -> Verdict:
        """Delta(o_t, a_t, o_t+1) as a one-turn judgment (the summary in `extra['summaries'][0]`)."""
        traj = Trajectory(task_id, [Turn([], [], observation=before, action=action)],
                          metadata={"final_observation": after})
        return await self.summarizer.judge(traj)

    async def label_and_score(self, task_id: str, steps: Sequence["ExploredStep"], summaries: Sequence[str],
                              final_page: str, last_feedback: str | None = None) -> tuple[Verdict, Verdict | None]:
        """(labeler verdict, ORM verdict or None when the labeler failed). The ORM also gets each action's
        feedback (a step stores the feedback of the action before it; `last_feedback` is the last action's),
        which the verifier trained here reads (`nnetnav.judge.kind='verifier'`)."""
        turns = [Turn([], [], observation=s.observation, action=s.response) for s in steps]
        feedback = [s.feedback or "" for s in steps[1:]] + [last_feedback or ""]
        meta = {"state_changes": list(summaries), "final_observation": final_page, "feedback": feedback}
        label = await self.labeler.judge(Trajectory(task_id, turns, metadata=meta))
        if not label.ok:
            return label, None
        meta = {**meta, "instruction": label.output}
        return label, await self.orm.judge(Trajectory(task_id, turns, metadata=meta))

    async def close(self) -> None:
        seen: set[int] = set()
        for j in (self.summarizer, self.labeler, self.orm):
            if j.backend is not None and id(j.backend) not in seen:
                seen.add(id(j.backend))
                await j.close()


# ---- what exploration stores ----------------------------------------------------------------------------


@dataclasses.dataclass
class ExploredStep:
    observation: str  # the page the action was taken on (as the agent saw it, without the summaries)
    response: str  # the explorer's full response
    action: str  # the executed action(s)
    feedback: str | None  # the env's message about the previous action, shown with `observation`


@dataclasses.dataclass
class ExplorationDemo:
    """An accepted (instruction, prefix) pair, before relabeling."""

    task_id: str
    seed: int
    episode_id: str
    persona: str
    instruction: str
    prune_step: int  # t: the prefix is steps[:t]
    orm_score: float
    summaries: list[str]
    steps: list[ExploredStep]
    final_observation: str  # the page after step t
    env_goal: str = ""  # the task's own utterance (MiniWoB++), kept to measure label accuracy

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ExplorationDemo":
        d = dict(d)
        d["steps"] = [ExploredStep(**s) for s in d["steps"]]
        return cls(**d)


def read_demos(path: str | Path) -> list[ExplorationDemo]:
    with open(path) as f:
        return [ExplorationDemo.from_dict(json.loads(line)) for line in f if line.strip()]


class DemoStore:
    """Appends each accepted demonstration (and each dropped prefix) to disk the moment it is decided, so a
    later failure loses nothing already stored."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.demos_path = self.dir / "demonstrations.jsonl"
        self.dropped_path = self.dir / "dropped.jsonl"
        self.demos: list[ExplorationDemo] = []
        self.dropped: list[dict[str, Any]] = []

    def add(self, demo: ExplorationDemo) -> None:
        with open(self.demos_path, "a") as f:
            f.write(demo.to_json() + "\n")
        self.demos.append(demo)

    def drop(self, record: dict[str, Any]) -> None:
        with open(self.dropped_path, "a") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.dropped.append(record)


# ---- one exploration episode ------------------------------------------------------------------------------


@dataclasses.dataclass
class PrefixCheck:
    t: int
    outcome: str  # accepted | rejected | dropped
    reason: str = ""
    instruction: str = ""
    score: float | None = None


class ExplorationEnv:
    """A BrowserEnv seen by `run_episode` during exploration (see the module doc): the task line is the
    persona, each action waits for politeness, is summarised, and at pruning steps the prefix is labelled and
    scored. Returning `done` on a rejected prefix ends the episode through the loop's own exit."""

    def __init__(self, env: Any, *, persona: str, judges: NNetNavJudges, cfg: NNetNavConfig, store: DemoStore,
                 politeness: Politeness, origin: str, seed: int, episode_id: str) -> None:
        self.env, self.persona, self.judges, self.cfg, self.store = env, persona, judges, cfg, store
        self.politeness, self.origin, self.seed, self.episode_id = politeness, origin, seed, episode_id
        self.schedule = set(cfg.schedule())
        self.task_id = ""
        self.env_goal = ""
        self.pages: list[Observation] = []
        self.steps: list[ExploredStep] = []
        self.summaries: list[str | None] = []
        self.summary_errors: dict[int, str] = {}
        self.checks: list[PrefixCheck] = []
        self.pruned_at: int | None = None
        self._feedback: str | None = None

    @property
    def goal(self) -> str:
        return persona_task(self.persona)

    async def reset(self, task: Any, seed: int = 0) -> Observation:
        obs = await self.env.reset(task, seed)
        self.task_id, self.env_goal = task.task_id, obs.goal
        self.pages = [obs]
        return self._shown(obs)

    def _shown(self, obs: Observation) -> Observation:
        """The observation the explorer reads: the persona as the goal, the summaries so far above the page."""
        text = obs.text
        done = [s for s in self.summaries if s]
        if self.cfg.show_summaries and done:
            text = "Trajectory so far:\n" + "\n".join(f"{i + 1}. {s}" for i, s in enumerate(done)) + "\n\n" + text
        return dataclasses.replace(obs, goal=self.goal, text=text)

    async def step(self, text: str) -> StepResult:
        await self.politeness.before_action(self.origin, self.episode_id)
        res = await self.env.step(text)
        before = self.pages[-1]
        action = "; ".join(a.raw for a in res.actions) if res.actions else text.strip()[:200]
        self.steps.append(ExploredStep(before.text, text, action, self._feedback))
        self._feedback = res.feedback
        self.pages.append(res.observation)
        t = len(self.steps)
        if res.termination_reason in ("env_error", "timeout"):
            self.summaries.append(None)
            return res
        v = await self.judges.summarize(before.text, text, res.observation.text, self.task_id)
        if v.ok:
            self.summaries.append(str(v.extra["summaries"][0]))
        else:
            self.summaries.append(None)
            self.summary_errors[t] = f"summariser {v.error_kind}: {v.error_detail}"[:500]
        if t in self.schedule:
            if not await self._check(t):
                self.pruned_at = t
                return dataclasses.replace(res, done=True, observation=self._shown(res.observation))
        return dataclasses.replace(res, observation=self._shown(res.observation))

    async def finish(self, termination: str) -> None:
        """`label_at_end`: label the whole episode when it ended off the schedule (stop, task done, horizon,
        format errors), unless it was pruned or the browser failed."""
        t = len(self.steps)
        if (self.cfg.label_at_end and t > 0 and self.pruned_at is None and termination != "env_error"
                and not (self.checks and self.checks[-1].t == t)):
            await self._check(t)

    async def _check(self, t: int) -> bool:
        """Label + score the prefix steps[:t]; False = the ORM rejected it (prune). Failures drop the prefix."""
        base = {"task_id": self.task_id, "seed": self.seed, "episode_id": self.episode_id, "t": t}
        missing = [i for i in range(1, t + 1) if self.summaries[i - 1] is None]
        if missing:
            reason = f"no state-change summary for step {missing[0]}: {self.summary_errors.get(missing[0], 'env error')}"
            self.checks.append(PrefixCheck(t, "dropped", reason))
            self.store.drop({**base, "reason": reason})
            return True
        summaries = [str(s) for s in self.summaries[:t]]
        last = self.steps[t].feedback if t < len(self.steps) else self._feedback
        label, orm = await self.judges.label_and_score(self.task_id, self.steps[:t], summaries, self.pages[t].text, last)
        if not label.ok or orm is None or not orm.ok:
            who, v = ("labeler", label) if not label.ok or orm is None else ("orm", orm)
            reason = f"{who} {v.error_kind}: {v.error_detail}"[:500]
            self.checks.append(PrefixCheck(t, "dropped", reason, label.output))
            self.store.drop({**base, "reason": reason, "instruction": label.output})
            return True
        if orm.reward < 1.0:
            self.checks.append(PrefixCheck(t, "rejected", f"ORM rejected it (score {orm.score:g})", label.output,
                                           orm.score))
            return False
        self.checks.append(PrefixCheck(t, "accepted", "", label.output, orm.score))
        self.store.add(ExplorationDemo(
            self.task_id, self.seed, self.episode_id, self.persona, label.output, t, orm.score, summaries,
            list(self.steps[:t]), self.pages[t].text, self.env_goal))
        return True

    async def evaluate(self) -> Any:
        return await self.env.evaluate()

    async def close(self) -> None:
        await self.env.close()


@dataclasses.dataclass
class EpisodeOutcome:
    task_id: str
    seed: int
    episode_id: str
    persona: str
    steps: int
    termination: str  # 'pruned' when the ORM stopped it, else the episode loop's reason
    checks: list[PrefixCheck]
    error: str = ""  # why the episode could not run (no browser context): recorded, the others go on


def explorer_agent(agent: AgentConfig, cfg: NNetNavConfig) -> AgentConfig:
    """The run's agent settings with the explorer's prompt, horizon and temperature."""
    fmt = agent.prompt()
    system = explore_system_prompt(fmt, cfg.max_steps) if cfg.explore_prompt else agent.system_prompt
    return dataclasses.replace(agent, system_prompt=system, max_steps=cfg.max_steps,
                               temperature=cfg.temperature, greedy=cfg.temperature <= 0)


async def explore(pool: BrowserPool, env_config: EnvConfig, engine: Engine, tokenizer: Any, tasks: Sequence[Any],
                  seeds: Sequence[int], agent: AgentConfig, cfg: NNetNavConfig, judges: NNetNavJudges,
                  store: DemoStore, *, personas: Sequence[str] | None = None, politeness: Politeness | None = None,
                  on_done: Callable[[EpisodeOutcome], None] | None = None) -> list[EpisodeOutcome]:
    """One exploration episode per (task, seed), `cfg.concurrency` at a time, per-origin limits on top."""
    personas = list(personas) if personas is not None else load_personas(cfg.personas_file)
    politeness = politeness or Politeness(cfg.max_instances_per_origin, cfg.min_action_interval_s)
    explorer = explorer_agent(agent, cfg)
    renderer = PromptRenderer(tokenizer)
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(task: Any, seed: int) -> EpisodeOutcome:
        try:
            return await episode(task, seed)
        except Exception as exc:  # noqa: BLE001 - failures are data: one lost browser never ends exploration
            out = EpisodeOutcome(task.task_id, seed, "", "", 0, "env_error", [], f"{type(exc).__name__}: {exc}"[:500])
            if on_done is not None:
                on_done(out)
            return out

    async def episode(task: Any, seed: int) -> EpisodeOutcome:
        origin = origin_of_task(task)
        persona = sample_persona(personas, task.task_id, seed)
        episode_id = uuid.uuid4().hex[:12]
        async with politeness.instance(origin), sem:  # origin first: a full origin never holds a global slot
            env = ExplorationEnv(await pool.new_env(env_config), persona=persona, judges=judges, cfg=cfg, store=store,
                                 politeness=politeness, origin=origin, seed=seed, episode_id=episode_id)
            try:
                result = await run_episode(env, engine, tokenizer, task, seed, explorer, renderer=renderer,  # type: ignore[arg-type]
                                           sample_seed=seed + 1)
            finally:
                await env.close()
            await env.finish(result.trajectory.termination)
        term = "pruned" if env.pruned_at is not None else result.trajectory.termination
        out = EpisodeOutcome(task.task_id, seed, episode_id, persona, len(result.trajectory.turns), term, env.checks)
        if on_done is not None:
            on_done(out)
        return out

    return list(await asyncio.gather(*(one(t, s) for t in tasks for s in seeds)))


# ---- relabeling -------------------------------------------------------------------------------------------


def _eos(tokenizer: Any) -> int:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return eos if eos is not None and eos >= 0 else tokenizer.eos_token_id


def _obs(text: str, goal: str) -> Observation:
    return Observation(goal=goal, text=text)


async def _stop_answer(runner: CallRunner, demo: ExplorationDemo, action_space: str) -> tuple[str, str]:
    """(answer, how it was obtained): the stop prompt's answer, or N/A with the reason when it gave none."""
    call = await runner.call("stop", stop_messages(demo.instruction, demo.final_observation, action_space))
    if call.error_kind is not None:
        return "N/A", f"stop prompt {call.error_kind}: {call.error_detail}"[:300]
    answer = parse_stop_answer(call.text)
    return (answer, "stop prompt") if answer is not None else ("N/A", "stop prompt gave no stop [answer]")


RELABEL_ACTIONS = ("policy", "explored")


async def relabel_demo(demo: ExplorationDemo, engine: Engine, tokenizer: Any, agent: AgentConfig,
                       stop_runner: CallRunner | None, *, temperature: float = 0.0, seed: int = 0,
                       actions: str = "policy", append_stop: bool = True) -> Trajectory:
    """Per-step SFT data for one demonstration (see the module doc): each step's prompt is the agent's own
    context with the instruction as the task and the explored actions as history; its response is what the
    policy engine now writes (the engine's token ids; `actions='policy'`, the paper) or the explored response
    itself (`actions='explored'`: the action whose effect the labeler described, for a policy too weak to
    re-write it); with `append_stop`, a last turn on the final page stops with the answer (the stop prompt's,
    on `stop_runner`)."""
    if actions not in RELABEL_ACTIONS:
        raise ValueError(f"relabel actions {actions!r}: use one of {RELABEL_ACTIONS}")
    fmt, build = agent.prompt(), get_strategy(agent.strategy)
    space = get_action_space(fmt.action_space)
    renderer = PromptRenderer(tokenizer)
    turns: list[Turn] = []
    past: list[StepRecord] = []
    pieces: list[list[int]] = []
    params = SamplingParams(temperature=temperature, greedy=temperature <= 0, max_new_tokens=agent.max_new_tokens,
                            seed=seed)
    pages = [s.observation for s in demo.steps] + [demo.final_observation]
    feedback = [s.feedback for s in demo.steps] + [None]
    for i, page in enumerate(pages):
        current = StepRecord(observation=_obs(page, demo.instruction), feedback=feedback[i])
        rendered = renderer.render(build(ContextInputs(fmt, demo.instruction, past, current, agent.last_k)))
        pieces = rendered.pieces
        if i < len(demo.steps):
            if actions == "explored":
                text = demo.steps[i].response
                ids, logprobs = list(tokenizer.encode(text, add_special_tokens=False)) + [_eos(tokenizer)], None
            else:
                gen = await engine.generate(rendered.ids, params, session_id=f"relabel-{demo.episode_id}-{demo.prune_step}")
                ids, logprobs = list(gen.token_ids), list(gen.logprobs)
                text = tokenizer.decode(ids, skip_special_tokens=True)
            parsed = space.parse(text)
            turns.append(Turn(list(rendered.ids), ids, logprobs, observation=page, action=text,
                              format_ok=fmt.format_ok(text) and isinstance(parsed, list) and bool(parsed)))
            step = demo.steps[i]
            past.append(StepRecord(observation=current.observation, feedback=current.feedback,
                                   response_text=step.response, action=step.action))
        elif not append_stop or stop_runner is None:
            answer, how = "", "not appended"
        else:
            answer, how = await _stop_answer(stop_runner, demo, fmt.action_space)
            action = STOP_ACTION[fmt.action_space].format(answer=answer.replace("'", "").replace('"', ""))
            text = answer_text(action, fmt.name)
            ids = list(tokenizer.encode(text, add_special_tokens=False)) + [_eos(tokenizer)]
            turns.append(Turn(list(rendered.ids), ids, None, observation=page, action=action))
    if agent.strategy in APPEND_ONLY:
        for t, piece in zip(turns, pieces):
            t.history_ids = list(piece)
    return Trajectory(
        task_id=demo.task_id, turns=turns, reward=1.0, group_id=f"{demo.episode_id}/{demo.prune_step}",
        termination="done",
        metadata={"source": "nnetnav", "instruction": demo.instruction, "goal": demo.instruction,
                  "persona": demo.persona, "orm_score": demo.orm_score, "prune_step": demo.prune_step,
                  "episode_id": demo.episode_id, "seed": demo.seed, "env_goal": demo.env_goal,
                  "stop_answer": answer, "stop_source": how, "summaries": demo.summaries, "best_of_k": "original"})


async def relabel(demos: Sequence[ExplorationDemo], engine: Engine, tokenizer: Any, agent: AgentConfig,
                  stop_backend: JudgeBackend, *, temperature: float = 0.0, options: JudgeOptions | None = None,
                  concurrency: int = 4, failures: list[dict[str, Any]] | None = None, actions: str = "policy",
                  append_stop: bool = True) -> list[Trajectory]:
    """Relabel every demonstration (`actions`, `append_stop`: see `relabel_demo`); one whose engine call fails
    is left out and recorded in `failures` (the demonstration itself stays in demonstrations.jsonl and can be
    relabelled again)."""
    runner = CallRunner(stop_backend, options or JudgeOptions())
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, d: ExplorationDemo) -> Trajectory | None:
        async with sem:
            try:
                return await relabel_demo(d, engine, tokenizer, agent, runner, temperature=temperature, seed=i,
                                          actions=actions, append_stop=append_stop)
            except Exception as exc:  # noqa: BLE001 - one failed relabeling never loses the others
                if failures is not None:
                    failures.append({"episode_id": d.episode_id, "prune_step": d.prune_step,
                                     "reason": f"{type(exc).__name__}: {exc}"[:500]})
                return None

    done = await asyncio.gather(*(one(i, d) for i, d in enumerate(demos)))
    return [t for t in done if t is not None]


# ---- best of K ---------------------------------------------------------------------------------------------


class InstructionEnv:
    """A BrowserEnv whose task line is a given instruction; records (page, response) per step for the ORM."""

    def __init__(self, env: Any, instruction: str) -> None:
        self.env, self.instruction = env, instruction
        self.goal = instruction
        self.pages: list[str] = []

    async def reset(self, task: Any, seed: int = 0) -> Observation:
        obs = await self.env.reset(task, seed)
        self.pages = [obs.text]
        return dataclasses.replace(obs, goal=self.instruction)

    async def step(self, text: str) -> StepResult:
        res = await self.env.step(text)
        self.pages.append(res.observation.text)
        return res

    async def evaluate(self) -> Any:
        return await self.env.evaluate()

    async def close(self) -> None:
        await self.env.close()


async def best_of_k(demo: ExplorationDemo, relabeled: Trajectory, k: int, pool: BrowserPool, env_config: EnvConfig,
                    tasks: dict[str, Any], engine: Engine, tokenizer: Any, agent: AgentConfig,
                    judges: NNetNavJudges) -> Trajectory:
    """Paper's BofK: K-1 agent episodes on the instruction (same task instance), each summarised and scored by
    the ORM with the original; the best-scored one is paired with the instruction (ties keep the original)."""
    best, best_score = relabeled, demo.orm_score
    for j in range(k - 1):
        ienv = InstructionEnv(await pool.new_env(env_config), demo.instruction)
        try:
            res = await run_episode(ienv, engine, tokenizer, tasks[demo.task_id], demo.seed,  # type: ignore[arg-type]
                                    dataclasses.replace(agent, max_steps=max(1, demo.prune_step + 1)),
                                    sample_seed=1000 + j)
        finally:
            await ienv.close()
        traj = res.trajectory
        if not traj.turns or traj.termination == "env_error":
            continue
        summaries: list[str] = []
        for i, turn in enumerate(traj.turns):
            v = await judges.summarize(ienv.pages[i], turn.action, ienv.pages[i + 1], demo.task_id)
            if not v.ok:
                break
            summaries.append(str(v.extra["summaries"][0]))
        if len(summaries) != len(traj.turns):
            continue
        steps = [ExploredStep(ienv.pages[i], t.action, t.action, None) for i, t in enumerate(traj.turns)]
        turns = [Turn([], [], observation=s.observation, action=s.response) for s in steps]
        orm = await judges.orm.judge(Trajectory(demo.task_id, turns, metadata={
            "state_changes": summaries, "final_observation": ienv.pages[len(traj.turns)], "instruction": demo.instruction}))
        if orm.ok and orm.score > best_score:
            best_score = orm.score
            best = Trajectory(demo.task_id, traj.turns, reward=1.0, group_id=relabeled.group_id, termination="done",
                              metadata={**relabeled.metadata, "orm_score": orm.score, "best_of_k": f"sample{j + 1}",
                                        "summaries": summaries})
    return best


# ---- statistics ---------------------------------------------------------------------------------------------


def exploration_report(outcomes: Sequence[EpisodeOutcome], store: DemoStore) -> dict[str, Any]:
    checks = [c for o in outcomes for c in o.checks]
    per_episode = collections.Counter(d.episode_id for d in store.demos)
    reasons = collections.Counter(c.reason.split(":", 1)[0] for c in checks if c.outcome == "dropped")
    prune_steps = [o.steps for o in outcomes if o.termination == "pruned"]
    return {
        "explorations": len(outcomes),
        "steps": sum(o.steps for o in outcomes),
        "prefixes_labelled": len(checks),
        "accepted": sum(c.outcome == "accepted" for c in checks),
        "rejected": sum(c.outcome == "rejected" for c in checks),
        "dropped": sum(c.outcome == "dropped" for c in checks),
        "dropped_reasons": dict(reasons),
        "episodes_pruned": len(prune_steps),
        "pruned_at": dict(collections.Counter(prune_steps)),
        "terminations": dict(collections.Counter(o.termination for o in outcomes)),
        "demonstrations": len(store.demos),
        "demonstrations_per_episode": len(store.demos) / max(1, len(outcomes)),
        "max_demonstrations_in_one_episode": max(per_episode.values(), default=0),
        "personas_used": len({o.persona for o in outcomes}),
    }


def write_report(path: str | Path, report: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


def label_accuracy(demos: Sequence[ExplorationDemo], normalize: Callable[[str], str] | None = None) -> float:
    """Exact-match rate of the labeler's instruction against the task's own utterance (MiniWoB++)."""
    from jaxwebrl.judges.parsing import normalize_answer

    norm = normalize or normalize_answer
    usable = [d for d in demos if d.env_goal]
    if not usable:
        raise ValueError("no demonstration carries the task's own utterance (env_goal); label accuracy needs them")
    return sum(norm(d.instruction) == norm(d.env_goal) for d in usable) / len(usable)
