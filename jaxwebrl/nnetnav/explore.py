"""NNetNav's exploration (step 1 of the pipeline in the package doc): the policy at temperature plays each
(task, seed) through the agent's own episode loop, with the env wrapped by `ExplorationEnv`: the persona as
the task line, every action summarised, the prefix labelled and scored at the pruning steps, accepted prefixes
stored at once, a rejected one ending the episode. Then the statistics of a run (step 3, the report)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from jaxwebrl.agent.episode import AgentConfig, run_episode
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.env import StepResult
from jaxwebrl.browser.observation import Observation
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.engines.base import Engine
from jaxwebrl.nnetnav.config import NNetNavConfig
from jaxwebrl.nnetnav.judges import NNetNavJudges
from jaxwebrl.nnetnav.politeness import Politeness, origin_of_task
from jaxwebrl.nnetnav.prompts import explore_system_prompt, load_personas, persona_task, sample_persona
from jaxwebrl.nnetnav.store import DemoStore, ExplorationDemo, ExploredStep


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
