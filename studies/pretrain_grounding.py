"""Synthetic element-grounding pretraining for a policy trained from scratch (a study tool for issue 27 item 4).

A pretrained LLM arrives able to copy from its context; the main job's 0.9M-parameter policy does not, and
without that it cannot find the goal's element on a page (RESULTS.md, "RL on the demonstrated tasks"). This
script gives the run's freshly initialised policy some of that ability before behaviour cloning: single-turn
synthetic pages in the run's own prompt and a11y-line format (one goal naming one element among 2-8 buttons,
links, radios, checkboxes or tabs, names drawn from the demonstrations' page words and random strings), each
answered by clicking that element, with a `<think>` rationale when `bc.rationale` is on. It trains them as BC
would (same loss, page tokens at `bc.context_loss_weight`) and replaces the run's `policy_init` with the
result, so the next `scripts/train.py` on that workdir starts BC from it (and the report's "random" row is
this pretrained policy, not a fresh one).

    # the demonstrations and fresh init of a run with the same settings (its bc/ and rl/ are not copied)
    mkdir -p runs/g && cp -r runs/grpo_local/policy_init runs/grpo_local/demonstrations.jsonl runs/g/
    python studies/pretrain_grounding.py --config configs/grpo_local.py --config.workdir=runs/g   # 40k pages, 1500 steps
    python scripts/train.py --config configs/grpo_local.py --config.workdir=runs/g                # BC, RL, report

Pass the same --config overrides to both commands (env.ids_after_names, bc.rationale, bc.seq_len ...).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import string
import sys
import time
from pathlib import Path
from typing import Any

from absl import app, flags
from ml_collections import config_flags

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
from jaxwebrl.browser.marking import Element  # noqa: E402
from jaxwebrl.browser.observation import axtree_line, element_head  # noqa: E402

# role -> goal phrasings naming one element of that role
GOALS = {
    "button": ['Click on the "{n}" button.', 'Click the button "{n}".', "Press {n}."],
    "link": ['Click on the link "{n}".', "Follow the link {n}."],
    "radio": ["Select {n} and click Submit.", "Choose {n}."],
    "checkbox": ["Select {n} and click Submit.", "Tick {n}."],
    "tab": ["Click on {n}.", "Open the tab {n}."],
}
BUTTON_WORDS = ("ok", "Ok", "okay", "Okay", "cancel", "Cancel", "submit", "Submit", "yes", "Yes", "no", "No", "next",
                "Next", "previous", "Previous")
TITLES = ("Click Task", "Form", "Page", "Click Button Task", "Click Option Task", "Click Link Task")


def page_words(demo_file: Path) -> list[str]:
    """Quoted names on the demonstrations' pages: the vocabulary real pages use."""
    from jaxwebrl.data.records import read_jsonl

    words = {w for t in read_jsonl(str(demo_file)) for turn in t.turns
             for w in re.findall(r"'([A-Za-z][A-Za-z,.]{0,12})'", turn.observation or "")}
    return sorted(words - {"StaticText"})


def _element(i: int, role: str, name: str, depth: int, **props: Any) -> Element:
    """A synthetic page's element, to be written by the env's own line renderer."""
    return Element(id=str(i), tag="", role=role, name=name, text=name, depth=depth, visible=True, interactive=True,
                   in_viewport=True, bbox=(0.0, 0.0, 0.0, 0.0), props=props, attrs={}, is_frame=False)


def synthetic_page(r: random.Random, words: list[str], ids_after_names: bool) -> tuple[str, str, str, str]:
    """(goal, page text, target head, action): the page in the a11y-line format the env renders."""
    def name() -> str:
        k = r.random()
        if k < 0.4:
            return r.choice(words)
        if k < 0.8:
            return "".join(r.choice(string.ascii_letters + string.digits) for _ in range(r.randint(2, 7)))
        return r.choice(BUTTON_WORDS)

    role = r.choice(list(GOALS))
    names: list[str] = []
    count = r.randint(2, 8)
    while len(names) < count:
        x = name()
        if x not in names:
            names.append(x)
    target = r.randrange(len(names))
    goal = r.choice(GOALS[role]).format(n=names[target])
    title = r.choice(TITLES)
    elements = [_element(1, "StaticText", goal, 0)]
    target_el = elements[0]
    for k, nm in enumerate(names):
        if r.random() < 0.25:  # filler text between elements, as MiniWoB++ pages have
            filler = " ".join(r.choice(words) for _ in range(r.randint(1, 4)))
            elements.append(_element(len(elements) + 1, "StaticText", filler, 0))
        if role in ("radio", "checkbox"):
            elements.append(_element(len(elements) + 1, "LabelText", nm, 0))
            elements.append(_element(len(elements) + 1, role, nm, 1, required=False, checked=False))
        elif role == "link":
            elements.append(_element(len(elements) + 1, "StaticText", nm, 1))
        else:
            elements.append(_element(len(elements) + 1, role, nm, 0))
        if k == target:
            target_el = elements[-1]
    if role in ("radio", "checkbox"):
        elements.append(_element(len(elements) + 1, "button", "Submit", 0))
    lines = [f"RootWebArea {title!r} focused: True"] + [axtree_line(el, id_after_name=ids_after_names) for el in elements]
    return goal, "\n".join(lines), element_head(target_el, ids_after_names), f"click('{target_el.id}')"


def main() -> None:
    """Flags are defined here, not at import, so tests can import the page generator."""
    config_ = config_flags.DEFINE_config_file("config", os.path.join(ROOT, "configs", "grpo_local.py"),
                                              "The run config (its workdir must hold demonstrations and policy_init).")
    pages_ = flags.DEFINE_integer("pages", 40_000, "Synthetic pages to generate.")
    steps_ = flags.DEFINE_integer("steps", 1500, "Optimizer steps of pretraining.")
    seq_ = flags.DEFINE_integer("seq_len", 512, "Packed row length (a page is 100-470 tokens).")
    batch_ = flags.DEFINE_integer("micro_batch", 6, "Rows per step.")
    seed_ = flags.DEFINE_integer("seed", 0, "Page generator seed.")

    def _main(argv: list[str]) -> None:
        del argv
        from transformers import AutoTokenizer

        from jaxwebrl.agent.context import StepRecord
        from jaxwebrl.browser.observation import Observation
        from jaxwebrl.config import apply_variants, parse_config
        from jaxwebrl.data.records import write_jsonl
        from jaxwebrl.demos.collect import Demonstration, answer_text, render_demonstrations
        from jaxwebrl.fields import with_changes
        from jaxwebrl.main_job.stages import DEMONSTRATIONS_FILE, behaviour_cloning

        run = parse_config(apply_variants(config_.value))
        work = Path(run.workdir)
        init_dir, demo_file = work / "policy_init", work / DEMONSTRATIONS_FILE
        if not (init_dir / "config.json").exists() or not demo_file.exists():
            raise SystemExit(f"{work} has no policy_init or {DEMONSTRATIONS_FILE}: copy both from a run with the "
                             "same settings (see this script's docstring)")
        if (work / "bc").exists():
            raise SystemExit(f"{work / 'bc'} exists: behaviour cloning already ran from the old policy_init; remove it")
        t0 = time.time()
        r, words = random.Random(seed_.value), page_words(demo_file)
        ids_after = run.env.ids_after_names
        demos = []
        for s in range(pages_.value):
            goal, text, target_head, action = synthetic_page(r, words, ids_after)
            response = answer_text(action, run.agent.prompt_format, rationale=target_head if run.bc.rationale else None)
            demos.append(Demonstration("synthetic.grounding", s, goal,
                                       [StepRecord(Observation(goal=goal, text=text), None, response, (), action)], True))
        tok = AutoTokenizer.from_pretrained(str(init_dir))
        trajs = [t for t in render_demonstrations(demos, tok, run.agent)
                 if len(t.turns[0].prompt_ids) + len(t.turns[0].response_ids) <= seq_.value]
        pre = work / "grounding_pretraining"
        shutil.rmtree(pre, ignore_errors=True)
        pre.mkdir(parents=True)
        shutil.copytree(init_dir, pre / "policy_init")
        write_jsonl(pre / DEMONSTRATIONS_FILE, trajs)
        print(f"{len(trajs)} synthetic pages ({len(words)} page words) in {time.time() - t0:.0f}s; e.g.\n"
              f"{tok.decode(trajs[0].turns[0].prompt_ids)}{tok.decode(trajs[0].turns[0].response_ids)}")
        sub = with_changes(run, **{"workdir": str(pre), "bc.steps": steps_.value, "bc.seq_len": seq_.value,
                                   "bc.micro_batch": batch_.value})
        t1 = time.time()
        out = behaviour_cloning(sub)
        shutil.rmtree(init_dir)
        shutil.copytree(out, init_dir)
        print(f"pretrained {steps_.value} steps in {time.time() - t1:.0f}s; {init_dir} replaced by {out}")

    app.run(_main)


if __name__ == "__main__":
    main()
