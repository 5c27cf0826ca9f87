"""The three lock libraries under test, behind one small interface.

Each library gets its own lock names (so its own keys) on the one throw-away server, and is
used with its defaults: redis-py's ``Lock`` polls every 0.1 s while it waits, python-redis-lock
waits on a signal list with ``BLPOP``, django-redis-lock is handed the lock by the release.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis

#: Every key django-redis-lock writes here starts with this prefix.
KEY_PREFIX = "bench"
#: The lease every library takes, in seconds: long enough never to end during a run.
LEASE = 30
#: The longest a blocking acquire waits (python-redis-lock refuses a wait longer than its lease).
WAIT_LIMIT = 30


class Handle(NamedTuple):
    """A lock of one library: a blocking ``acquire()`` returning whether it got the lock."""

    acquire: Callable[[], bool]
    release: Callable[[], object]


def configure_django(url: str) -> None:
    """Configure Django in this process, with one django-redis-lock backend on ``url``."""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_redis_lock"],
        LOCKS={
            "default": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"url": url, "key_prefix": KEY_PREFIX},
            }
        },
    )
    django.setup()


def _django_redis_lock(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    from django_redis_lock import lock

    handle = lock(name, **{"ttl": LEASE, **options})
    return Handle(functools.partial(handle.acquire, timeout=WAIT_LIMIT), handle.release)


def _redis_py(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    handle = client.lock(name, timeout=LEASE)  # sleep=0.1, its default
    return Handle(functools.partial(handle.acquire, blocking_timeout=WAIT_LIMIT), handle.release)


def _python_redis_lock(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    import redis_lock

    handle = redis_lock.Lock(client, name, expire=LEASE)
    return Handle(functools.partial(handle.acquire, timeout=WAIT_LIMIT), handle.release)


def _django_kind(key: str) -> str:
    # bench:{name}:h -> "h"; the wake-up lists bench:{name}:s:<owner> -> "s".
    return key.rpartition("}:")[2].split(":", 1)[0]


@dataclass(frozen=True)
class Library:
    """One library: how to make its locks, and where and what its keys are.

    ``prefix`` keeps its lock names apart from the others' (django-redis-lock needs none: its
    keys start with :data:`KEY_PREFIX`); ``patterns`` are the SCAN patterns of every key the
    locks ``name*`` may leave; ``kind`` names what a key is for; ``by_design`` are the kinds
    meant to outlive a released lock (with an expiry).
    """

    key: str
    label: str
    make: Callable[..., Handle]
    prefix: str
    patterns: Callable[[str], tuple[str, ...]]
    kind: Callable[[str], str]
    by_design: frozenset[str] = frozenset()

    def name(self, name: str) -> str:
        """Return the lock name this library is given for the benchmark's lock ``name``."""
        return f"{self.prefix}{name}"

    def handle(self, client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
        """Return a lock on the benchmark's lock ``name`` (``options``: django-redis-lock's)."""
        return self.make(client, self.name(name), **options)


DJANGO_REDIS_LOCK = Library(
    "django_redis_lock",
    "django-redis-lock",
    _django_redis_lock,
    prefix="",
    patterns=lambda name: (f"{KEY_PREFIX}:{{={name}*",),
    kind=_django_kind,
    by_design=frozenset({"f"}),
)
REDIS_PY = Library(
    "redis_py",
    "redis-py Lock",
    _redis_py,
    prefix="redis-py:",
    patterns=lambda name: (f"redis-py:{name}*",),
    kind=lambda key: "lock",
)
PYTHON_REDIS_LOCK = Library(
    "python_redis_lock",
    "python-redis-lock",
    _python_redis_lock,
    prefix="python-redis-lock:",
    # Its keys are "lock:<name>" and "lock-signal:<name>" (expiring a second after release).
    patterns=lambda name: (
        f"lock:python-redis-lock:{name}*",
        f"lock-signal:python-redis-lock:{name}*",
    ),
    kind=lambda key: "signal" if key.startswith("lock-signal:") else "lock",
    by_design=frozenset({"signal"}),
)
LIBRARIES: dict[str, Library] = {
    library.key: library for library in (DJANGO_REDIS_LOCK, REDIS_PY, PYTHON_REDIS_LOCK)
}
