"""A state-change summariser without a model: Delta(o_t, a_t, o_t+1) written by a rule from the pages' text.

NNetNav's summariser is a prompted LLM (Listing 3). A policy trained from scratch here cannot write one, and
there are no reference summaries to fine-tune one on, so the local run describes each step by rule: the action
with the element it named (its role and name, read from the page the action was taken on, element ids left
out) and the page lines that appeared or disappeared. The labeler trained here
(`jaxwebrl.judge_training.labeler`) learns summaries -> instruction on these same summaries, and exploration
(`nnetnav.summarizer='page_diff'`) writes them the same way, so the labeler reads at exploration time what it
was trained on.

    PageDiffSummarizer("bid").summary(before_text, "click('12')", after_text)
    -> "Clicked button 'Submit'. The page now shows: StaticText 'Done'."
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from jaxwebrl.data.records import Trajectory
from jaxwebrl.judges.base import Verdict

_ID_LINE = re.compile(r"^\s*\[([^\]]+)\]\s+(\S+)\s?(.*)$")
_NAME = re.compile(r"""^('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")  # the element's quoted name, before its properties
VERBS = {"click": "clicked", "dblclick": "double-clicked", "hover": "hovered over", "focus": "focused",
         "clear": "cleared", "check": "checked", "uncheck": "unchecked"}


def _elements(page: str) -> dict[str, tuple[str, str]]:
    """id -> (role, quoted name) for every line of an axtree page (its properties, e.g. `checked: False`, left
    out: the page change shows what an action changed in them)."""
    out = {}
    for line in page.splitlines():
        m = _ID_LINE.match(line)
        if m:
            name = _NAME.match(m.group(3).strip())
            out[m.group(1)] = (m.group(2), name.group(1) if name else m.group(3).strip())
    return out


def _content(line: str, max_chars: int) -> str:
    """A page line without its indentation and element id (ids differ between instances and say nothing)."""
    m = _ID_LINE.match(line)
    text = f"{m.group(2)} {m.group(3)}".strip() if m else line.strip()
    return text[:max_chars]


def describe_action(action_text: str, page: str, action_space: str = "bid") -> str:
    """What the action did in words, naming the element by its role and name on `page`."""
    from jaxwebrl.browser.actions import get_action_space

    parsed = get_action_space(action_space).parse(action_text)
    if not isinstance(parsed, list) or not parsed:
        return "wrote no valid action"
    elements = _elements(page)
    parts = []
    for a in parsed:
        bid = a.args.get("bid")
        target = ""
        if bid is not None:
            role, rest = elements.get(str(bid), ("element", "not on the page"))
            target = f"{role} {rest}".strip()
        if a.name in VERBS:
            parts.append(f"{VERBS[a.name]} {target}")
        elif a.name == "fill":
            parts.append(f"typed {str(a.args.get('value'))!r} into {target}")
        elif a.name == "select_option":
            parts.append(f"selected {str(a.args.get('options'))!r} in {target}")
        elif a.name == "press":
            parts.append(f"pressed {a.args.get('key_comb')} on {target}")
        elif a.name == "send_msg_to_user":
            parts.append(f"answered {str(a.args.get('text'))!r}")
        else:
            args = ", ".join(f"{v}" for v in a.args.values())
            parts.append(f"{a.name.replace('_', ' ')} {args}".strip())
    return "; ".join(parts)


def page_change(before: str, after: str, max_lines: int = 3, max_chars: int = 80) -> str:
    """The lines that appeared and disappeared (ids and indentation ignored), a few of each."""
    old = [_content(line, max_chars) for line in before.splitlines() if line.strip()]
    new = [_content(line, max_chars) for line in after.splitlines() if line.strip()]
    old_set, new_set = set(old), set(new)
    added = list(dict.fromkeys(x for x in new if x not in old_set))
    removed = list(dict.fromkeys(x for x in old if x not in new_set))
    if not added and not removed:
        return "The page did not change."
    out = []
    if added:
        more = f" (+{len(added) - max_lines} more)" if len(added) > max_lines else ""
        out.append("The page now shows: " + "; ".join(added[:max_lines]) + more + ".")
    if removed:
        more = f" (+{len(removed) - max_lines} more)" if len(removed) > max_lines else ""
        out.append("It no longer shows: " + "; ".join(removed[:max_lines]) + more + ".")
    return " ".join(out)


class PageDiffSummarizer:
    """The summariser by rule (see the module doc), with the judges' interface (`judge(trajectory)` -> a
    Verdict whose `extra['summaries']` holds one summary per turn) so `NNetNavJudges` takes it in place of the
    model summariser. It calls no model: it cannot time out or fail."""

    name = "page_diff_summarizer"
    backend = None  # nothing to close

    def __init__(self, action_space: str = "bid", max_lines: int = 3, max_chars: int = 80) -> None:
        self.action_space, self.max_lines, self.max_chars = action_space, max_lines, max_chars

    def summary(self, before: str, action: str, after: str) -> str:
        what = describe_action(action, before, self.action_space)
        return f"{what[:1].upper()}{what[1:]}. {page_change(before, after, self.max_lines, self.max_chars)}"

    def summaries(self, pages: Sequence[str], actions: Sequence[str]) -> list[str]:
        """One summary per action; `pages` holds the page before each action and the one after the last."""
        if len(pages) != len(actions) + 1:
            raise ValueError(f"{len(actions)} actions need {len(actions) + 1} pages, got {len(pages)}")
        return [self.summary(pages[i], a, pages[i + 1]) for i, a in enumerate(actions)]

    async def judge(self, trajectory: Trajectory) -> Verdict:
        pages = [t.observation for t in trajectory.turns] + [str(trajectory.metadata.get("final_observation") or "")]
        out = self.summaries(pages, [t.action for t in trajectory.turns])
        return Verdict("labeled", 1.0, 0.0, output="\n".join(out), judge=self.name, extra={"summaries": out})

    async def close(self) -> Any:
        return None
