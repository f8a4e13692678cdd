"""studies/pretrain_grounding.py's synthetic pages: in both a11y-line formats the goal names exactly the
element the answer clicks, the rationale is that element's own line head, and ids run 1..n down the page."""

from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("pretrain_grounding", ROOT / "studies" / "pretrain_grounding.py")
pg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pg)

WORDS = ["lorem", "ipsum", "Dolor", "sit.", "amet,"]


@pytest.mark.parametrize("ids_after_names", [False, True])
def test_the_goal_names_the_clicked_element_and_the_rationale_is_its_line(ids_after_names):
    r = random.Random(0)
    roles = set()
    for _ in range(300):
        goal, text, head, action = pg.synthetic_page(r, WORDS, ids_after_names)
        target = re.fullmatch(r"click\('(\d+)'\)", action).group(1)
        m = re.fullmatch(r"(\S+) '(.*)' \[(\d+)\]" if ids_after_names else r"\[(\d+)\] (\S+) '(.*)'", head)
        role, name, hid = (m.group(1), m.group(2), m.group(3)) if ids_after_names else (m.group(2), m.group(3), m.group(1))
        assert hid == target and name in goal
        lines = text.splitlines()[1:]
        assert sum(line.strip().startswith(head) for line in lines) == 1  # the head is one line's own start
        ids = [int(re.search(r"\[(\d+)\]", line).group(1)) for line in lines]
        assert ids == list(range(1, len(ids) + 1))
        assert lines[0].strip().startswith(("[1] StaticText", "StaticText")) and goal in lines[0]
        clickable = [line for line in lines[1:] if re.search(rf"\b{role} '", line)]
        assert sum(f"'{name}'" in line for line in clickable) == 1  # names are unique among the candidates
        roles.add(role)
    assert roles == {"button", "StaticText", "radio", "checkbox", "tab"}
