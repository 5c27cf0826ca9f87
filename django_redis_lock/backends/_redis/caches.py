"""``OPTIONS["cache"]``: connect where a ``CACHES`` alias connects, so the URL is written once.

The cache must be Django's ``RedisCache`` or django-redis's (``django_redis.cache.RedisCache``,
with its default client). The backend reads the connection of the cache's primary (the one it
writes to): its address, database, credentials and TLS settings, and its pool's size; then it
opens connections of its own with them. It never borrows the cache's pool: it needs its own
socket timeouts (a wait blocks in Redis for up to ``max_wait``) and no automatic retries (a
re-sent acquire could count a hold twice), and a cache may set both otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from ...exceptions import InvalidLockBackendError
from .._options import Problem
from .clients import ClientFamily

__all__ = ["CACHE_BACKENDS", "CacheConnection", "cache_connection", "cache_problems"]

#: The cache backends whose connection a lock backend can use (subclasses of them too).
CACHE_BACKENDS = (
    "django.core.cache.backends.redis.RedisCache",
    "django_redis.cache.RedisCache",
)

#: OPTIONS that say where the server is: the cache says it instead.
_PLACED_BY = ("url", "sentinels", "service_name")

#: What is read from the cache's connection: where the server is, who to be, how to reach it
#: (and ``ssl_*``). Not its timeouts nor retries (see the module's docstring), nor what its
#: library keeps for its own pool.
_READ = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "credential_provider",
        "client_name",
        "protocol",
        "socket_keepalive",
        "socket_keepalive_options",
        "health_check_interval",
        "max_connections",
    }
)


def cache_problems(options: dict[str, Any] | Any, *, where: str) -> list[Problem]:
    """Return what is wrong with ``OPTIONS["cache"]`` (check E017), reading only settings."""
    if "cache" not in options:
        return []
    alias = options["cache"]
    caches = getattr(settings, "CACHES", {})
    found = []
    if not isinstance(alias, str) or alias not in caches:
        found.append(
            _problem(
                f"{where}['cache'] names the cache {alias!r}, which is not an alias of CACHES.",
                f"Name an alias of CACHES ({', '.join(map(repr, caches)) or 'none'}), or give "
                "url instead.",
            )
        )
    elif not _supported(caches[alias]):
        backend = caches[alias].get("BACKEND") if isinstance(caches[alias], dict) else None
        found.append(
            _problem(
                f"{where}['cache'] names CACHES[{alias!r}], whose BACKEND {backend!r} is not a "
                "Redis cache that locks can connect through.",
                f"Name an alias whose BACKEND is {' or '.join(CACHE_BACKENDS)} (or a subclass), "
                "or give url instead.",
            )
        )
    placed = [key for key in _PLACED_BY if key in options]
    if placed:
        found.append(
            _problem(
                f"{where}['cache'] cannot be combined with {', '.join(map(repr, placed))}: the "
                "cache's connection says where the server is.",
                f"Remove {' and '.join(map(repr, placed))}, or 'cache'.",
            )
        )
    return found


def _problem(message: str, hint: str) -> Problem:
    return Problem("django_redis_lock.E017", message, hint)


def _supported(config: object) -> bool:
    path = config.get("BACKEND") if isinstance(config, dict) else None
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # Django's own check (caches.E001) says so
    for known in CACHE_BACKENDS:
        try:
            base = import_string(known)
        except ImportError:
            continue  # django-redis is not installed: its RedisCache is not the one named
        if isinstance(backend, type) and issubclass(backend, base):
            return True
    return False


@dataclass(frozen=True)
class CacheConnection:
    """Where a cache's primary is, as its pool says: keyword arguments, not a URL."""

    alias: str
    #: "tcp", "tls" or "unix": the family's connection class of that kind is used.
    kind: str
    #: The pool's keyword arguments (address, database, credentials, TLS, pool size): never
    #: in ``repr()``, since they hold the password.
    kwargs: dict[str, Any] = field(repr=False)

    @property
    def url(self) -> str:
        """Return the primary's address as a URL, without its credentials (for messages)."""
        db = self.kwargs.get("db", 0)
        if self.kind == "unix":
            return f"unix://{self.kwargs.get('path', '')}?db={db}"
        scheme = "rediss" if self.kind == "tls" else "redis"
        host, port = self.kwargs.get("host", "localhost"), self.kwargs.get("port", 6379)
        return f"{scheme}://{host}:{port}/{db}"

    def options(self, family: ClientFamily, *, asyncio: bool = False) -> dict[str, Any]:
        """Return the pool keywords of the cache's connection that ``family`` takes."""
        known = family.async_connection_options if asyncio else family.connection_options
        return {
            key: value
            for key, value in self.kwargs.items()
            if (key in _READ or key.startswith("ssl_")) and key in known | {"host", "port", "path"}
        }

    def pool(self, family: ClientFamily, options: dict[str, Any], *, asyncio: bool) -> Any:
        """Return a pool of ``family`` to the cache's primary, ``options`` added (they win)."""
        pool_class = family.async_pool if asyncio else family.pool
        kinds = family.async_connections if asyncio else family.connections
        return pool_class(
            connection_class=kinds[self.kind],
            **{**self.options(family, asyncio=asyncio), **options},
        )


def cache_connection(alias: str) -> CacheConnection:
    """Return the connection of the primary of ``CACHES[alias]`` (no server is contacted)."""
    from django.core.cache import caches

    cache: Any = caches[alias]
    try:
        if hasattr(cache, "_cache"):  # Django's RedisCache: its RedisCacheClient
            client = cache._cache.get_client(None, write=True)
        else:  # django-redis: its DefaultClient (or a subclass, such as HerdClient)
            client = cache.client.get_client(write=True)
        pool = client.connection_pool
        connection_class, kwargs = pool.connection_class, dict(pool.connection_kwargs)
    except (AttributeError, TypeError):
        raise InvalidLockBackendError(
            f"CACHES[{alias!r}] has a client that gives no connection pool of one server "
            "(a sharded client?): give LOCKS its own url."
        ) from None
    kind = _kind(connection_class)
    if kind is None:
        raise InvalidLockBackendError(
            f"CACHES[{alias!r}] connects through {connection_class.__name__}, which locks cannot "
            "reuse (Sentinel?): give LOCKS its own url, or sentinels and service_name."
        )
    if getattr(pool, "max_connections", None) not in (None, 2**31):  # 2**31: no limit
        kwargs["max_connections"] = pool.max_connections
    return CacheConnection(alias, kind, kwargs)


def _kind(connection_class: type) -> str | None:
    # By the class's name: the cache's library may not be the backend's. A subclass (Sentinel's
    # managed connection, say) finds its server in a way of its own, which is not reused.
    return _KINDS.get(connection_class.__name__)


_KINDS = {"Connection": "tcp", "SSLConnection": "tls", "UnixDomainSocketConnection": "unix"}
