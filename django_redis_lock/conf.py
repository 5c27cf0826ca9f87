"""The ``LOCKS`` setting: read lazily, validated once, cleared when settings change."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from ._validation import validate_ttl
from .backends._redis_options import redact_url, url_problem, url_scheme
from .backends.base import BaseLockBackend
from .exceptions import InvalidLockArgumentError

__all__ = ["DEFAULT_ALIAS", "DEFAULT_LOCKS", "Problem", "get_locks_setting", "problems"]

DEFAULT_ALIAS = "default"

DEFAULT_LOCKS: dict[str, dict[str, Any]] = {
    DEFAULT_ALIAS: {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": "redis://127.0.0.1:6379/0"},
    }
}

#: OPTIONS that are durations in seconds, checked as a ``ttl`` argument is.
DURATION_OPTIONS = (
    "ttl",
    "fencing_ttl",
    "socket_timeout",
    "socket_connect_timeout",
    "wait_replicas_timeout",
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with ``LOCKS``: a check id, a message naming the setting, a hint."""

    id: str
    msg: str
    hint: str


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
    return option_problems(where, backend, options)


def option_problems(
    where: str, backend: type[BaseLockBackend], options: dict[str, Any]
) -> list[Problem]:
    """Return everything wrong with the OPTIONS of one alias."""
    found: list[Problem] = []
    unknown = sorted(set(options) - backend.options - backend.connection_options)
    if unknown:
        passthrough = (
            ", and redis-py connection keywords such as password, ssl_ca_certs or max_connections"
            if backend.connection_options
            else ""
        )
        found.append(
            Problem(
                "django_redis_lock.E007",
                f"{where}['OPTIONS'] has unknown keys for {backend.__name__}: "
                f"{', '.join(map(repr, unknown))}.",
                f"{backend.__name__} accepts: {', '.join(sorted(backend.options))}{passthrough}.",
            )
        )
    schemes: frozenset[str] = getattr(backend, "url_schemes", frozenset())
    listed = options.get("urls", [])
    urls = ([options["url"]] if "url" in options else []) + (
        list(listed) if isinstance(listed, (list, tuple)) else []
    )
    for url in urls if schemes else []:
        if url_scheme(url) not in schemes:
            found.append(
                Problem(
                    "django_redis_lock.E008",
                    f"{where}['OPTIONS'] has a URL with an unsupported scheme: {_redact(url)!r}.",
                    f"Use one of: {', '.join(s + '://' for s in sorted(schemes))}.",
                )
            )
            continue
        problem = url_problem(url)
        if problem:
            found.append(
                Problem(
                    "django_redis_lock.E008",
                    f"{where}['OPTIONS'] has a URL that {problem.message}.",
                    problem.hint,
                )
            )
    tls = sorted(name for name in options if name.startswith("ssl_"))
    plain = [url for url in urls if isinstance(url, str) and url_scheme(url) != "rediss"]
    if tls and plain:
        found.append(
            Problem(
                "django_redis_lock.E012",
                f"{where}['OPTIONS'] sets TLS options ({', '.join(map(repr, tls))}) but its "
                "url does not start with rediss://.",
                "Use a rediss:// URL to connect with TLS, or remove the ssl_* options.",
            )
        )
    for option in DURATION_OPTIONS:
        if option not in options:
            continue
        try:
            validate_ttl(options[option], argument=f"{where}['OPTIONS'][{option!r}]")
        except InvalidLockArgumentError as exc:
            found.append(
                Problem(
                    "django_redis_lock.E009",
                    str(exc),
                    "Durations are seconds; floats give millisecond precision (0.5 is 500 ms).",
                )
            )
    found.extend(
        Problem(
            "django_redis_lock.E014",
            f"{where}['OPTIONS']: {problem}",
            f"See the OPTIONS of {backend.__name__} in the deployment documentation.",
        )
        for problem in backend.option_problems(options)
    )
    prefix = options.get("key_prefix", "lock")
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        found.append(
            Problem(
                "django_redis_lock.E010",
                f"{where}['OPTIONS']['key_prefix'] must be a non-empty string without braces, "
                f"got {prefix!r}.",
                "Every key of a lock starts with the prefix; braces would break the Redis "
                "Cluster hash tag. The default is 'lock'.",
            )
        )
    return found


def _redact(url: object) -> str:
    return redact_url(url if isinstance(url, str) else repr(url))
