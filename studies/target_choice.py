"""What a policy that names its target before the id (`configs/grpo_local_smollm2_named.py`) gets wrong on its
first action: the element it chooses, or the id it copies (issue 40, why RL does not move the demonstrated tasks).

    python studies/target_choice.py RUN [RUN ...]          # RUN: a main-job workdir (or a seeds.py seed_<k>)

Reads each run's `episodes/<policy>.jsonl` (the greedy evaluation) and decodes every episode's first turn with
the run's own tokenizer (`bc/hf`). The answer `<think>button 'OK' [4]</think>click('4')` names one line of the
page; the first turn falls in one of:
- `unparsed`: no `<think>LINE [ID]</think>ACTION('ID'` in it;
- `invented line`: the named line is not a line of the page, case aside (a label paired with another element's
  id, an id the page does not have);
- `the goal's element`: a line of the page whose quoted label is in the task's goal;
- `another labelled element`: a line of the page whose label the goal does not name (the wrong choice);
- `an unlabelled element`: a line of the page with an empty label (a textbox: the goal cannot name it);
and, for the parsed ones, whether the action's id is the named line's; and whether the answer writes several
actions. Counts are per policy, task and outcome, summed over the runs.
"""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

THINK = re.compile(r"<think>(?P<line>.*?) \[(?P<id>\d+)\]</think>\s*\w+\('(?P<action_id>[^']*)'")
LABEL = re.compile(r"'(?P<label>.*)'")
GOAL = re.compile(r"Task: (?P<goal>.*)")
ACTION = re.compile(r"\b[a-z_]+\('")
CATEGORIES = ("the goal's element", "another labelled element", "an unlabelled element", "invented line", "unparsed")


def classify_first_turn(prompt: str, response: str) -> tuple[str, bool | None]:
    """(category, whether the action's id is the named line's; None when unparsed) of one first turn."""
    m = THINK.search(response)
    if m is None:
        return "unparsed", None
    line, eid = m.group("line").strip(), m.group("id")
    same_id = m.group("action_id") == eid
    page_lines = {raw.strip().lower() for raw in re.split(r"\n|<\|im_end\|>", prompt)}
    named = f"{line} [{eid}]".lower()  # a copy that only changed case names the same line
    if not any(p == named or p.startswith(named + " ") for p in page_lines):
        return "invented line", same_id
    label_match = LABEL.search(line)
    label = label_match.group("label") if label_match else ""
    if not label:
        return "an unlabelled element", same_id
    goal_match = GOAL.search(prompt)
    goal = goal_match.group("goal") if goal_match else ""
    return ("the goal's element" if label.lower() in goal.lower() else "another labelled element"), same_id


def action_count(response: str) -> int:
    """How many actions the answer writes after its `<think>` (BC's focus-text-2 answers write four)."""
    return len(ACTION.findall(response.split("</think>", 1)[-1]))


def count_run(run: Path, counts: collections.Counter) -> None:
    """Add one run's first turns to `counts[(policy, task, succeeded, category, same_id, several_actions)]`."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(run / "bc" / "hf"))
    for path in sorted((run / "episodes").glob("*.jsonl")):
        for raw in path.read_text().splitlines():
            episode = json.loads(raw)
            if not episode["turns"]:
                continue
            turn = episode["turns"][0]
            response = tok.decode(turn["response_ids"])
            category, same_id = classify_first_turn(tok.decode(turn["prompt_ids"]), response)
            counts[(path.stem, episode["task_id"].split(".", 1)[-1], episode["reward"] > 0, category, same_id,
                    action_count(response) > 1)] += 1


def table(counts: collections.Counter, tasks: list[str] | None = None) -> str:
    """Markdown: per policy and outcome, the first turns by category (ids copied right / wrong in brackets), and
    how many of them write several actions."""
    rows = ["| policy | outcome | " + " | ".join(CATEGORIES) + " | several actions |",
            "|---|---|" + "---|" * (len(CATEGORIES) + 1)]
    for policy in sorted({k[0] for k in counts}):
        for ok in (True, False):
            cells = []
            for cat in CATEGORIES:
                keys = [k for k in counts if k[0] == policy and k[2] == ok and k[3] == cat
                        and (tasks is None or k[1] in tasks)]
                n = sum(counts[k] for k in keys)
                wrong_id = sum(counts[k] for k in keys if k[4] is False)
                cells.append(f"{n}" + (f" ({wrong_id} id differs)" if wrong_id else ""))
            several = sum(n for k, n in counts.items() if k[0] == policy and k[2] == ok and k[5]
                          and (tasks is None or k[1] in tasks))
            rows.append(f"| {policy} | {'success' if ok else 'failure'} | " + " | ".join(cells) + f" | {several} |")
    return "\n".join(rows)


def demonstrated_tasks(run: Path) -> set[str]:
    """The tasks BC had demonstrations of (the run's demonstrations.jsonl; empty when it is gone)."""
    demo_file = run / "demonstrations.jsonl"
    if not demo_file.exists():
        return set()
    with demo_file.open() as f:
        return {json.loads(line)["task_id"].split(".", 1)[-1] for line in f if line.strip()}


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    counts: collections.Counter = collections.Counter()
    demonstrated: set[str] = set()
    for run in argv:
        count_run(Path(run), counts)
        demonstrated |= demonstrated_tasks(Path(run))
    tasks = sorted({k[1] for k in counts})
    print(f"first turns of {len(argv)} run(s), every task:\n\n{table(counts)}\n")
    shown = [t for t in tasks if t in demonstrated]
    if shown and len(shown) < len(tasks):
        print(f"tasks with demonstrations ({', '.join(shown)}):\n\n{table(counts, shown)}\n")
        rest = [t for t in tasks if t not in demonstrated]
        print(f"tasks without demonstrations ({', '.join(rest)}):\n\n{table(counts, rest)}\n")
    for task in tasks:
        print(f"{task}:\n\n{table(counts, [task])}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
