"""studies/target_choice.py sorts a named-target policy's first turn by what it chose: hand-written pages and
answers, one per category, checked against the category each was written to be."""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("target_choice", ROOT / "studies" / "target_choice.py")
assert spec is not None and spec.loader is not None
target_choice = importlib.util.module_from_spec(spec)
spec.loader.exec_module(target_choice)

PAGE = ("<|im_start|>user\nTask: Click on the \"Okay\" button.\nRootWebArea 'Click Button Task' focused: True\n"
        "\tbutton 'Okay' [3]\n\ttextbox '' [4] required: False\n\tbutton 'Submit' [8]<|im_end|>\n<|im_start|>assistant\n")


def test_each_category_from_a_hand_written_answer() -> None:
    classify = target_choice.classify_first_turn
    assert classify(PAGE, "<think>button 'Okay' [3]</think>click('3')<|im_end|>") == ("the goal's element", True)
    assert classify(PAGE, "<think>button 'okay' [3]</think>click('3')") == ("the goal's element", True)  # case only
    assert classify(PAGE, "<think>button 'Okay' [3]</think>click('8')") == ("the goal's element", False)
    # the last line of the page ends in <|im_end|>, and is still a line of the page
    assert classify(PAGE, "<think>button 'Submit' [8]</think>click('8')") == ("another labelled element", True)
    assert classify(PAGE, "<think>textbox '' [4]</think>fill('4', 'x')") == ("an unlabelled element", True)
    assert classify(PAGE, "<think>button 'Okay' [8]</think>click('8')") == ("invented line", True)
    assert classify(PAGE, "<think>button 'Okay' [9]</think>click('9')") == ("invented line", True)
    assert classify(PAGE, "click('3')") == ("unparsed", None)
    assert classify(PAGE, "<think>button 'Okay' [3]</think>click('Okay')") == ("the goal's element", False)


def test_table_counts_and_marks_differing_ids() -> None:
    counts = collections.Counter({("BC", "click-button", False, "another labelled element", True, False): 2,
                                  ("BC", "click-button", True, "the goal's element", True, False): 1,
                                  ("BC", "click-link", True, "the goal's element", False, True): 3})
    rows = target_choice.table(counts).splitlines()
    assert rows[2] == "| BC | success | 4 (3 id differs) | 0 | 0 | 0 | 0 | 3 |"
    assert rows[3] == "| BC | failure | 0 | 2 | 0 | 0 | 0 | 0 |"
    assert target_choice.table(counts, ["click-button"]).splitlines()[2] == "| BC | success | 1 | 0 | 0 | 0 | 0 | 0 |"


def test_action_count_reads_after_the_think() -> None:
    assert target_choice.action_count("<think>textbox '' [4]</think>focus('1')focus('2')focus('3')<|im_end|>") == 3
    assert target_choice.action_count("<think>button 'click('x')' [2]</think>click('2')") == 1  # the think is skipped
    assert target_choice.action_count("<think>textbox '' [4]</think><|im_end|>") == 0
