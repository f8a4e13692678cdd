"""studies/compare_runs.py pairs policies of different runs on the episodes they share: one policy's
evaluations of different task lists join into one, a conflicting episode is refused, and the paired table
counts only shared episodes (hand-written outcomes, checked against hand-counted numbers)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("compare_runs", ROOT / "studies" / "compare_runs.py")
assert spec is not None and spec.loader is not None
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def write(path: Path, key: str, outcomes: dict[str, bool]) -> str:
    path.write_text(json.dumps({key: {"outcomes": outcomes}}))
    return str(path)


def test_parts_join_into_one_policy_and_a_conflict_is_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", "bc/hf", {"miniwob.click-button@1": True, "miniwob.click-button@2": False})
    b = write(tmp_path / "b.json", "bc/hf", {"miniwob.click-test@1": True, "miniwob.click-button@2": False})
    name, outcomes = compare_runs.load(f"BC={a}:bc/hf+{b}:bc/hf")
    assert name == "BC"
    assert outcomes == {"miniwob.click-button@1": True, "miniwob.click-button@2": False, "miniwob.click-test@1": True}
    c = write(tmp_path / "c.json", "bc/hf", {"miniwob.click-button@1": False})
    with pytest.raises(SystemExit, match="click-button@1 has different outcomes"):
        compare_runs.load(f"BC={a}:bc/hf+{c}:bc/hf")
    with pytest.raises(SystemExit, match="has policies"):
        compare_runs.load(f"BC={a}:rl/hf")


def test_the_paired_table_counts_shared_episodes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    episodes = [f"miniwob.click-button@{i}" for i in range(6)]
    bc = write(tmp_path / "bc.json", "BC", {e: i < 2 for i, e in enumerate(episodes)})  # 2 of 6
    rl_part = write(tmp_path / "rl1.json", "RL", {e: i < 5 for i, e in enumerate(episodes[:4])})  # 4 of 4
    rl_rest = write(tmp_path / "rl2.json", "RL", {"miniwob.click-button@4": True, "miniwob.click-test@9": True})
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", "--policy", f"BC={bc}:BC",
                                      "--policy", f"RL={rl_part}:RL+{rl_rest}:RL"])
    compare_runs.main()
    out = capsys.readouterr().out
    # shared: click-button seeds 0-4 (seed 5 only BC, click-test only RL); BC 2/5, RL 5/5
    assert out.startswith("5 shared episodes on 1 tasks")
    assert "RL: 6 played" in out and "BC: 6 played" in out
    assert "2/5" in out and "5/5" in out
