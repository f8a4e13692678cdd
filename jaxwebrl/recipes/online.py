"""The online RL loop: collect -> reward -> advantages/filters -> samples -> train -> weight sync -> repeat.

One `OnlineRL` owns the browser pool, the engine and the collector for a run; the `Trainer` (jaxwebrl.train)
owns params, optimizer, checkpoints and metrics files. Groups arrive from the collector as each finishes (no
barrier); an iteration trains once it holds `rollout.groups_per_iteration` accepted groups. After each
update the engine gets the new params and a new policy version, so later tokens are stamped with it and the
collector's off-policy limit can drop groups that are too old. Greedy evaluation on held-out seeds runs every
`rl.eval_every` iterations.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import time
from typing import Any, Callable

import ml_collections
import numpy as np

from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.browser.config import EnvConfig, ObsConfig, PoolConfig
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory, read_trajectories
from jaxwebrl.data.samples import Sample, build_samples
from jaxwebrl.engines.factory import make_engine
from jaxwebrl.models import load_tokenizer
from jaxwebrl.recipes.evaluate import EvalReport, evaluate
from jaxwebrl.recipes.recipes import get_recipe, group_filter, make_samples
from jaxwebrl.rollout.collector import Collector, Group, RolloutConfig
from jaxwebrl.rollout.tasks import HorizonSchedule, ReplayBuffer, TaskSampler


def _pairs(spec: str, cast: Callable[[str], Any] = float) -> dict[str, Any]:
    """'easy:2,medium:5' -> {'easy': 2.0, 'medium': 5.0}."""
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, _, value = item.partition(":")
        out[key.strip()] = cast(value)
    return out


def comma_list(spec: str) -> list[str]:
    """A config task list ("a, b,c") as names, spaces and empty entries dropped."""
    return [s.strip() for s in spec.split(",") if s.strip()]


def env_config_from(cfg: Any) -> EnvConfig:
    e = cfg.env
    return EnvConfig(action_space=e.action_space,
                     obs=ObsConfig(text_mode=e.text_mode, text_budget_chars=int(e.text_budget_chars),
                                   metadata=bool(e.page_metadata), relative_urls=bool(e.relative_urls)),
                     step_timeout_s=float(e.step_timeout_s), episode_timeout_s=float(e.episode_timeout_s))


def agent_config_from(cfg: Any) -> AgentConfig:
    a = cfg.agent
    return AgentConfig(strategy=a.strategy, prompt_format=a.prompt_format, max_steps=int(a.max_steps),
                       max_context_tokens=int(a.max_context_tokens), max_new_tokens=int(a.max_new_tokens),
                       max_format_errors=int(a.max_format_errors), last_k=int(a.last_k),
                       temperature=float(a.temperature), top_p=float(a.top_p), system_prompt=str(a.system_prompt),
                       episode_timeout_s=float(cfg.env.episode_timeout_s))


def rollout_config_from(cfg: Any) -> RolloutConfig:
    r = cfg.rollout
    limits = tuple((op, int(getattr(r, f"limit_{op}"))) for op in ("navigate", "execute", "evaluate", "generate")
                   if int(getattr(r, f"limit_{op}")) > 0)
    return RolloutConfig(group_size=int(r.group_size), mode=r.mode, max_concurrent_groups=int(r.max_concurrent_groups),
                         max_policy_lag=int(r.max_policy_lag), limits=limits)


def make_suite(cfg: Any) -> Any:
    from envs import get_suite

    kwargs = {"tasks": comma_list(cfg.env.tasks)} if cfg.env.tasks else {}
    return get_suite(cfg.env.suite, **kwargs).start()


def split_tasks(suite: Any, cfg: Any) -> tuple[list[Any], list[int], list[Any], list[int]]:
    """(train tasks, train seeds, eval tasks, eval seeds): held-out seeds always; held-out tasks if named."""
    train_ids = suite.task_ids("all") if cfg.env.tasks else suite.task_ids("train")
    eval_ids = comma_list(cfg.env.eval_tasks) or train_ids
    train = [suite.get_task(t) for t in train_ids]
    held_out = [suite.get_task(t if "." in t else f"{suite.name}.{t}") for t in eval_ids]
    return (train, suite.seeds("train", int(cfg.env.train_seeds)), held_out,
            suite.seeds("test", int(cfg.env.eval_seeds)))


def episode_metrics(groups: list[Group]) -> dict[str, float]:
    trajs = [t for g in groups for t in g.trajectories]
    if not trajs:
        return {}
    terms = collections.Counter(t.termination for t in trajs)
    turns = [len(t.turns) for t in trajs]
    resp = [len(turn.response_ids) for t in trajs for turn in t.turns]
    out = {
        "rollout/success_rate": float(np.mean([bool(t.metadata.get("success")) for t in trajs])),
        "rollout/reward": float(np.mean([t.reward for t in trajs])),
        "rollout/episode_len": float(np.mean(turns)),
        "rollout/tokens_per_turn": float(np.mean(resp)) if resp else 0.0,
        "rollout/episodes": float(len(trajs)),
    }
    out.update({f"rollout/termination/{k}": v / len(trajs) for k, v in terms.items()})
    per_task: dict[str, list[bool]] = collections.defaultdict(list)
    for t in trajs:
        per_task[t.task_id].append(bool(t.metadata.get("success")))
    out.update({f"rollout/success/{k}": float(np.mean(v)) for k, v in per_task.items()})
    return out


@dataclasses.dataclass
class IterationLog:
    iteration: int
    metrics: dict[str, float]
    eval: dict[str, Any] | None = None


def demonstrations_to_replay(cfg: Any) -> list[Trajectory]:
    """The trajectories `rl.demo_replay` draws from (none when it is 0)."""
    if int(cfg.rl.demo_replay) <= 0:
        return []
    path = str(cfg.rl.demo_file)
    if not path or not os.path.isfile(path):
        raise ValueError(f"rl.demo_replay={cfg.rl.demo_replay} but rl.demo_file={path!r} is not a file: set "
                         "bc.enabled=True (RL then replays BC's demonstrations) or point rl.demo_file at a "
                         "trajectory .jsonl, or set rl.demo_replay=0")
    demos = read_trajectories(path)
    if not demos:
        raise ValueError(f"rl.demo_file={path!r} holds no trajectory; point it at demonstrations or set rl.demo_replay=0")
    return demos


def demo_samples(demos: list[Trajectory], cfg: Any, iteration: int) -> list[Sample]:
    """`rl.demo_replay` demonstrations drawn without replacement (seeded by iteration, so a resumed run draws
    the same), each a group of one with advantage `rl.demo_advantage`."""
    rng = np.random.default_rng((int(cfg.seed), iteration))
    picks = rng.choice(len(demos), size=min(int(cfg.rl.demo_replay), len(demos)), replace=False)
    trajs = [dataclasses.replace(demos[i], advantage=float(cfg.rl.demo_advantage), group_id=f"demo/{i}")
             for i in sorted(picks)]
    return build_samples(trajs, per=cfg.data.per, norm=cfg.data.norm)


class OnlineRL:
    """One online RL run: `async with OnlineRL(cfg, trainer) as rl: await rl.iteration(i)` (see recipes/run.py)."""

    def __init__(self, cfg: Any, trainer: Any):
        self.cfg, self.trainer = cfg, trainer
        self.recipe = get_recipe(cfg.recipe)
        self.tokenizer = load_tokenizer(trainer.tokenizer_dir)
        self.env_cfg, self.agent_cfg = env_config_from(cfg), agent_config_from(cfg)
        self.rollout_cfg = rollout_config_from(cfg)
        self.horizon = HorizonSchedule(default=int(cfg.agent.max_steps),
                                       per_difficulty=tuple(_pairs(cfg.rollout.horizon_per_difficulty, int).items()))
        self.replay: ReplayBuffer | None = (
            ReplayBuffer(int(cfg.rollout.replay_iterations), float(cfg.rollout.replay_power), seed=int(cfg.seed))
            if int(cfg.rollout.replay_iterations) > 0 else None
        )
        self.demos = demonstrations_to_replay(cfg)
        self.history: list[IterationLog] = []
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> "OnlineRL":
        cfg = self.cfg
        self.suite = make_suite(cfg)
        self._stack.callback(self.suite.stop)
        self.train_tasks, self.train_seeds, self.eval_tasks, self.eval_seeds = split_tasks(self.suite, cfg)
        pool_cfg = PoolConfig(num_browsers=int(cfg.env.num_browsers), contexts_per_browser=int(cfg.env.contexts_per_browser))
        self.pool = await self._stack.enter_async_context(BrowserPool(pool_cfg, self.env_cfg))
        self.version = self.trainer.step
        engine_cfg = cfg.engine
        if engine_cfg.type == "sglang" and engine_cfg.launch and not engine_cfg.checkpoint:
            # a launched server starts on the current policy, exported where it can read it
            engine_cfg = ml_collections.ConfigDict(engine_cfg.to_dict())
            engine_cfg.checkpoint = self.trainer.export(os.path.join(cfg.workdir, "engine_init"))
        self.engine = make_engine(engine_cfg, params=self.trainer.params, model_cfg=self.trainer.model_cfg,
                                  tokenizer=self.tokenizer, version=self.version)
        self._stack.push_async_callback(self.engine.close)
        self.collector = Collector(self.pool, self.engine, self.tokenizer, self.env_cfg, self.agent_cfg,
                                   self.rollout_cfg, policy_version=lambda: self.version)
        self.sampler = TaskSampler(self.train_tasks, self.train_seeds, ratio=_pairs(cfg.env.difficulty_ratio) or None,
                                   seed=int(cfg.seed) + self.version,
                                   learnability=cfg.rollout.task_sampling == "learnability")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.aclose()

    def _agent_for(self, iteration: int) -> Callable[[Any], AgentConfig]:
        return lambda task: dataclasses.replace(self.agent_cfg, max_steps=self.horizon.max_steps(task, iteration))

    async def evaluate(self, tasks: list[Any] | None = None, seeds: list[int] | None = None) -> EvalReport:
        return await evaluate(self.engine, self.tokenizer, self.pool, self.env_cfg, tasks or self.eval_tasks,
                              seeds or self.eval_seeds, self.agent_cfg,
                              concurrency=self.pool.config.capacity)

    async def iteration(self, it: int) -> IterationLog:
        """Collect one batch of groups, train on it, sync weights."""
        cfg = self.cfg
        t0 = time.perf_counter()
        keep = group_filter(self.recipe, cfg)

        def accept(group: Group) -> bool:  # every finished group informs the task sampler, kept or not
            self.sampler.record(group.task_id, [bool(t.metadata.get("success")) for t in group.trajectories])
            return keep(group)

        groups, stats = await self.collector.collect(
            self.sampler, num_groups=int(cfg.rollout.groups_per_iteration), accept=accept,
            max_groups=int(cfg.rollout.max_groups_per_iteration) or None, agent_for=self._agent_for(it))
        t_rollout = time.perf_counter() - t0
        trajs = [t for g in groups for t in g.trajectories]
        samples = make_samples(self.recipe, trajs, cfg)
        if self.replay is not None:
            self.replay.add_iteration(samples)
            samples = self.replay.draw(max(len(samples), int(cfg.rollout.replay_samples)))
        demos = demo_samples(self.demos, cfg, it) if self.demos and samples else []
        samples += demos
        metrics = episode_metrics(groups)
        metrics.update({"rollout/groups_tried": float(stats.groups), "rollout/episodes_tried": float(stats.episodes),
                        "rollout/success_rate_all": stats.successes / max(1, stats.episodes),
                        "rollout/groups_rejected": float(stats.rejected),
                        "rollout/groups_stale": float(stats.dropped_stale), "time/rollout_s": t_rollout})
        metrics.update({f"time/{k}_s": v for k, v in stats.time.items()})
        t1 = time.perf_counter()
        if samples:
            train_metrics = await asyncio.to_thread(self.trainer.train_on_samples, samples)
            metrics.update({f"train/{k}": v for k, v in train_metrics.items()})
            self.version = self.trainer.step
            await self.engine.update_weights(self.trainer.params, self.version)
        metrics["time/train_s"] = time.perf_counter() - t1
        metrics["policy_version"] = float(self.version)
        metrics["train/samples_used"] = float(len(samples))
        metrics["train/demo_groups"] = float(len({s.group_id for s in demos}))
        log = IterationLog(it, metrics)
        every = int(cfg.rl.eval_every)
        if every and (it + 1) % every == 0:
            report = await self.evaluate()
            log.eval = report.to_dict()
            metrics["eval/success_rate"] = report.success_rate
        self.trainer.log(metrics, prefix="")
        self.history.append(log)
        return log

