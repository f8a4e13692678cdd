"""The browser package's import graph has no cycle (counting imports inside functions and TYPE_CHECKING
blocks too) and no module imports another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import jaxwebrl.browser

PKG = Path(jaxwebrl.browser.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """module -> browser modules it imports (any import statement anywhere), and private names imported."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jaxwebrl.browser"):
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    graph[mod].add(target if target in modules else node.module)
                    if alias.name.startswith("_"):
                        private.append(f"{mod} imports {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name in modules)
        graph[mod].discard(mod)
    return {m: {t for t in ts if t in modules} for m, ts in graph.items()}, private


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (c := visit(t)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_browser_import_graph_has_no_cycle_and_no_private_imports():
    graph, private = import_graph()
    assert len(graph) >= 15 and sum(len(v) for v in graph.values()) > 20  # the walk saw the package
    assert find_cycle(graph) is None, find_cycle(graph)  # packages (their __init__) are nodes too
    assert private == []
    assert "jaxwebrl.browser.pool" not in graph["jaxwebrl.browser.env"]  # the env knows only the lease protocol


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
