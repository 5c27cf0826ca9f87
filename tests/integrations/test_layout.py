"""The package's shape: no module past 400 lines, no import cycle (TYPE_CHECKING included),
layers that import downwards only, one module that imports the task framework, no new module
name shared by two modules, and a map in docs/architecture.rst that names every module and
subpackage of the top two levels."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_redis_lock"
MAX_LINES = 400
CORE = "django_redis_lock._core"

#: What ``_core`` may import from outside itself: the foundations every handle stands on.
FOUNDATIONS = {
    "django_redis_lock.exceptions",
    "django_redis_lock.signals",
    "django_redis_lock.conf",
    "django_redis_lock.handler",
    "django_redis_lock.backends.base",
}

#: The private packages at the root. Privacy is on packages: a new private module belongs in
#: one of them, or in its integration's package.
ROOT_PRIVATE = {"_core/", "_single_instance/"}

#: The modules of the root, the public faces and the files Django requires: about fifteen.
ROOT_MODULES = {
    "__init__",
    "apps",
    "checks",
    "conf",
    "decorators",
    "exceptions",
    "handler",
    "leader",
    "listing",
    "lock",
    "mixins",
    "models",
    "multilock",
    "ratelimit",
    "rwlock",
    "signals",
}

#: Integrations and admin: nothing ``import django_redis_lock`` loads.
OPTIONAL_LAYERS = (
    "admin",
    "_single_instance",
    "celery",
    "tasks",
    "viewlock",
    "management",
    "contrib",
)


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


def top_level_imports(path: Path) -> list[ast.stmt]:
    """Return the imports of ``path`` at module level and in top-level ``if`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # ``if TYPE_CHECKING:`` blocks count: a cycle through them breaks the type checker.
    return [
        n
        for top in tree.body
        for n in ([top, *ast.walk(top)] if isinstance(top, ast.If) else [top])
        if isinstance(n, (ast.Import, ast.ImportFrom))
    ]


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Return the package modules that importing ``start`` imports, directly or not."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def in_core(name: str) -> bool:
    return name == CORE or name.startswith(f"{CORE}.")


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Return the package modules that ``name`` imports at module level (or for typing)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in top_level_imports(path):
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
    graph = import_graph()
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


def test_core_imports_only_itself_and_the_foundations() -> None:
    # _core decides for every handle: a face, a backend or an integration imported here would be
    # loaded by all of them, and would tie the layers into one.
    outside = {
        f"{name} -> {target}"
        for name, targets in import_graph().items()
        if in_core(name)
        for target in targets
        if not in_core(target) and target not in FOUNDATIONS
    }
    assert outside == set()


def test_backends_take_from_core_only_modules_that_lead_back_to_no_backend() -> None:
    # The core stands on backends.base; a backend may use the core's leaves (owner tokens,
    # argument rules) but nothing that imports a backend in turn.
    graph = import_graph()
    back = {
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("django_redis_lock.backends")
        for target in targets
        if in_core(target)
        and any(m.startswith("django_redis_lock.backends") for m in reachable(graph, target))
    }
    assert back == set()


def test_the_core_package_itself_imports_nothing() -> None:
    # Importing one core module (a backend imports owner.py) must not load the whole core.
    assert import_graph()[CORE] == set()


def test_privacy_is_on_packages__the_root_holds_no_new_private_module() -> None:
    private = {
        path.stem if path.suffix == ".py" else f"{path.name}/"
        for path in PACKAGE.iterdir()
        if path.name.startswith("_")
        and path.name not in {"__init__.py", "__pycache__"}
        and (path.suffix == ".py" or path.is_dir())
    }
    assert private == ROOT_PRIVATE


def test_the_root_holds_only_the_public_faces_and_djangos_files() -> None:
    assert {path.stem for path in PACKAGE.glob("*.py")} == ROOT_MODULES


def absolute_imports(path: Path) -> set[str]:
    """Return the modules outside the package that ``path`` imports at module level."""
    found: set[str] = set()
    for node in top_level_imports(path):
        if isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if not name.startswith("django_redis_lock")}


def test_importing_the_package_loads_no_integration_nor_celery_nor_the_admin() -> None:
    found = modules()
    loaded = {"django_redis_lock"} | reachable(import_graph(), "django_redis_lock")
    layers = sorted(m for m in loaded if m.split(".")[1:2] and m.split(".")[1] in OPTIONAL_LAYERS)
    hosts = sorted(
        f"{name} -> {host}"
        for name in loaded
        for host in absolute_imports(found[name])
        if host.split(".")[0] in {"celery", "kombu"} or host.startswith("django.contrib.admin")
    )
    assert (layers, hosts) == ([], [])


#: Module names that several modules share, each with the paths that share it: ``apps`` is
#: Django's convention and ``cluster`` one subject (a backend, a test topology).
SHARED_NAMES = {
    "apps": {"apps.py", "contrib/health_check/apps.py", "contrib/prometheus/apps.py"},
    "cluster": {"backends/cluster.py", "testing/topologies/cluster.py"},
}


def test_no_new_module_name_is_shared() -> None:
    # A leading underscore marks privacy, not meaning: _options.py and options.py share a name.
    by_name: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py" and "migrations" not in path.parts:
            by_name.setdefault(path.stem.lstrip("_"), set()).add(
                path.relative_to(PACKAGE).as_posix()
            )
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == SHARED_NAMES


MAP = ROOT / "docs" / "architecture.rst"

#: A path in the map: ``steps.py``, ``_redis/``, or ``celery/beat.py`` (relative to its folder).
_PATH = re.compile(r"(?<![\w./-])((?:\w+/)*\w+(?:\.py|/))(?!\w)")

#: Words of the map shaped like paths that name none (a command line).
_NOT_PATHS = {"manage.py"}


def mapped() -> set[str]:
    """Return the paths (from the repository root) that the tree of docs/architecture.rst names.

    A line whose first word is a folder (``backends/``) opens it for the lines indented below
    it, continuation lines included; every other path on a line is relative to its folder.
    """
    block = MAP.read_text(encoding="utf-8").split(".. code-block:: text", 1)[1]
    named: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines()[1:]:
        stripped = line.lstrip()
        if not stripped:
            continue
        if line == stripped:  # the text after the block
            break
        indent = len(line) - len(stripped)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        here = folders[-1][1] if folders else ""
        for token in _PATH.findall(stripped):
            if token in _NOT_PATHS:
                continue
            if stripped.startswith(token) and token.endswith("/"):
                folders.append((indent, here + token))
                named.add(here + token.rstrip("/"))
                here += token
            else:
                named.add(here + token.rstrip("/"))
    return named


def must_be_mapped() -> set[str]:
    """Return the modules and subpackages of the package's top two levels, from the repository.

    Deeper modules (``backends/_redis/keys.py``) are their folder's own business; the folder
    is on the map.
    """
    wanted = {"django_redis_lock/__init__.py"}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if path.name == "__init__.py":
            if 2 <= len(parts) - 1 <= 3:
                wanted.add("/".join(parts[:-1]))
        elif len(parts) <= 3 and "migrations" not in parts:
            wanted.add("/".join(parts))
    return wanted


def test_the_map_reader_sees_folders_modules_and_continuation_lines() -> None:
    named = mapped()
    assert {
        "django_redis_lock/_core/steps.py",
        "django_redis_lock/backends/_redis",
        "django_redis_lock/backends/_redis/renew.py",
        "django_redis_lock/celery/beat.py",
    } <= named


def test_the_architecture_map_names_every_module_and_subpackage() -> None:
    assert sorted(must_be_mapped() - mapped()) == []


def test_the_architecture_map_names_nothing_that_does_not_exist() -> None:
    assert sorted(path for path in mapped() if not (ROOT / path).exists()) == []


def test_the_lock_keywords_are_one_type__lock_takes_exactly_them() -> None:
    # lock()'s signature is spelt out for readers (help(), IDEs); LockKeywords names the same
    # keywords for every handle built from them. They must not drift apart.
    import inspect

    from django_redis_lock._core.lock_arguments import LockArguments, LockKeywords

    parameters = inspect.signature(LockArguments.__init__).parameters
    spelt_out = {
        name: str(parameter.annotation).replace(" ", "")
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    typed = {
        name: str(getattr(hint, "__forward_arg__", hint)).replace(" ", "")
        for klass in reversed(LockKeywords.__mro__)
        for name, hint in getattr(klass, "__annotations__", {}).items()
    }
    assert spelt_out == typed
