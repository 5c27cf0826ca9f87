"""Every import path the docs and the README show still works.

The docs name public objects in ``from … import …`` lines, ``BACKEND`` strings, autodoc
directives and cross-reference roles; each one must import, whatever moves inside the package.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]

_FROM = re.compile(r"from (django_redis_lock[\w.]*) import \(?([\w, ]+)")
_DOTTED = re.compile(
    r"(?:\.\. (?:auto\w+|module|currentmodule)::\s+|:(?:class|func|mod|exc|meth|attr|data):`~?"
    r"|[\"'])(django_redis_lock(?:\.\w+)*)"
)

_NOT_A_PATH = re.compile(r"\.(?:[EW]\d{3}|audit)$")


def documented_paths() -> list[str]:
    found: set[str] = set()
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        for module, names in _FROM.findall(text):
            found.update(f"{module}.{name.strip()}" for name in names.split(",") if name.strip())
        found.update(_DOTTED.findall(text))
    # System check ids ("django_redis_lock.E011") and logger names are no import paths.
    return sorted(p for p in found if not _NOT_A_PATH.search(p))


def resolve(path: str) -> object:
    """Import the longest module prefix of ``path``, then follow the rest as attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(path)


def test_the_docs_name_many_paths() -> None:
    paths = documented_paths()
    assert len(paths) > 40
    assert "django_redis_lock.backends.redis.RedisBackend" in paths
    assert "django_redis_lock.celery.single_instance" in paths


@pytest.mark.parametrize("path", documented_paths())
def test_documented_path__imports(path: str) -> None:
    assert resolve(path) is not None
