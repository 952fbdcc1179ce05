"""The package's modules import one another without a circle, type-only imports (``if TYPE_CHECKING``) included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sandboxd"


def _imports() -> dict[str, set[str]]:
    """Each module of the package (generated code aside) and the modules of the package it imports."""
    graph: dict[str, set[str]] = {}
    for file in sorted(PACKAGE.glob("*.py")):
        name = file.stem
        targets: set[str] = set()
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None:
                targets.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                targets.update(alias.name for alias in node.names)
        graph[name] = {target for target in targets if (PACKAGE / f"{target}.py").exists() and target != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_no_module_imports_itself_around_a_circle() -> None:
    graph = _imports()
    assert "_files" in graph and "_async_sandbox" in graph["__init__"] | graph["_sync"]
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])
