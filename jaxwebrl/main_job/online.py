"""Online RL as a source of the one training loop: collect -> reward -> recipe -> samples; then weight sync.

`OnlineRL` owns the task suite, the browser pool, the engine and the collector for a run; the `Trainer`
owns params, optimizer, checkpoints and metrics files; `jaxwebrl.train.loop.fit` drives both. Groups arrive
from the collector as each finishes (no barrier); a round trains once it holds `rollout.groups_per_iteration`
accepted groups. After each update the engine gets the new params and a new policy version, so later tokens
are stamped with it and the collector's off-policy limit can drop groups that are too old. Greedy evaluation
on held-out seeds runs every `rl.eval_every` iterations; every iteration appends a record to `history`.

With `rl.overlap` the next iteration's rollouts are collected while this one trains (the update runs in a
worker thread, the browsers and the engine on the event loop): they start on the weights before the update
and pick up the new ones when `after_update` publishes them, so a group is at most one update old when it
trains. `policy_lag` counts updates against the policy a group will train, the one in progress included, and
the collector drops groups beyond `rollout.max_policy_lag` as they finish. A kill loses only the unfinished
next batch, which was never trained: the checkpoint of round k holds exactly rounds 0..k, and a resumed run
collects round k+1 again.

`rl.schedule='deterministic'` (the main job's default) decides every round from the run's logical schedule
instead of the order in which episodes finish: round k's groups are drawn from (seed, k) and the task
sampler's state at the round boundary; group i's members sample with seeds of (seed, k, i, member) (the turn
is added per request); the round is the shortest prefix of its schedule holding `groups_per_iteration`
accepted groups (`Collector.collect_scheduled`), in schedule order; the learnability sampler, the replay
draws and the demonstration picks are updated from the played prefix in schedule order at the round
boundary. With `rl.overlap` the overlap is logical too: round k+1 samples on exactly the weights after update
k-1 (the engine's weights are swapped only at round boundaries, when round k's batch is in), so every
trained group is exactly one update old. A resumed run rebuilds the sampler's outcomes from
`rollouts.jsonl`, so it continues as the uninterrupted run would.

    async with OnlineRL(run, trainer, history_file) as rl:
        await fit(trainer, rl, run.rl.iterations)
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import dataclasses
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory, read_trajectories
from jaxwebrl.data.samples import Sample, build_samples
from jaxwebrl.engines.factory import make_engine
from jaxwebrl.evaluation.evaluate import EvalReport, evaluate
from jaxwebrl.judges.scoring import make_scorer
from jaxwebrl.models.vl_or_text import load_tokenizer_or_processor
from jaxwebrl.recipes.papers import get_recipe, run_samples
from jaxwebrl.recipes.registry import accept_group, assign_rewards, episode_success
from jaxwebrl.rollout.collector import CollectStats, Collector, Group, ScheduledGroup, is_env_error
from jaxwebrl.rollout.suites import make_suite, split_tasks
from jaxwebrl.rollout.tasks import HorizonSchedule, ReplayBuffer, TaskSampler, replay_draw_count
from jaxwebrl.train.hosts import host_local, host_path, host_seed
from jaxwebrl.train.loop import Round
from jaxwebrl.viewer import ViewerLog, episodes_from_trajectories, write_viewer

VIEWER_LOG = "viewer_episodes.jsonl"  # in the workdir: the rollouts and evaluations the viewer shows
# beside history.jsonl: every trajectory played, rewarded, with its iteration and whether its group trained
# (data.kind='trajectories' trains on it again)
ROLLOUTS = "rollouts.jsonl"


def episode_metrics(groups: list[Group]) -> dict[str, float]:
    trajs = [t for g in groups for t in g.trajectories]
    if not trajs:
        return {}
    terms = collections.Counter(t.termination for t in trajs)
    turns = [len(t.turns) for t in trajs]
    resp = [len(turn.response_ids) for t in trajs for turn in t.turns]
    played = [t for t in trajs if not is_env_error(t)]  # a lost browser is no failure of the policy
    out = {
        "rollout/success_rate": float(np.mean([bool(t.metadata.get("success")) for t in played])) if played else 0.0,
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


def run_engine_config(run: Any) -> Any:
    """The run's `engine` section, in deterministic mode when the schedule is (parse_config sets it; a config
    changed after parsing, e.g. with `with_changes`, gets it here too)."""
    if run.rl.schedule == "deterministic" and run.engine.type == "jax" and not run.engine.deterministic:
        return dataclasses.replace(run.engine, deterministic=True)
    return run.engine


def timeout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """`timeouts/<kind>`: every safety-limit timeout that fired in these episodes (the episode's, the browser's,
    the engine request's, the judge's), so a run whose outcome a slow machine changed says so."""
    counts: collections.Counter[str] = collections.Counter()
    for t in trajs:
        counts.update(t.metadata.get("timeouts") or {})
    return {f"timeouts/{k}": float(v) for k, v in sorted(counts.items())}


def demonstrations_to_replay(run: Any) -> list[Trajectory]:
    """The trajectories RL mixes in (`rl.replay_demonstrations` or `rl.demonstration_share`; none when off)."""
    if not run.rl.mixes_demonstrations:
        return []
    path = run.rl.demonstrations_file
    if not path or not os.path.isfile(path):
        raise ValueError(f"rl.replay_demonstrations / rl.demonstration_share mix demonstrations into RL but "
                         f"rl.demonstrations_file={path!r} is not a file: set bc.enabled=True (RL then mixes in BC's "
                         "demonstrations) or point rl.demonstrations_file at a trajectory .jsonl, or set both to 0")
    demos = read_trajectories(path)
    if not demos:
        raise ValueError(f"rl.demonstrations_file={path!r} holds no trajectory; point it at demonstrations or set "
                         "rl.replay_demonstrations=0 and rl.demonstration_share=0")
    return demos


def demonstration_picks(n_demos: int, run: Any, iteration: int) -> list[int]:
    """Which demonstrations iteration `iteration` mixes in. `rl.replay_demonstrations`: that many, drawn
    without replacement (seeded by iteration, so a resumed run draws the same). `rl.demonstration_share`: a
    seeded subset of that share of the file, split evenly over `rl.iterations`; this iteration's part."""
    if run.rl.demonstration_share > 0:
        subset = np.random.default_rng(run.seed).permutation(n_demos)[:round(run.rl.demonstration_share * n_demos)]
        parts = np.array_split(subset, max(1, run.rl.iterations))
        return sorted(int(i) for i in parts[iteration % len(parts)])
    rng = np.random.default_rng((run.seed, iteration))
    return sorted(int(i) for i in rng.choice(n_demos, size=min(run.rl.replay_demonstrations, n_demos), replace=False))


def demonstration_samples(demos: list[Trajectory], run: Any, iteration: int) -> list[Sample]:
    """This iteration's demonstrations (`demonstration_picks`), each a group of one with advantage
    `rl.demonstration_advantage`: an SFT term beside the policy gradient."""
    trajs = [dataclasses.replace(demos[i], advantage=run.rl.demonstration_advantage, group_id=f"demo/{i}")
             for i in demonstration_picks(len(demos), run, iteration)]
    return build_samples(trajs, per=run.data.per, norm=run.data.norm)


def task_metrics(trajs: list[Trajectory], tasks: dict[str, Any], horizon: Callable[[Any], int]) -> dict[str, float]:
    """Which difficulties were played (WebGym's ratio) and the horizon each got at this iteration."""
    out: dict[str, float] = {}
    levels = collections.Counter(str(getattr(tasks.get(t.task_id), "difficulty", "any")) for t in trajs)
    out.update({f"rollout/difficulty/{k}": v / max(1, len(trajs)) for k, v in levels.items()})
    horizons = {str(getattr(task, "difficulty", "any")): horizon(task) for task in tasks.values()}
    out.update({f"rollout/horizon/{k}": float(v) for k, v in horizons.items()})
    return out


@dataclasses.dataclass
class Collected:
    """One iteration's accepted groups, with every trajectory played for it (kept or not) and the wall time."""

    groups: list[Group]
    stats: CollectStats
    finished: list[Trajectory]
    wall_s: float
    discarded: int = 0  # deterministic schedule: groups started past the round's prefix (timing-dependent)


class OnlineRL:
    """One online RL run as a `jaxwebrl.train.loop.Source` (see the module docstring)."""

    name = "rl"
    log_prefix = "train"
    checkpoint_each_round = True  # rollouts are expensive: every iteration is saved

    def __init__(self, run: Any, trainer: Any, history_file: str | Path | None = None,
                 engine_factory: Callable[..., Any] | None = None):
        """`engine_factory(engine_config, params=, model_cfg=, tokenizer=, version=)` builds the rollout engine
        (default `make_engine`: the config's JaxEngine or SGLang); any object with the Engine protocol will do."""
        self.run, self.trainer = run, trainer
        self.engine_factory = engine_factory or make_engine
        self.recipe = get_recipe(run.recipe)
        self.tokenizer = load_tokenizer_or_processor(trainer.tokenizer_dir)  # a VL policy's processor renders images
        self.env_cfg, self.agent_cfg = run.browser_env(), run.agent
        self.horizon = HorizonSchedule(default=run.agent.max_steps, per_difficulty=run.rollout.per_difficulty_steps(),
                                       schedule=run.rollout.schedule_steps())
        self.replay: ReplayBuffer | None = (
            ReplayBuffer(run.rollout.replay_iterations, run.rollout.replay_power, seed=run.seed)
            if run.rollout.replay_iterations > 0 else None
        )
        self.demos = demonstrations_to_replay(run)
        # multi-host: each host keeps its own records (history.host1.jsonl, ...) in the shared workdir
        self.history_file = Path(host_path(history_file)) if history_file else None
        self.rollouts_file = (Path(host_path(Path(history_file).with_name(ROLLOUTS)))
                              if history_file and run.rl.save_rollouts else None)
        self.history: list[dict[str, Any]] = []
        self.viewer_log = ViewerLog(host_path(os.path.join(run.workdir, VIEWER_LOG)))
        self._stack = contextlib.AsyncExitStack()
        self._published: list[int] = []  # every policy version the engine got, in order (increasing)
        self._training = False  # an update is running: groups finishing now train after it
        self._ahead: tuple[int, asyncio.Future[Collected]] | None = None  # (iteration, its overlapped collection)
        self._t_iteration: float | None = None
        self.deterministic = run.rl.schedule == "deterministic"
        self._swap_pending = False  # deterministic overlap: the trainer's weights wait for the round boundary

    async def __aenter__(self) -> "OnlineRL":
        run = self.run
        self.suite = make_suite(run)
        self._stack.callback(self.suite.stop)
        self.train_tasks, self.train_seeds, self.eval_tasks, self.eval_seeds = split_tasks(self.suite, run)
        self.pool = await self._stack.enter_async_context(BrowserPool(run.env.pool_config(), self.env_cfg))
        self.version = self.trainer.step
        self._published = [self.version]
        engine_cfg = run_engine_config(run)
        if engine_cfg.type == "sglang" and engine_cfg.launch and not engine_cfg.checkpoint:
            # a launched server starts on the current policy, exported where it can read it
            engine_cfg = dataclasses.replace(engine_cfg, checkpoint=self.trainer.export(os.path.join(run.workdir, "engine_init")))
        # each host runs its own engine on a whole copy of the params (multi-host: gathered, a collective)
        self.engine = self.engine_factory(engine_cfg, params=host_local(self.trainer.params), model_cfg=self.trainer.model_cfg,
                                  tokenizer=self.tokenizer, version=self.version)
        self._stack.push_async_callback(self.engine.close)
        # reward.source judge / rule_or_judge: each episode is judged inside the collector as soon as it ends
        specs = {t.task_id: getattr(t, "spec", None) for t in self.train_tasks + self.eval_tasks}
        judge_cfg = run.reward.judge
        if self.deterministic and judge_cfg.engine == "jax" and not judge_cfg.deterministic:
            judge_cfg = dataclasses.replace(judge_cfg, deterministic=True)
        self.scorer = make_scorer(run.reward.source, judge_cfg, task_specs=specs.get)
        if self.scorer is not None:
            self._stack.push_async_callback(self.scorer.close)
        self.collector = Collector(self.pool, self.engine, self.tokenizer, self.env_cfg, self.agent_cfg, run.rollout,
                                   policy_version=lambda: self.version, scorer=self.scorer, policy_lag=self.policy_lag)
        self.sampler = TaskSampler(self.train_tasks, self.train_seeds, ratio=run.tasks.ratio() or None,
                                   seed=host_seed(run.seed + self.version), learnability=run.rollout.task_sampling == "learnability")
        self._stack.push_async_callback(self._stop_ahead)  # first on exit: before the pool and engine close
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.aclose()

    def _agent_for(self, iteration: int) -> Callable[[Any], AgentConfig]:
        return lambda task: dataclasses.replace(self.agent_cfg, max_steps=self.horizon.max_steps(task, iteration))

    def updates_since(self, version: int) -> int:
        """Weight updates the engine got after `version`."""
        return len(self._published) - bisect.bisect_right(self._published, version)

    def policy_lag(self, version: int) -> int:
        """Weight updates between `version` and the policy a group finishing now will train: those published
        after it, plus the update in progress while rollouts overlap training."""
        return self.updates_since(version) + int(self._training)

    async def _stop_ahead(self) -> None:
        if self._ahead is not None:
            _, fut = self._ahead
            self._ahead = None
            fut.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fut

    async def evaluate(self, tasks: list[Any] | None = None, seeds: list[int] | None = None) -> EvalReport:
        return await evaluate(self.engine, self.tokenizer, self.pool, self.env_cfg, tasks or self.eval_tasks,
                              seeds or self.eval_seeds, self.agent_cfg, concurrency=self.pool.config.capacity)

    # ---- the Source protocol ----------------------------------------------------------------------

    def done(self, trainer: Any) -> int:
        """Iterations in the restored state; a history record written after the last save (the process died
        before it) is dropped and that iteration runs again."""
        done = int(trainer.run_meta.get("rounds", 0))
        if self.history_file is not None and self.history_file.exists():
            records = [json.loads(line) for line in self.history_file.read_text().splitlines()]
            self.history = records[:done]
            self.history_file.write_text("".join(json.dumps(r) + "\n" for r in self.history))
        if self.rollouts_file is not None and self.rollouts_file.exists():  # the same for the saved rollouts
            kept = [line for line in self.rollouts_file.read_text().splitlines()
                    if json.loads(line)["metadata"].get("iteration", 0) < done]
            self.rollouts_file.write_text("".join(line + "\n" for line in kept))
            if self.deterministic:  # the sampler's outcomes as the uninterrupted run had them, in schedule order
                self._record_outcomes(read_trajectories(self.rollouts_file))
        return done

    def _record_outcomes(self, trajs: list[Trajectory]) -> None:
        """Tell the task sampler the outcomes of played groups (consecutive trajectories of one group id)."""
        for _, members in itertools.groupby(trajs, key=lambda t: t.group_id):
            group = list(members)
            self.sampler.record(group[0].task_id, [episode_success(t) for t in group if not is_env_error(t)])

    async def _collect(self, it: int) -> Collected:
        """Iteration `it`'s groups (dynamic sampling through the recipe's acceptance)."""
        if self.deterministic:
            return await self._collect_scheduled(it)
        run = self.run
        t0 = time.perf_counter()
        finished: list[Trajectory] = []  # every group played, kept or not (what rollouts.jsonl records)

        def accept(group: Group) -> bool:  # every finished group informs the task sampler, kept or not
            self.sampler.record(group.task_id, [episode_success(t) for t in group.trajectories if not is_env_error(t)])
            assign_rewards(self.recipe, group.trajectories, run.reward.source, run.reward.step_discount)
            kept = accept_group(self.recipe, group.trajectories, dynamic_sampling=run.train.dynamic_sampling,
                                reward_source=run.reward.source, step_discount=run.reward.step_discount)
            finished.extend(dataclasses.replace(t, metadata={**t.metadata, "iteration": it, "group_kept": kept})
                            for t in group.trajectories)
            return kept

        groups, stats = await self.collector.collect(
            self.sampler, num_groups=run.rollout.groups_per_iteration, accept=accept,
            max_groups=run.rollout.max_groups_per_iteration or None, agent_for=self._agent_for(it))
        return Collected(groups, stats, finished, time.perf_counter() - t0)

    def schedule(self, it: int) -> Callable[[int], ScheduledGroup]:
        """Round `it`'s logical schedule: group i's task and seed (the sampler's i-th draw after reseeding with
        (seed, it)), its id and its members' sampling seeds, all functions of (run seed, it, i)."""
        run, agent_for = self.run, self._agent_for(it)
        base = host_seed(run.seed)
        self.sampler.reseed([base, it])

        def group(i: int) -> ScheduledGroup:
            task, seed = next(self.sampler)
            seeds = np.random.SeedSequence([base, it, i]).generate_state(run.rollout.group_size)
            return ScheduledGroup(i, task, seed, f"{task.task_id}/{seed}/{it}.{i}", tuple(int(s) for s in seeds),
                                  agent_for(task))

        return group

    async def _collect_scheduled(self, it: int) -> Collected:
        """Round `it` of the deterministic schedule (module doc): the played prefix, in schedule order; the
        task sampler learns its outcomes at the round boundary."""
        run = self.run
        t0 = time.perf_counter()

        def accept(group: Group) -> bool:  # this group alone: rewards and the recipe's filter
            assign_rewards(self.recipe, group.trajectories, run.reward.source, run.reward.step_discount)
            return accept_group(self.recipe, group.trajectories, dynamic_sampling=run.train.dynamic_sampling,
                                reward_source=run.reward.source, step_discount=run.reward.step_discount)

        played = await self.collector.collect_scheduled(
            self.schedule(it), num_groups=run.rollout.groups_per_iteration, accept=accept,
            max_groups=run.rollout.max_groups_per_iteration or None)
        finished = [dataclasses.replace(t, metadata={**t.metadata, "iteration": it, "group_kept": kept,
                                                     "schedule_index": i})
                    for i, (g, kept) in enumerate(zip(played.groups, played.accepted)) for t in g.trajectories]
        self._record_outcomes(finished)
        groups = [g for g, kept in zip(played.groups, played.accepted) if kept]
        return Collected(groups, played.stats, finished, time.perf_counter() - t0, played.cancelled)

    async def _swap_to_trainer(self) -> None:
        """Deterministic overlap: give the engine the weights of the last update, at a round boundary."""
        if self._swap_pending:
            self._swap_pending = False
            self.version = self.trainer.step
            self._published.append(self.version)
            await self.engine.update_weights(host_local(self.trainer.params), self.version)

    async def next_round(self, it: int) -> Round:
        """Iteration `it`'s groups (collected while the previous round trained, with `rl.overlap`) turned into
        the recipe's samples; with `rl.overlap` the next iteration's collection starts before returning."""
        run = self.run
        t0 = time.perf_counter()
        self._t_iteration = self._t_iteration or t0
        if self._ahead is not None and self._ahead[0] == it:
            batch = await self._ahead[1]
            self._ahead = None
        else:
            await self._stop_ahead()
            batch = await self._collect(it)
        t_wait = time.perf_counter() - t0
        if self.deterministic:  # the round boundary: the next round samples on the weights after update it-1
            await self._swap_to_trainer()
        # This round's batch is fixed: a group finishing from now on trains after its update.
        self._training = True
        if run.rl.overlap and it + 1 < run.rl.iterations:  # the next batch plays while this one trains
            self._ahead = (it + 1, asyncio.ensure_future(self._collect(it + 1)))
        groups, stats, finished = batch.groups, batch.stats, batch.finished
        trajs = [t for g in groups for t in g.trajectories]
        recipe_stats: dict[str, float] = {}
        samples = run_samples(run, trajs, reward_source=run.reward.source, stats=recipe_stats)
        if self.rollouts_file is not None:
            await asyncio.to_thread(self._save_rollouts, finished)
        await asyncio.to_thread(self.viewer_log.add_trajectories, trajs, f"{run.recipe} rollout", it,
                                run.viewer.rollouts_per_iteration, seed=run.seed + it, max_chars=run.viewer.max_chars)
        metrics = episode_metrics(groups)
        lags = [self.updates_since(s.policy_version) for s in samples]  # behind the policy about to train them
        if lags:
            metrics.update({"rollout/policy_lag_max": float(max(lags)), "rollout/policy_lag_mean": float(np.mean(lags))})
        if self.replay is not None:
            if self.deterministic:  # this round's draws from (seed, it), whatever a resumed run drew before
                self.replay.reseed([host_seed(run.seed), it])
            self.replay.add_iteration([(it, s) for s in samples])
            drawn = self.replay.draw(replay_draw_count(len(samples), run.rollout.replay_samples,
                                                       run.rollout.replay_reuse, run.train.epochs))
            ages = [it - born for born, _ in drawn]
            samples = [s for _, s in drawn]
            metrics.update({"replay/samples": float(len(drawn)), "replay/mean_age": float(np.mean(ages)) if ages else 0.0,
                            "replay/from_earlier_iterations": float(np.mean([a > 0 for a in ages])) if ages else 0.0})
        # a count per batch rides only beside rollout samples; a share of the file is part of the data itself
        mixing = bool(self.demos) and bool(samples or run.rl.demonstration_share)
        demos = demonstration_samples(self.demos, run, it) if mixing else []
        samples += demos
        metrics.update(recipe_stats)
        metrics.update(task_metrics(trajs, {t.task_id: t for t in self.train_tasks},
                                    lambda task: self.horizon.max_steps(task, it)))
        metrics.update({"rollout/groups_tried": float(stats.groups), "rollout/episodes_tried": float(stats.episodes),
                        "rollout/success_rate_all": stats.success_rate, "rollout/env_errors": float(stats.env_errors),
                        "rollout/groups_rejected": float(stats.rejected),
                        "rollout/groups_stale": float(stats.dropped_stale), "time/rollout_s": batch.wall_s,
                        "throughput/groups_discarded": float(batch.discarded),
                        "time/rollout_wait_s": t_wait,
                        "train/samples_used": float(len(samples)),
                        "train/demonstration_groups": float(len({s.group_id for s in demos}))})
        metrics.update({f"time/{k}_s": v for k, v in stats.time.items()})
        metrics.update(timeout_metrics(finished))
        # the pool's edges since the last record: egress refusals (allowlist, proxy credentials), browsers lost
        metrics.update(self.pool.take_metrics())
        self._t_train = time.perf_counter()
        return Round(samples=samples, metrics=metrics)

    def _save_rollouts(self, trajs: list[Trajectory]) -> None:
        assert self.rollouts_file is not None
        with self.rollouts_file.open("a") as f:
            f.writelines(t.to_json() + "\n" for t in trajs)

    async def after_update(self, it: int, trainer: Any, metrics: dict[str, float]) -> None:
        """Weight sync to the engine, periodic evaluation, the iteration's history record."""
        self._training = False  # before the await: a group finishing during the swap is one update old, not two
        if metrics.get("train/optimizer_steps"):  # agreed by all hosts (not this host's own sample count)
            self._swap_pending = True
            if not (self.deterministic and self.run.rl.overlap):  # deterministic overlap swaps at the round boundary
                await self._swap_to_trainer()
        now = time.perf_counter()
        metrics["time/train_s"] = now - self._t_train
        metrics["time/iteration_s"] = now - (self._t_iteration or now)
        self._t_iteration = now
        metrics["policy_version"] = float(self.version)
        if self.scorer is not None:  # the round's judge counts (every episode played, kept or not)
            metrics.update(self.scorer.take_metrics())
        record: dict[str, Any] = {"iteration": it, "schedule": self.run.rl.schedule, "metrics": metrics, "eval": None}
        every = self.run.rl.eval_every
        if every and (it + 1) % every == 0:
            report = await self.evaluate()
            record["eval"] = report.to_dict()
            metrics["eval/success_rate"] = report.success_rate
            await asyncio.to_thread(self.viewer_log.add, episodes_from_trajectories(
                report.trajectories, "greedy eval", it, max_chars=self.run.viewer.max_chars))
        self.history.append(record)
        if self.history_file is not None:
            with self.history_file.open("a") as f:
                f.write(json.dumps(record) + "\n")
        v = self.run.viewer
        await asyncio.to_thread(write_viewer, host_path(os.path.join(self.run.workdir, "viewer.html")), self.viewer_log.read(),
                                title=f"{self.run.recipe}: trajectories", max_episodes=v.max_episodes,
                                max_screenshots=v.max_screenshots)
