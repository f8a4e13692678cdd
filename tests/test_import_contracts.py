"""DESIGN.md's layering, enforced: the import contracts in pyproject.toml ([tool.importlinter]) hold, a
deliberate back-edge breaks them, and no module of the package takes part in an import cycle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT = str(Path(sys.executable).parent / "lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(root))  # the `jaxwebrl` under `root`, not the installed one
    return subprocess.run([LINT, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold() -> None:
    out = _lint(ROOT)
    assert "Analyzed" in out.stdout and "Contracts: 3 kept, 0 broken." in out.stdout, out.stdout + out.stderr
    assert out.returncode == 0


def test_a_back_edge_breaks_the_layers(tmp_path: Path) -> None:
    """models importing the trainer (an RL layer) must fail the contracts."""
    shutil.copytree(ROOT / "jaxwebrl", tmp_path / "jaxwebrl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    rope = tmp_path / "jaxwebrl" / "models" / "rope.py"
    rope.write_text(rope.read_text() + "\nfrom jaxwebrl.train import trainer  # noqa: E402,F401  (a back-edge)\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "jaxwebrl.models.rope -> jaxwebrl.train.trainer" in out.stdout, out.stdout


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(scc)

    sys.setrecursionlimit(10_000)
    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles() -> None:
    graph = grimp.build_graph("jaxwebrl", exclude_type_checking_imports=True)
    assert len(graph.modules) > 50  # the whole package was read
    assert _cycles(graph) == []
