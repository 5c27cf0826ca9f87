"""The three lock libraries under test, behind one small interface; django-redis-lock's others.

Each library gets its own lock names (so its own keys) on the one throw-away server, and is
used with its defaults: redis-py's ``Lock`` polls every 0.1 s while it waits, python-redis-lock
waits on a signal list with ``BLPOP``, django-redis-lock is handed the lock by the release.

django-redis-lock's other locks, measured beside its ``lock``, are :data:`FORMS`: the two
sides of an ``rwlock`` and ``lock_all`` over 2 and 3 names, each on lock names of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import redis

#: Every key django-redis-lock writes here starts with this prefix.
KEY_PREFIX = "bench"
#: The alias of the backend the listing benchmark holds its locks on: a database of its own
#: (:data:`LISTING_DB`), so they are counted and flushed apart from everything else.
LISTING_ALIAS = "listing"
LISTING_DB = 1
#: The lease every library takes, in seconds: long enough never to end during a run.
LEASE = 30
#: The longest a blocking acquire waits (python-redis-lock refuses a wait longer than its lease).
WAIT_LIMIT = 30


class Handle(NamedTuple):
    """A lock of one library: a blocking ``acquire()`` returning whether it got the lock."""

    acquire: Callable[[], bool]
    release: Callable[[], object]


def database_url(url: str, db: int) -> str:
    """Return ``url`` (``redis://host:port/n``) pointing at database ``db`` instead."""
    return f"{url.rsplit('/', 1)[0]}/{db}"


def configure_django(url: str) -> None:
    """Configure Django in this process: django-redis-lock on ``url``, and the listing alias."""
    import django
    from django.conf import settings

    backend = "django_redis_lock.backends.redis.RedisBackend"
    settings.configure(
        INSTALLED_APPS=["django_redis_lock"],
        LOCKS={
            "default": {"BACKEND": backend, "OPTIONS": {"url": url, "key_prefix": KEY_PREFIX}},
            LISTING_ALIAS: {
                "BACKEND": backend,
                "OPTIONS": {"url": database_url(url, LISTING_DB), "key_prefix": KEY_PREFIX},
            },
        },
    )
    django.setup()


class Cycled(Protocol):
    """A django-redis-lock object as user code makes it: ``acquire()`` and ``release()``."""

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


def _leased(options: dict[str, Any]) -> dict[str, Any]:
    """Return django-redis-lock's ``options`` with the benchmark's lease, unless they set one."""
    return {"ttl": LEASE, **options}


def _waiting(
    make: Callable[..., Cycled], client: redis.Redis[bytes], name: str, **options: Any
) -> Handle:
    """Return ``make(name, **options)`` as a :class:`Handle` waiting at most :data:`WAIT_LIMIT`."""
    handle = make(name, **options)
    return Handle(functools.partial(handle.acquire, timeout=WAIT_LIMIT), handle.release)


def _lock(name: str, **options: Any) -> Cycled:
    from django_redis_lock import lock

    return lock(name, **_leased(options))


def _read_side(name: str, **options: Any) -> Cycled:
    from django_redis_lock import rwlock

    return rwlock(name, **_leased(options)).read()


def _write_side(name: str, **options: Any) -> Cycled:
    from django_redis_lock import rwlock

    return rwlock(name, **_leased(options)).write()


def _all_of(count: int, name: str, **options: Any) -> Cycled:
    """Return ``lock_all`` over ``count`` names: ``name:0``, ``name:1``, ..."""
    from django_redis_lock import lock_all

    return lock_all([f"{name}:{index}" for index in range(count)], **_leased(options))


def _redis_py(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    handle = client.lock(name, timeout=LEASE)  # sleep=0.1, its default
    return Handle(functools.partial(handle.acquire, blocking_timeout=WAIT_LIMIT), handle.release)


def _python_redis_lock(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    import redis_lock

    handle = redis_lock.Lock(client, name, expire=LEASE)
    return Handle(functools.partial(handle.acquire, timeout=WAIT_LIMIT), handle.release)


@dataclass(frozen=True)
class Library:
    """One library: how to make its locks, and where its keys are.

    ``prefix`` keeps its lock names apart from the others' (django-redis-lock needs none: its
    keys start with :data:`KEY_PREFIX`); ``keyspace`` are the SCAN patterns that match every
    key the library writes here, whatever each key is for (django-redis-lock's layout is its
    own business: the benchmark only counts its keys, their memory and their expiry).
    """

    key: str
    label: str
    make: Callable[..., Handle]
    prefix: str
    keyspace: tuple[str, ...]

    def name(self, name: str) -> str:
        """Return the lock name this library is given for the benchmark's lock ``name``."""
        return f"{self.prefix}{name}"

    def handle(self, client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
        """Return a lock on the benchmark's lock ``name`` (``options``: django-redis-lock's)."""
        return self.make(client, self.name(name), **options)


DJANGO_REDIS_LOCK = Library(
    "django_redis_lock",
    "django-redis-lock",
    functools.partial(_waiting, _lock),
    prefix="",
    keyspace=(f"{KEY_PREFIX}:*",),
)
REDIS_PY = Library(
    "redis_py", "redis-py Lock", _redis_py, prefix="redis-py:", keyspace=("redis-py:*",)
)
PYTHON_REDIS_LOCK = Library(
    "python_redis_lock",
    "python-redis-lock",
    _python_redis_lock,
    prefix="python-redis-lock:",
    # Its keys are "lock:<name>" and "lock-signal:<name>" (expiring a second after release).
    keyspace=("lock:python-redis-lock:*", "lock-signal:python-redis-lock:*"),
)
LIBRARIES: dict[str, Library] = {
    library.key: library for library in (DJANGO_REDIS_LOCK, REDIS_PY, PYTHON_REDIS_LOCK)
}


@dataclass(frozen=True)
class Form:
    """One of django-redis-lock's other locks, as user code makes it.

    ``make(name, **options)`` returns the object (with the benchmark's lease, unless
    ``options`` give a ``ttl``) for the lock name :meth:`name` gives; :attr:`library` is the
    same lock behind the :class:`Library` interface, for the benchmarks that take one. Its
    names start with its key, so its keys are its own (under django-redis-lock's prefix).
    """

    key: str
    label: str
    make: Callable[..., Cycled]

    @property
    def library(self) -> Library:
        """Return this lock as a :class:`Library`: blocking acquires wait :data:`WAIT_LIMIT`."""
        return Library(
            self.key,
            self.label,
            functools.partial(_waiting, self.make),
            prefix=f"{self.key}:",
            keyspace=DJANGO_REDIS_LOCK.keyspace,
        )

    def name(self, name: str) -> str:
        """Return the lock name this lock is given for the benchmark's lock ``name``."""
        return self.library.name(name)


READ = Form("rwlock_read", "rwlock read", _read_side)
WRITE = Form("rwlock_write", "rwlock write", _write_side)
FORMS: dict[str, Form] = {
    form.key: form
    for form in (
        READ,
        WRITE,
        Form("lock_all_2", "lock_all, 2 names", functools.partial(_all_of, 2)),
        Form("lock_all_3", "lock_all, 3 names", functools.partial(_all_of, 3)),
    )
}


def _no_lock(client: redis.Redis[bytes], name: str, **options: Any) -> Handle:
    return Handle(lambda: True, lambda: None)


#: No lock at all: acquire and release do nothing, so a loop around them measures the rest.
NO_LOCK = Library("no_lock", "no lock (floor)", _no_lock, prefix="no-lock:", keyspace=())


def library(key: str) -> Library:
    """Return the library, django-redis-lock's other lock (as a library) or no lock of ``key``."""
    if key == NO_LOCK.key:
        return NO_LOCK
    return LIBRARIES[key] if key in LIBRARIES else FORMS[key].library
