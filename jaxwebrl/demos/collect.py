"""Behaviour-cloning demonstrations from scripted solvers (as WebAgent-R1 used rule-based solvers for BC).

Two steps, because the tokenizer is trained on what the demonstrations show:
1. `collect_demonstrations` plays each (task, seed) in a real browser with a solver's plan, keeping the
   observations the agent would see and the action texts; only successful episodes are kept (the
   environment's own reward filters them, as NNetNav's ORM filters explorations). The plan is a list of
   grammar-free `Step`s (envs/miniwob_solvers.py, envs/site_solutions.py), each written in the run's
   action space against the live page (`demos.actions.write_step`) and wrapped in its prompt format
   (`answer_text`), so each paper's BC policy speaks its own grammar.
2. `render_demonstrations` turns them into `Trajectory` records with the agent's own context strategy and
   prompt format, so BC trains on exactly the prompts RL will later sample from.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Callable, Sequence

from transformers import PreTrainedTokenizerBase

from jaxwebrl.agent.context import APPEND_ONLY, ContextInputs, StepRecord, get_strategy
from jaxwebrl.agent.episode import AgentConfig
from jaxwebrl.agent.prompts import extract_tag, get_format
from jaxwebrl.agent.render import PromptRenderer
from jaxwebrl.browser.config import EnvConfig
from jaxwebrl.browser.env import EnvError
from jaxwebrl.browser.observation import element_head, shown_name
from jaxwebrl.browser.pool import BrowserPool
from jaxwebrl.data.records import Trajectory, Turn, TurnImage
from jaxwebrl.demos.actions import Step, Written, resolve, write_step

Solver = Callable[[str, str, Sequence[Any]], Sequence[Step | str]]  # (task name, goal, elements) -> plan


@dataclasses.dataclass
class Demonstration:
    task_id: str
    seed: int
    goal: str
    steps: list[StepRecord]
    success: bool
    error: str | None = None  # why the plan could not be played (no solver, element missing, action failed)
    earlier_errors: tuple[str, ...] = ()  # why each earlier play of this (task, seed) failed (it was played again)

    @property
    def attempts(self) -> int:
        return len(self.earlier_errors) + 1


def answer_text(action: str, prompt_format: str, memory: str | None = None, conclusion: str | None = None,
                rationale: str | None = None) -> str:
    """The response a policy in `prompt_format` writes for `action`.

    `action` is already in the format's action grammar (see `demos.actions.write_step`). The reasoning is
    empty (solvers have none) unless `rationale` is given: the target element as the page shows it, written
    in <think> before the action (`bc.rationale`). WebGym's format carries the notes the next turn will see
    in <memory>; BrowserAgent's an optional <conclusion>."""
    think = f"<think>{rationale or ''}</think>"
    if prompt_format == "bid":  # no reasoning asked for; a rationale still goes first (the parser skips <think>)
        return f"{think}{action}" if rationale else action
    if prompt_format == "webagent_r1":
        return f"{think}<answer>{action}</answer>"
    if prompt_format == "openwebrl":
        return f"{think}\n{action}"
    if prompt_format == "webgym":
        return f"{think}\n<memory>{memory or '(nothing yet)'}</memory>\n```{action}```"
    if prompt_format == "browseragent":
        note = f"<conclusion>{conclusion}</conclusion>\n" if conclusion else ""
        return f"{think}\n{note}```{action}```"
    raise ValueError(f"prompt format {prompt_format!r} has no demonstration writer")


def _describe(step: Step, elements: Sequence[Any]) -> str:
    """A grammar-free line for WebGym's memory: what this step did, by role and name (ids go stale)."""
    if step.kind == "back":
        return "went back"
    if step.kind == "stop":
        return f"answered {step.text!r}"
    el = resolve(step, elements)
    label = f"{el.role} {(el.name or el.text).strip()[:60]!r}"
    if step.kind == "type":
        return f"typed {step.text!r} into {label}" + (" and pressed Enter" if step.enter else "")
    if step.kind == "select":
        return f"chose {step.text!r} in {label}"
    return f"clicked {label}"


def rationale_text(step: Step | str, elements: Sequence[Any], env_config: EnvConfig, form: str = "element") -> str | None:
    """The step's target as the page text shows it: a grounding step a policy can learn to write before the
    id, each token a copy from the goal or the page. `form` "element" writes the whole head (`button 'No'
    [12]` with `env.ids_after_names`); "name" only the name and the id (`'No' [12]`, a piece of the same
    line), so the think starts with the goal's words instead of the role every candidate shares. An element
    without a name keeps its role (`textbox '' [5]`)."""
    if isinstance(step, str) or not step.needs_element:
        return None
    el = resolve(step, elements)
    head = element_head(el, env_config.obs.ids_after_names)
    if form == "element":
        return head
    if form != "name":
        raise ValueError(f"rationale form {form!r} is not 'element' or 'name'")
    name = shown_name(el)
    if not name:
        return head
    return f"{name!r} [{el.id}]" if env_config.obs.ids_after_names else f"[{el.id}] {name!r}"


RETRIES = 3  # looks again at a page that has not caught up with the last action yet


async def _refresh(env: Any, obs: Any) -> Any:
    """A new observation after the page had time to start and finish a navigation. The env observes right
    after an action; under load a navigation the action started may not have begun by then (a coordinate
    click does not wait for it), and the observation still shows the old page. A demonstration must pair
    each action with the page it acts on, so the driver waits and looks again before giving up."""
    from jaxwebrl.browser.observation import observe

    await asyncio.sleep(0.2)
    await env.session.settle()
    return await observe(env.session, env.config.obs, obs.goal)


async def settled(env: Any) -> None:
    """Let a navigation started by the last action finish before the evaluator reads the page."""
    if env.session is not None and not env.done:
        await asyncio.sleep(0.3)
        await env.session.settle()


async def play_plan(env: Any, obs: Any, plan: Sequence[Step | str], env_config: EnvConfig, prompt_format: str,
                    rationale: bool = False, rationale_form: str = "element") -> tuple[list[StepRecord], str | None]:
    """Play `plan` in `env` from observation `obs`, writing each step in the env's action grammar against
    the live page and each response in `prompt_format`. Returns the step records and the first error (None
    when every action executed). A plain string in `plan` is an action text already in the grammar. With
    `rationale`, each response on an element first names it as its a11y line does (`rationale_text` in
    `rationale_form`)."""
    space = env_config.action_space
    records: list[StepRecord] = []
    feedback: str | None = None
    notes: list[str] = []  # facts seen since the last action (-> <conclusion>)
    memory: list[str] = []  # everything noted or done so far (-> <memory>)
    for step in plan:
        if isinstance(step, Step) and step.kind == "see":
            for _ in range(RETRIES):
                if step.text in obs.text:
                    break
                obs = await _refresh(env, obs)
            if step.text not in obs.text:
                return records, f"expected {step.text!r} on the page, not found"
            notes.append(f"The page shows {step.text!r}.")
            memory.append(f"seen {step.text!r}")
            continue
        for _ in range(4):  # a coordinate step may first scroll its target into view
            viewport = obs.metadata.viewport if obs.metadata is not None else env_config.viewport
            for attempt in range(RETRIES + 1):
                try:
                    written = Written([step]) if isinstance(step, str) else write_step(step, space, obs.elements, viewport)
                    done_line = step if isinstance(step, str) else _describe(step, obs.elements)
                    why = rationale_text(step, obs.elements, env_config, rationale_form) if rationale else None
                    break
                except LookupError as exc:
                    if attempt == RETRIES:
                        return records, str(exc)
                    obs = await _refresh(env, obs)
            for action in written.actions:
                mem = "; ".join(memory + ([done_line] if written.complete else []))
                conclusion = " ".join(notes) or None
                notes = []
                text = answer_text(action, prompt_format, memory=mem, conclusion=conclusion, rationale=why)
                rec = StepRecord(observation=obs, feedback=feedback, action=action, response_text=text,
                                 conclusion=extract_tag(text, "conclusion"), memory=extract_tag(text, "memory"))
                records.append(rec)
                res = await env.step(text)
                failed = any(line.startswith("Failed") for line in res.feedback.splitlines())  # one line per call
                if res.format_error or failed or res.termination_reason in ("env_error", "timeout"):
                    return records, f"{action!r}: {res.feedback}"
                feedback = res.feedback
                if res.done:
                    return records, None
                # look again once the page settled: the env observes right after the action, and a navigation
                # the action started may not have begun yet under load (the next step would act on the old page)
                obs = await _refresh(env, res.observation)
            if written.complete:
                memory.append(done_line)
                break
        else:
            return records, f"{step}: target still out of view after scrolling"
    return records, None


async def collect_demonstrations(
    pool: BrowserPool, env_config: EnvConfig, tasks: Sequence[Any], seeds: Sequence[int], solver: Solver,
    prompt_format: str = "bid", concurrency: int = 4, on_done: Callable[[], None] | None = None,
    only_successful: bool = True, rationale: bool = False, attempts: int = 3, rationale_form: str = "element",
) -> list[Demonstration]:
    """Play every (task, seed) with the solver's plan, written in `env_config.action_space` and wrapped in
    `prompt_format`; returns the successful demonstrations (all of them, failures with their `error`, when
    `only_successful` is False). The format must read the env's grammar: a demonstration in another grammar
    would contradict the system prompt it is trained under.

    A failed play is played again in a fresh context, up to `attempts` plays, unless the solver had no plan
    for the goal (that answer does not change). A machine under load loses plays its quiet twin does not (a
    page that does not load in time, a step or episode limit, a crashed browser); without the replay the
    demonstrations, hence the tokenizer, BC and the whole run, would depend on the load."""
    if attempts < 1:
        raise ValueError(f"attempts={attempts}: a demonstration needs at least one play")
    fmt_space = get_format(prompt_format).action_space
    if fmt_space != env_config.action_space:
        raise ValueError(f"prompt format {prompt_format!r} asks for {fmt_space!r} actions but the env's "
                         f"action_space is {env_config.action_space!r}: set env.action_space={fmt_space!r} or pick "
                         "the prompt format of that action space")
    sem = asyncio.Semaphore(concurrency)

    async def once(task: Any, seed: int) -> Demonstration:
        try:  # a browser that dies under an episode must not hang the whole collection
            return await asyncio.wait_for(play(task, seed), env_config.episode_timeout_s)
        except asyncio.TimeoutError:
            return Demonstration(task.task_id, seed, "", [], False,
                                 f"timeout: the episode took over {env_config.episode_timeout_s:.0f} s")

    async def one(task: Any, seed: int) -> Demonstration:
        async with sem:
            try:
                earlier: list[str] = []
                while True:
                    demo = await once(task, seed)
                    demo.earlier_errors = tuple(earlier)
                    if demo.success or (demo.error or "").startswith("no plan") or demo.attempts == attempts:
                        return demo
                    earlier.append(demo.error or "the task's evaluation did not count it solved")
            finally:
                if on_done is not None:
                    on_done()

    async def play(task: Any, seed: int) -> Demonstration:
        env = await pool.new_env(env_config)
        try:
            try:
                obs = await env.reset(task, seed)
            except EnvError as exc:  # the page did not load: no demonstration from this seed, the rest go on
                return Demonstration(task.task_id, seed, "", [], False, f"reset failed: {exc}")
            name = task.task_id.split(".", 1)[-1]
            try:
                plan = solver(name, obs.goal, obs.elements)
            except (LookupError, KeyError) as exc:
                return Demonstration(task.task_id, seed, obs.goal, [], False, f"no plan: {exc}")
            steps, error = await play_plan(env, obs, plan, env_config, prompt_format, rationale, rationale_form)
            await settled(env)
            ev = await env.evaluate()
            return Demonstration(task.task_id, seed, obs.goal, steps, bool(ev.success) and error is None and bool(steps),
                                 error)
        finally:
            await env.close()

    found = await asyncio.gather(*(one(t, s) for t in tasks for s in seeds))
    return [d for d in found if d.success or not only_successful]


def demo_texts(demos: Sequence[Demonstration], agent: AgentConfig) -> list[str]:
    """Everything the policy will read or write, for training its tokenizer."""
    fmt = agent.prompt()
    texts = [fmt.system_prompt()]
    for d in demos:
        texts.append(f"Task: {d.goal}")
        for s in d.steps:
            texts += [s.observation.text, s.response_text, s.feedback or ""]
    return texts


def render_demonstrations(
    demos: Sequence[Demonstration], tokenizer: PreTrainedTokenizerBase, agent: AgentConfig
) -> list[Trajectory]:
    """BC trajectories: each step's prompt as the agent's context strategy renders it, the response as the
    solver's action text followed by the end-of-turn token."""
    renderer = PromptRenderer(tokenizer)  # a VL checkpoint's processor renders the screenshots as images
    tokenizer = renderer.tokenizer
    images = renderer.processor is not None
    fmt, build = agent.prompt(), get_strategy(agent.strategy)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = eos if eos is not None and eos >= 0 else tokenizer.eos_token_id
    out = []
    for d in demos:
        past: list[StepRecord] = []
        turns: list[Turn] = []
        pieces: list[list[int]] = []
        for step in d.steps:
            current = dataclasses.replace(step, response_ids=())
            rendered = renderer.render(build(ContextInputs(fmt, d.goal, past, current, agent.last_k, images=images)))
            pieces = rendered.pieces
            ids = tuple(tokenizer.encode(step.response_text, add_special_tokens=False)) + (eos,)
            turns.append(Turn(prompt_ids=list(rendered.ids), response_ids=list(ids), response_logprobs=None,
                              observation=step.observation.text, action=step.action,
                              images=[TurnImage.of(im.data, im.grid_thw, im.pixel_values) for im in rendered.images] or None))
            past.append(dataclasses.replace(step, response_ids=ids))
        if agent.strategy in APPEND_ONLY:
            for t, piece in zip(turns, pieces):
                t.history_ids = list(piece)
        out.append(Trajectory(task_id=d.task_id, turns=turns, reward=1.0, group_id=f"{d.task_id}/{d.seed}",
                              termination="done", metadata={"seed": d.seed, "goal": d.goal, "demo": True}))
    return out
