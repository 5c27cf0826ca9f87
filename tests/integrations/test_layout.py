"""The package's shape: no module past 400 lines, no import cycle (TYPE_CHECKING included),
and one module that imports the task framework."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_redis_lock"
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Return the package modules that ``name`` imports at module level (or for typing)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # Module level, and inside top-level ``if`` blocks such as ``if TYPE_CHECKING:``.
    nodes = [
        n
        for top in tree.body
        for n in ([top, *ast.walk(top)] if isinstance(top, ast.If) else [top])
    ]
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = (
                (f"{base}.{node.module}" if node.module else base)
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module in known and module != name}


def test_no_module_is_past_400_lines() -> None:
    long = {
        name: n
        for name, path in modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_import_cycle() -> None:
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_cycle_finder_sees_relative_and_typing_imports() -> None:
    found = modules()
    edges = imports_of("django_redis_lock.lock", found["django_redis_lock.lock"], set(found))
    assert "django_redis_lock._core.handle" in edges


def test_only_one_module_imports_the_task_framework() -> None:
    # django.tasks (Django 6) or its backport: chosen in one place, so neither is required.
    importers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            if any(
                n.split(".")[:2] == ["django", "tasks"] or n.startswith("django_tasks")
                for n in names
            ):
                importers.add(name)
    assert importers == {"django_redis_lock.tasks._compat"}
