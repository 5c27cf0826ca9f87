"""The ``LOCKS`` setting: read lazily, its shape checked, cleared when settings change.

What an alias's OPTIONS may hold is for its backend to say (see
:meth:`~django_redis_lock.backends.base.BaseLockBackend.option_problems`): this module knows
no rule of any one backend, and imports no client library.
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .backends.base import BaseLockBackend, Problem

__all__ = [
    "ALIAS_KEYS",
    "DEFAULT_ALIAS",
    "DEFAULT_LOCKS",
    "Problem",
    "alias_problems",
    "get_locks_setting",
    "problems",
]

DEFAULT_ALIAS = "default"

#: The keys of one alias of ``LOCKS``, as in Django's ``STORAGES``.
ALIAS_KEYS = frozenset({"BACKEND", "OPTIONS"})

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
    found = []
    unknown = sorted(map(repr, set(config) - ALIAS_KEYS))
    if unknown:
        # A misspelt OPTIONS would be ignored, and the locks would go to the default server.
        guesses = [difflib.get_close_matches(str(key).upper(), ALIAS_KEYS, n=1) for key in config]
        meant = sorted({guess[0] for guess in guesses if guess} - set(config))
        found.append(
            Problem(
                "django_redis_lock.E015",
                f"{where} has unknown keys: {', '.join(unknown)}.",
                "An alias takes 'BACKEND' and 'OPTIONS' only"
                + (f" (did you mean {' or '.join(map(repr, meant))}?)." if meant else "."),
            )
        )
    path = config["BACKEND"]
    try:
        backend = import_string(path)
    except ImportError as exc:
        return [
            *found,
            Problem(
                "django_redis_lock.E004",
                f"{where}['BACKEND'] {path!r} could not be imported: {exc}.",
                "Check the dotted path; the built-in backends are django_redis_lock.backends."
                "redis.RedisBackend, django_redis_lock.backends.cluster.RedisClusterBackend, "
                "django_redis_lock.backends.redlock.RedlockBackend and "
                "django_redis_lock.backends.locmem.LocMemBackend.",
            ),
        ]
    if not (isinstance(backend, type) and issubclass(backend, BaseLockBackend)):
        return [
            *found,
            Problem(
                "django_redis_lock.E005",
                f"{where}['BACKEND'] {path!r} is not a lock backend.",
                "A backend must subclass django_redis_lock.backends.base.BaseLockBackend.",
            ),
        ]
    options = config.get("OPTIONS", {})
    if not isinstance(options, dict):
        return [
            *found,
            Problem(
                "django_redis_lock.E006",
                f"{where}['OPTIONS'] must be a dict, got {type(options).__name__}.",
                "OPTIONS holds the keyword arguments of the backend's constructor.",
            ),
        ]
    # The rules of OPTIONS are the backend's own: the ones its constructor applies too.
    return [*found, *backend.check_options(options, where=f"{where}['OPTIONS']")]
