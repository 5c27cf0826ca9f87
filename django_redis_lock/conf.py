"""The ``LOCKS`` setting: read lazily, its shape checked, cleared when settings change.

What an alias's OPTIONS may hold is for its backend to say (see
:meth:`~django_redis_lock.backends.base.BaseLockBackend.option_problems`): this module knows
no rule of any one backend, and imports no client library.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .backends.base import BaseLockBackend, Problem

__all__ = [
    "DEFAULT_ALIAS",
    "DEFAULT_LOCKS",
    "Problem",
    "alias_problems",
    "get_locks_setting",
    "problems",
]

DEFAULT_ALIAS = "default"

DEFAULT_LOCKS: dict[str, dict[str, Any]] = {
    DEFAULT_ALIAS: {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": "redis://127.0.0.1:6379/0"},
    }
}


@cache
def get_locks_setting() -> Any:
    """Return ``settings.LOCKS``, or the default when it is not set."""
    return getattr(settings, "LOCKS", DEFAULT_LOCKS)


def problems(setting: Any) -> list[Problem]:
    """Return everything wrong with a ``LOCKS`` value, without contacting any server."""
    if not isinstance(setting, dict):
        return [
            Problem(
                "django_redis_lock.E001",
                f"LOCKS must be a dict of aliases, got {type(setting).__name__}.",
                'Set LOCKS = {"default": {"BACKEND": "django_redis_lock.backends.redis.'
                'RedisBackend", "OPTIONS": {"url": "redis://..."}}}.',
            )
        ]
    found: list[Problem] = []
    if DEFAULT_ALIAS not in setting:
        found.append(
            Problem(
                "django_redis_lock.E002",
                "LOCKS has no 'default' alias.",
                "Add a 'default' entry: lock() uses it when no alias is given.",
            )
        )
    for alias, config in setting.items():
        found.extend(alias_problems(alias, config))
    return found


def alias_problems(alias: object, config: Any) -> list[Problem]:
    """Return everything wrong with one entry ``LOCKS[alias]``."""
    where = f"LOCKS[{alias!r}]"
    if not isinstance(config, dict) or not isinstance(config.get("BACKEND"), str):
        return [
            Problem(
                "django_redis_lock.E003",
                f"{where} must be a dict with a 'BACKEND' import string.",
                'Use {"BACKEND": "django_redis_lock.backends.redis.RedisBackend"}.',
            )
        ]
    path = config["BACKEND"]
    try:
        backend = import_string(path)
    except ImportError as exc:
        return [
            Problem(
                "django_redis_lock.E004",
                f"{where}['BACKEND'] {path!r} could not be imported: {exc}.",
                "Check the dotted path; the built-in backends are django_redis_lock.backends."
                "redis.RedisBackend, django_redis_lock.backends.cluster.RedisClusterBackend, "
                "django_redis_lock.backends.redlock.RedlockBackend and "
                "django_redis_lock.backends.locmem.LocMemBackend.",
            )
        ]
    if not (isinstance(backend, type) and issubclass(backend, BaseLockBackend)):
        return [
            Problem(
                "django_redis_lock.E005",
                f"{where}['BACKEND'] {path!r} is not a lock backend.",
                "A backend must subclass django_redis_lock.backends.base.BaseLockBackend.",
            )
        ]
    options = config.get("OPTIONS", {})
    if not isinstance(options, dict):
        return [
            Problem(
                "django_redis_lock.E006",
                f"{where}['OPTIONS'] must be a dict, got {type(options).__name__}.",
                "OPTIONS holds the keyword arguments of the backend's constructor.",
            )
        ]
    # The rules of OPTIONS are the backend's own: the ones its constructor applies too.
    return backend.check_options(options, where=f"{where}['OPTIONS']")
