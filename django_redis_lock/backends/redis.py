"""Locks on one Redis server: standalone, the primary a URL points at, or the one Sentinel names.

Every primitive is one Lua script run with ``EVALSHA`` (loaded again on ``NOSCRIPT``), so each
is atomic and costs one round trip. See ``_redis/lua/`` for the key layout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import redis
import redis.asyncio

from ..exceptions import InvalidLockBackendError
from ._redis.caches import cache_connection, cache_problems
from ._redis.clients import (
    async_client,
    client_family,
    close_async_client,
    close_client,
    family_name,
    family_problems,
    sync_client,
)
from ._redis.connections import (
    CONNECTION_OPTIONS,
    CONNECTION_OPTIONS_DESCRIBED,
    REFUSED_CONNECTION_OPTIONS,
    URL_SCHEMES,
    SentinelAddress,
    redact_url,
    secret_safe,
    sentinel_problems,
    url_problems,
)
from ._redis.loops import PerLoop
from ._redis.protocol import (
    acquire_all_args,
    acquire_args,
    acquired,
    acquired_all,
    count,
    extend_args,
    ms,
    release_args,
    seconds,
)
from ._redis.replicas import replica_problems, replicated, unreplicated
from ._redis.scripts import Scripts
from ._redis.waits import ClaimOnWake
from ._redis.windows import RedisRateLimits
from .base import (
    AcquireAllResult,
    AcquireRequest,
    AcquireResult,
    BaseLockBackend,
    Grant,
    Problem,
    ReleaseRequest,
)

__all__ = ["RedisBackend", "redact_url"]

logger = logging.getLogger("django_redis_lock")


#: What an acquire hands back: a result, or a grant to a waiter.
_Won = TypeVar("_Won", AcquireResult, Grant)


class RedisBackend(ClaimOnWake, RedisRateLimits):
    """Locks stored on one Redis server.

    OPTIONS: ``url`` (``redis://``, ``rediss://``, ``unix://``, ``valkey://`` or
    ``valkeys://``), or ``cache`` (a ``CACHES`` alias whose connection to use), ``client``
    (``"redis"``, the default, or ``"valkey"``: the client library), ``key_prefix``, ``ttl``
    (default lease), ``max_hold`` (default bound on renewal), ``fencing_ttl`` (0, the
    default: fencing tokens come from the server's clock and nothing is kept after a release;
    more: a durable counter per name, kept that long after its last lease), ``socket_timeout``
    and ``socket_connect_timeout`` (seconds; every call fails within them when Redis is
    unreachable), and any keyword argument of redis-py's connection pool (``password``,
    ``ssl_ca_certs``, ``max_connections``, ...).
    """

    options: ClassVar[frozenset[str]] = BaseLockBackend.options | {
        "url",
        "cache",
        "client",
        "fencing_ttl",
        "socket_timeout",
        "socket_connect_timeout",
        "sentinels",
        "service_name",
        "wait_replicas",
        "wait_replicas_timeout",
    }
    connection_options: ClassVar[frozenset[str]] = CONNECTION_OPTIONS
    connection_options_described: ClassVar[str] = CONNECTION_OPTIONS_DESCRIBED
    refused_options: ClassVar[Mapping[str, str]] = REFUSED_CONNECTION_OPTIONS
    duration_options: ClassVar[frozenset[str]] = BaseLockBackend.duration_options | {
        "fencing_ttl",
        "socket_timeout",
        "socket_connect_timeout",
        "wait_replicas_timeout",
    }
    switch_duration_options: ClassVar[frozenset[str]] = frozenset({"fencing_ttl"})
    #: The schemes ``url`` may have.
    url_schemes: ClassVar[frozenset[str]] = URL_SCHEMES

    def __init__(
        self,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        key_prefix: str = "lock",
        ttl: float = 30.0,
        max_hold: float | None = None,
        fencing_ttl: float = 0.0,
        socket_timeout: float = 5.0,
        socket_connect_timeout: float = 5.0,
        sentinels: Sequence[SentinelAddress] | None = None,
        service_name: str | None = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
        cache: str | None = None,
        client: str | None = None,
        **connection_options: Any,
    ) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl, max_hold=max_hold)
        #: The client library: its classes build the clients, its exceptions are caught.
        self.family = client_family(family_name(client, [] if cache else [url]))
        #: The CACHES alias whose connection is used, if any (then ``url`` only shows it).
        self.cache = cache
        self._cache = cache_connection(cache) if cache is not None else None
        if self._cache is not None:
            url = self._cache.url
        self.sentinels, self.service_name = sentinels, service_name
        self.wait_replicas = wait_replicas
        self.wait_replicas_timeout = float(wait_replicas_timeout)
        self._wait_args = (wait_replicas, ms(self.wait_replicas_timeout))  # WAIT's arguments
        self.url = url
        self.fencing_ttl = float(fencing_ttl)
        # Encoded once, sent often; 0: no durable fencing counter.
        self._fencing_arg = str(round(self.fencing_ttl * 1000)).encode()
        timeout = float(socket_timeout)
        # A blocking wait must end before the socket timeout would cut it off.
        self.max_wait = max(0.01, min(5.0, timeout - min(0.5, timeout / 4)))
        timeouts = {
            "socket_timeout": timeout,
            "socket_connect_timeout": float(socket_connect_timeout),
        }
        # The asyncio client takes the same options, less the few only the sync one knows.
        async_options = self.family.async_connection_options
        self._async_options = {
            **timeouts,
            **{k: v for k, v in connection_options.items() if k in async_options},
            # No automatic retry: a script re-sent after a lost reply could count a hold twice.
            "retry": self.family.async_no_retry(),
        }
        connection_options.setdefault("retry", self.family.no_retry())
        try:
            # Typed as redis-py's client: valkey-py's has the same API.
            self.client: redis.Redis = self._connect(url, {**timeouts, **connection_options})
        except ValueError as exc:
            raise InvalidLockBackendError(
                f"url {redact_url(url)!r} could not be used: {secret_safe(url, exc)}"
            ) from None
        self._async_clients = PerLoop(self._new_async_client, close_async_client)
        self._scripts = Scripts(self.family.no_script_error)

    @classmethod
    def option_problems(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        found = super().option_problems(options, where=where)
        urls = [options["url"]] if "url" in options else []
        found += url_problems(urls, cls.url_schemes, options, where=where)
        found += family_problems(options.get("client"), urls, list(options), where=where)
        found += cache_problems(options, where=where)
        problems = sentinel_problems(options.get("sentinels"), options.get("service_name"))
        problems += replica_problems(options.get("wait_replicas", 0))
        return found + [cls.own_problem(where, problem) for problem in problems]

    def _connect(self, url: str, options: dict[str, Any]) -> Any:
        """Return the blocking client of ``url``, of Sentinel's primary, or of the cache's."""
        if self._cache is not None:
            pool = self._cache.pool(self.family, options, asyncio=False)
            return self.family.client(connection_pool=pool)
        return sync_client(self.family, url, self.sentinels, self.service_name, options)

    def _new_async_client(self) -> redis.asyncio.Redis:
        # Typed as redis-py's client: valkey-py's has the same API.
        client: redis.asyncio.Redis
        if self._cache is not None:
            pool = self._cache.pool(self.family, self._async_options, asyncio=True)
            client = self.family.async_client.from_pool(pool)
        else:
            where = (self.url, self.sentinels, self.service_name)
            client = async_client(self.family, *where, self._async_options)
        return client

    @property
    def location(self) -> str:
        """Return where the locks are: the URL (password redacted), or the Sentinel service.

        With ``cache``, the URL is the address of the cache's primary, with no credentials.
        """
        if self.sentinels:
            return f"Sentinel service {self.service_name!r}"
        if self.cache is not None:
            return f"{self.url} (the connection of CACHES[{self.cache!r}])"
        return redact_url(self.url)

    def _subject(self) -> str:
        # What an error message says is unavailable.
        if self.sentinels:
            return f"The Redis primary {self.service_name!r} (found by Sentinel)"
        return f"Redis at {self.location}" + (f" ({self.origin})" if self.origin else "")

    def __repr__(self) -> str:
        where = f"service={self.service_name!r}" if self.sentinels else f"url={self.location!r}"
        return f"<{type(self).__name__} {where} prefix={self.key_prefix!r}>"

    def _run(self, script: str, name: str, args: list[Any], keys: list[str]) -> Any:
        # The hot path: a plain try (no context manager) and EVALSHA sent directly. ``keys``
        # are every key the script touches (script_keys()); the owners among several waiters
        # a script handed the lock to are woken here (wake()).
        try:
            reply = self._scripts.run(self.client.execute_command, script, keys, args)
        except self.family.error as exc:
            raise self._unavailable(exc, name) from exc
        return self.wake(name, reply)

    async def _arun(self, script: str, name: str, args: list[Any], keys: list[str]) -> Any:
        # _run() on the running event loop's own client.
        client = await self._async_clients.get()
        try:
            reply = await self._scripts.arun(client.execute_command, script, keys, args)
        except self.family.error as exc:
            raise self._unavailable(exc, name) from exc
        return await self.awake(name, reply, client)

    # Primitives ------------------------------------------------------------------------------

    def acquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        args = acquire_args(owner, request, self._fencing_arg)
        keys = self.script_keys("acquire", name, request.attempt)
        if self.wait_replicas:
            sha = self._scripts.sha["acquire"]
            reply, acks = self._replicated(name, "EVALSHA", sha, len(keys), *keys, *args)
            return self._durable(name, owner, acquired(self.wake(name, reply)), acks)
        return acquired(self._run("acquire", name, args, keys))

    def acquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        if self.wait_replicas:
            return None  # each name's acquire waits for its replicas: one by one
        args = acquire_all_args(owner, request, holds, self._fencing_arg)
        keys = self._all_keys(names, request.attempt)
        return acquired_all(names, self._run("acquire_all", names[0], args, keys))

    def release(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        args = release_args(owner, request, self._fencing_arg)
        return count(self._run("release", name, args, self.script_keys("release", name)))

    def extend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        args = extend_args(owner, ttl, replace, metadata)
        return seconds(self._run("extend", name, args, self.script_keys("extend", name)))

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        return seconds(self._run("ttl", name, [owner or ""], self.script_keys("ttl", name)))

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        # BLPOP on the owner's wake-up lists: a release that hands the lock over pushes the
        # owner's call, so this returns within a round trip of the release, holding the lock.
        deadline = time.monotonic() + min(timeout, self.max_wait)
        while (window := deadline - time.monotonic()) >= 0.001:
            command = ("BLPOP", *self.wait_keys(name, owner), f"{window:.3f}")
            if self.wait_replicas:
                reply, acks = self._replicated(name, *command)
            else:
                send: Callable[..., Any] = self.client.execute_command
                with self._errors(name):
                    reply, acks = send(*command), 0
            if reply is None:
                return None
            grant = self.pass_on(name, owner, reply)
            if grant is not None:
                return self._durable(name, owner, grant, acks)
        return None

    # wait_replicas: each acquire, then WAIT, on one connection -----------------------------

    def _replicated(self, name: str, *command: Any) -> tuple[Any, int]:
        with self._errors(name):
            return replicated(self.client, self._scripts, self._wait_args, *command)

    def _durable(self, name: str, owner: str, result: _Won, acks: int) -> _Won:
        """Return ``result`` if enough replicas have it; else undo the acquire and raise."""
        if acks >= self.wait_replicas or not getattr(result, "acquired", True):
            return result
        holds = result.holds if isinstance(result, AcquireResult) else 1
        self.withdraw(name, owner, holds - 1)
        raise unreplicated(name, acks, self.wait_replicas, self.wait_replicas_timeout)

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        keys = self.script_keys("withdraw", name, attempt, owner)
        return int(self._run("withdraw", name, [owner, holds, self._fencing_arg, attempt], keys))

    # The same primitives on the running event loop's asyncio client -------------------------

    async def aacquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        if self.wait_replicas:  # WAIT needs the writing connection: the blocking path, offloaded
            return await super().aacquire(name, owner, request)
        args = acquire_args(owner, request, self._fencing_arg)
        keys = self.script_keys("acquire", name, request.attempt)
        return acquired(await self._arun("acquire", name, args, keys))

    async def aacquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        if self.wait_replicas:
            return None
        args = acquire_all_args(owner, request, holds, self._fencing_arg)
        keys = self._all_keys(names, request.attempt)
        return acquired_all(names, await self._arun("acquire_all", names[0], args, keys))

    async def arelease(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        args = release_args(owner, request, self._fencing_arg)
        return count(await self._arun("release", name, args, self.script_keys("release", name)))

    async def aextend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        args = extend_args(owner, ttl, replace, metadata)
        return seconds(await self._arun("extend", name, args, self.script_keys("extend", name)))

    async def attl(self, name: str, owner: str | None = None) -> float | None:
        keys = self.script_keys("ttl", name)
        return seconds(await self._arun("ttl", name, [owner or ""], keys))

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        if self.wait_replicas:
            return await super().await_grant(name, owner, timeout)
        client = await self._async_clients.get()
        deadline = time.monotonic() + min(timeout, self.max_wait)
        while (window := deadline - time.monotonic()) >= 0.001:
            with self._errors(name):
                reply = await client.blpop(list(self.wait_keys(name, owner)), window)
            if reply is None:
                return None
            grant = await self.apass_on(name, owner, reply, client)
            if grant is not None:
                return grant
        return None

    async def awithdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        args = [owner, holds, self._fencing_arg, attempt]
        keys = self.script_keys("withdraw", name, attempt, owner)
        return int(await self._arun("withdraw", name, args, keys))

    async def aclose(self) -> None:
        await self._async_clients.aclose()

    def force_release(self, name: str, owner: str | None = None) -> int:
        keys = self.script_keys("force_release", name)
        return int(self._run("force_release", name, [owner or "", self._fencing_arg], keys))

    def ping(self) -> None:
        with self._errors(None):
            self.client.ping()

    def close(self) -> None:
        close_client(self.client)
