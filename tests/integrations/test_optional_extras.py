"""A project that lacks an optional package: hosts import our modules cleanly, users get told.

Each case runs in a fresh interpreter where the named packages cannot be imported, as in a
project that never installed them (``.ci/run``'s ``celery_only`` step does the same with a
real venv holding only ``.[celery]``). Two promises:

- every module a host framework imports by convention (Celery's ``autodiscover_tasks()``
  imports ``<app>.tasks``; Django imports ``<app>.models``, ``<app>.admin``, ...) imports
  without any optional package and does no work;
- importing an integration whose extra is missing raises an :class:`ImportError` that names
  the extra to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Every optional package of the extras (and Django 6's own ``django.tasks``).
OPTIONAL = [
    "celery",
    "kombu",
    "django_tasks",
    "django.tasks",
    "health_check",
    "prometheus_client",
    "valkey",
    "django_redis",
]

#: ``None`` in ``sys.modules`` is Python's own "not installed": imports of the name fail with
#: ModuleNotFoundError and ``importlib.util.find_spec`` finds nothing, as in a project without it.
_PRELUDE = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
        "django.contrib.sessions", "django.contrib.messages", "django_redis_lock",
    ],
    DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}},
)
django.setup()
"""


def run(blocked: list[str], code: str) -> dict[str, object]:
    """Run ``code`` with ``blocked`` uninstalled; it prints one JSON object, returned here."""
    script = _PRELUDE.format(blocked=blocked) + textwrap.dedent(code)
    # Not helpers.python_without_settings: Celery's Django fixup, which autodiscovery needs,
    # turns on only when DJANGO_SETTINGS_MODULE is in the environment.
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    "module",
    [
        "django_redis_lock.tasks",  # Celery's autodiscover_tasks()
        "django_redis_lock.models",
        "django_redis_lock.admin",
        "django_redis_lock.signals",
        "django_redis_lock.checks",
        "django_redis_lock.apps",
        "django_redis_lock.management.commands.locks",
    ],
)
def test_conventional_module__imports_without_any_optional_package(module: str) -> None:
    result = run(
        OPTIONAL,
        f"""
        import importlib
        before = set(sys.modules)
        importlib.import_module({module!r})
        new = sorted(set(sys.modules) - before)
        print(json.dumps({{"new": new}}))
        """,
    )
    new = result["new"]
    assert isinstance(new, list)
    # Nothing of an integration is loaded: importing the module did no integration's work.
    loaded = [
        m for m in new if m.startswith(("django_redis_lock.tasks.", "django_redis_lock.celery"))
    ]
    assert loaded == []


def test_celery_autodiscovery__finds_nothing_to_fail_on_without_django_tasks() -> None:
    # The docs' wiring on a project with only the celery extra: the worker imports every app's
    # tasks module, ours included, before it starts.
    result = run(
        ["django_tasks", "django.tasks"],
        """
        from celery import Celery
        app = Celery("proj")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        app.autodiscover_tasks()
        app.loader.import_default_modules()
        print(json.dumps({"ok": "django_redis_lock.tasks" in sys.modules}))
        """,
    )
    assert result == {"ok": True}


@pytest.mark.parametrize(
    ("statement", "blocked", "extra"),
    [
        (
            "from django_redis_lock.tasks import single_instance",
            ["django_tasks", "django.tasks"],
            "tasks",
        ),
        ("import django_redis_lock.celery", ["celery"], "celery"),
        ("from django_redis_lock.celery import single_instance", ["celery"], "celery"),
        ("import django_redis_lock.celery.beat", ["celery"], "celery"),
        ("import django_redis_lock.contrib.prometheus", ["prometheus_client"], "prometheus"),
        ("import django_redis_lock.contrib.health_check", ["health_check"], "health-check"),
    ],
)
def test_integration__without_its_extra_names_the_extra_to_install(
    statement: str, blocked: list[str], extra: str
) -> None:
    result = run(
        blocked,
        f"""
        try:
            {statement}
        except ImportError as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))
        else:
            print(json.dumps({{"error": None}}))
        """,
    )
    assert result["error"] == "ImportError"
    assert f'pip install "django-redis-lock[{extra}]"' in str(result["message"])


def test_tasks__with_its_framework_installed_the_decorator_loads_on_first_use() -> None:
    result = run(
        [],
        """
        import django_redis_lock.tasks as tasks
        lazy = "django_redis_lock.tasks.decorator" not in sys.modules
        from django_redis_lock.tasks import single_instance
        print(json.dumps({"lazy": lazy, "name": single_instance.__module__}))
        """,
    )
    assert result == {"lazy": True, "name": "django_redis_lock.tasks.decorator"}


def test_valkey_client__without_valkey_installed_the_setting_is_named_with_the_extra() -> None:
    result = run(
        ["valkey"],
        """
        from django.core.checks import run_checks
        from django.test import override_settings
        from django_redis_lock import InvalidLockBackendError, locks
        with override_settings(LOCKS={"default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": "valkey://127.0.0.1:1/0"},
        }, "told": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"client": "valkey"},
        }}):
            checks = [[m.id, m.msg, m.hint] for m in run_checks() if "redis_lock" in m.id]
            try:
                locks["told"]
            except InvalidLockBackendError as exc:
                error = str(exc)
        print(json.dumps({"checks": checks, "error": error}))
        """,
    )
    hint = 'Install it: pip install "django-redis-lock[valkey]".'
    assert result == {
        "checks": [
            [
                "django_redis_lock.E016",
                "LOCKS['default']['OPTIONS'] has a valkey:// URL, but the valkey package is not "
                "installed.",
                hint,
            ],
            [
                "django_redis_lock.E016",
                "LOCKS['told']['OPTIONS']['client'] is 'valkey', but the valkey package is not "
                "installed.",
                hint,
            ],
        ],
        "error": "LOCKS['told']['OPTIONS']['client'] is 'valkey', but the valkey package is not "
        f"installed. {hint}",
    }
