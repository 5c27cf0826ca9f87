"""Locks on one Redis server: standalone, the primary a URL points at, or the one Sentinel names.

Every primitive is one Lua script run with ``EVALSHA`` (loaded again on ``NOSCRIPT``), so each
is atomic and costs one round trip. See ``lua/`` for the key layout.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from ..exceptions import BackendUnavailableError, InvalidLockBackendError, LockError
from ._loops import PerLoop
from ._redis_keyspace import RedisKeyspace
from ._redis_options import (
    ASYNC_CONNECTION_OPTIONS,
    CONNECTION_OPTIONS,
    CONNECTION_OPTIONS_DESCRIBED,
    URL_SCHEMES,
    SentinelAddress,
    async_client,
    redact_url,
    secret_safe,
    sentinel_problems,
    sync_client,
    url_problems,
)
from ._scripts import SCRIPT_NAMES, source
from .base import AcquireResult, BaseLockBackend, Grant, Problem

__all__ = ["RedisBackend", "redact_url"]

logger = logging.getLogger("django_redis_lock")


#: What an acquire hands back: a result, or a grant to a waiter.
_Won = TypeVar("_Won", AcquireResult, Grant)

#: The acquire script's flags argument, by (fair, claim).
_FLAGS = {(False, False): b"-", (True, False): b"f", (False, True): b"c", (True, True): b"fc"}

#: The acquire script's "holds known" argument when the backend counts reentrant acquires.
_COUNT_HERE = b""


class RedisBackend(RedisKeyspace):
    """Locks stored on one Redis server.

    OPTIONS: ``url`` (``redis://``, ``rediss://`` or ``unix://``), ``key_prefix``, ``ttl``
    (default lease), ``fencing_ttl`` (how long a fencing counter outlives its lock),
    ``socket_timeout`` and ``socket_connect_timeout`` (seconds; every call fails within them
    when Redis is unreachable), and any keyword argument of redis-py's connection pool
    (``password``, ``ssl_ca_certs``, ``max_connections``, ...).
    """

    options: ClassVar[frozenset[str]] = BaseLockBackend.options | {
        "url",
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
    duration_options: ClassVar[frozenset[str]] = BaseLockBackend.duration_options | {
        "fencing_ttl",
        "socket_timeout",
        "socket_connect_timeout",
        "wait_replicas_timeout",
    }
    #: The schemes ``url`` may have.
    url_schemes: ClassVar[frozenset[str]] = URL_SCHEMES

    def __init__(
        self,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        key_prefix: str = "lock",
        ttl: float = 30.0,
        fencing_ttl: float = 86400.0,
        socket_timeout: float = 5.0,
        socket_connect_timeout: float = 5.0,
        sentinels: Sequence[SentinelAddress] | None = None,
        service_name: str | None = None,
        wait_replicas: int = 0,
        wait_replicas_timeout: float = 1.0,
        **connection_options: Any,
    ) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl)
        self.sentinels, self.service_name = sentinels, service_name
        self.wait_replicas = wait_replicas
        self.wait_replicas_timeout = float(wait_replicas_timeout)
        self.url = url
        self.fencing_ttl = float(fencing_ttl)
        self._fencing_arg = str(_ms(self.fencing_ttl)).encode()  # encoded once, sent often
        self._loaded: set[str] = set()
        timeout = float(socket_timeout)
        # A blocking wait must end before the socket timeout would cut it off.
        self.max_wait = max(0.01, min(5.0, timeout - min(0.5, timeout / 4)))
        timeouts = {
            "socket_timeout": timeout,
            "socket_connect_timeout": float(socket_connect_timeout),
        }
        # The asyncio client takes the same options, less the few only the sync one knows.
        self._async_options = {
            **timeouts,
            **{k: v for k, v in connection_options.items() if k in ASYNC_CONNECTION_OPTIONS},
            # No automatic retry: a script re-sent after a lost reply could count a hold twice.
            "retry": AsyncRetry(NoBackoff(), 0),
        }
        connection_options.setdefault("retry", Retry(NoBackoff(), 0))
        try:
            self.client: redis.Redis = self._connect(url, {**timeouts, **connection_options})
        except ValueError as exc:
            raise InvalidLockBackendError(
                f"url {redact_url(url)!r} could not be used: {secret_safe(url, exc)}"
            ) from None
        self._async_clients = PerLoop(self._new_async_client, _close_async_client)
        # SHA1 of each script: EVALSHA sends the digest, and a NOSCRIPT reply loads it once.
        self._scripts: dict[str, tuple[str, str]] = {
            name: (hashlib.sha1(source(name).encode()).hexdigest(), source(name))  # noqa: S324
            for name in SCRIPT_NAMES
        }

    @classmethod
    def option_problems(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        found = super().option_problems(options, where=where)
        urls = [options["url"]] if "url" in options else []
        found += url_problems(urls, cls.url_schemes, options, where=where)
        problems = sentinel_problems(options.get("sentinels"), options.get("service_name"))
        replicas = options.get("wait_replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            problems.append(
                f"wait_replicas must be a whole number of replicas (0: do not wait), got "
                f"{replicas!r}."
            )
        return found + [cls.own_problem(where, problem) for problem in problems]

    def _connect(self, url: str, options: dict[str, Any]) -> Any:
        """Return the blocking client: of ``url``, or of the primary that Sentinel names."""
        return sync_client(url, self.sentinels, self.service_name, options)

    def _new_async_client(self) -> redis.asyncio.Redis:
        return async_client(self.url, self.sentinels, self.service_name, self._async_options)

    @property
    def location(self) -> str:
        """Return where the locks are: the URL (password redacted), or the Sentinel service."""
        if self.sentinels:
            return f"Sentinel service {self.service_name!r}"
        return redact_url(self.url)

    def _subject(self) -> str:
        # What an error message says is unavailable.
        if self.sentinels:
            return f"The Redis primary {self.service_name!r} (found by Sentinel)"
        return f"Redis at {self.location}"

    def __repr__(self) -> str:
        where = f"service={self.service_name!r}" if self.sentinels else f"url={self.location!r}"
        return f"<{type(self).__name__} {where} prefix={self.key_prefix!r}>"

    def _run(self, script: str, name: str, args: list[Any]) -> Any:
        # The hot path: a plain try (no context manager) and EVALSHA sent directly. Only the
        # holders key is passed; the scripts derive the lock's other keys from it.
        sha, text = self._scripts[script]
        key = self.key(name)
        command: Callable[..., Any] = self.client.execute_command
        try:
            try:
                return command("EVALSHA", sha, 1, key, *args)
            except NoScriptError:
                return command("EVAL", text, 1, key, *args)
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc

    async def _arun(self, script: str, name: str, args: list[Any]) -> Any:
        # _run() on the running event loop's own client.
        sha, text = self._scripts[script]
        key = self.key(name)
        command: Callable[..., Any] = (await self._async_clients.get()).execute_command
        try:
            try:
                return await command("EVALSHA", sha, 1, key, *args)
            except NoScriptError:
                return await command("EVAL", text, 1, key, *args)
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc

    def _acquire_args(
        self,
        owner: str,
        *,
        ttl: float,
        limit: int,
        metadata: str | bytes,
        fair: bool,
        wait: float,
        claim: bool,
        holds: int | None,
        attempt: str,
    ) -> list[Any]:
        wait_ms = _ms(wait) if wait > 0 else 0
        known = _COUNT_HERE if holds is None else holds
        flags = _FLAGS[fair, claim]
        return [
            owner,
            _ms(ttl),
            limit,
            metadata,
            self._fencing_arg,
            wait_ms,
            flags,
            known,
            attempt,
        ]

    # Primitives ------------------------------------------------------------------------------

    def acquire(
        self,
        name: str,
        owner: str,
        *,
        ttl: float,
        limit: int = 1,
        metadata: str | bytes,
        fair: bool = False,
        wait: float = 0.0,
        claim: bool = False,
        holds: int | None = None,
        attempt: str = "",
    ) -> AcquireResult:
        args = self._acquire_args(
            owner,
            ttl=ttl,
            limit=limit,
            metadata=metadata,
            fair=fair,
            wait=wait,
            claim=claim,
            holds=holds,
            attempt=attempt,
        )
        if self.wait_replicas:
            sha = self._scripts["acquire"][0]
            reply, acks = self._replicated(name, "EVALSHA", sha, 1, self.key(name), *args)
            return self._durable(name, owner, _acquired(reply), acks)
        return _acquired(self._run("acquire", name, args))

    def release(self, name: str, owner: str, holds: int | None = None) -> int | None:
        return _count(self._run("release", name, self._release_args(owner, holds)))

    def _release_args(self, owner: str, holds: int | None) -> list[Any]:
        return [owner, self._fencing_arg, _COUNT_HERE if holds is None else holds]

    def extend(self, name: str, owner: str, ttl: float, *, replace: bool = False) -> float | None:
        return _seconds(self._run("extend", name, [owner, _ms(ttl), "1" if replace else "0"]))

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        return _seconds(self._run("ttl", name, [owner or ""]))

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        # BLPOP on the owner's own wake-up list: a release that hands the lock over pushes
        # to it, so this returns within a round trip of the release, holding the lock.
        seconds = min(timeout, self.max_wait)
        if seconds < 0.001:
            return None
        key = self.key(name, f"s:{owner}")
        if self.wait_replicas:
            reply, acks = self._replicated(name, "BLPOP", key, f"{seconds:.3f}")
            grant = _granted(reply)
            return grant if grant is None else self._durable(name, owner, grant, acks)
        command: Callable[..., Any] = self.client.execute_command
        try:
            reply = command("BLPOP", key, f"{seconds:.3f}")
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc
        return _granted(reply)

    def wait_and_claim(
        self, name: str, owner: str, timeout: float, **request: Any
    ) -> AcquireResult:
        # BLPOP and the claim in one pipeline: the server runs the claim the moment the wait
        # ends, and the waiter wakes once, to both replies.
        seconds = min(timeout, self.max_wait)
        if self.wait_replicas or seconds < 0.001:
            return super().wait_and_claim(name, owner, timeout, **request)
        args = self._acquire_args(owner, claim=True, **request)
        self._load("acquire")
        pipe = self.client.pipeline(transaction=False)
        queue: Callable[..., Any] = pipe.execute_command
        queue("BLPOP", self.key(name, f"s:{owner}"), f"{seconds:.3f}")
        queue("EVALSHA", self._scripts["acquire"][0], 1, self.key(name), *args)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc
        if isinstance(replies[1], NoScriptError):  # the server lost its scripts (a restart)
            self._loaded.discard("acquire")
            return _acquired(self._run("acquire", name, args))
        if isinstance(replies[1], redis.RedisError):
            raise self._unavailable(replies[1], name) from replies[1]
        return _acquired(replies[1])

    async def await_and_claim(
        self, name: str, owner: str, timeout: float, **request: Any
    ) -> AcquireResult:
        seconds = min(timeout, self.max_wait)
        if self.wait_replicas or seconds < 0.001:
            return await super().await_and_claim(name, owner, timeout, **request)
        args = self._acquire_args(owner, claim=True, **request)
        pipe = (await self._async_clients.get()).pipeline(transaction=False)
        queue: Callable[..., Any] = pipe.execute_command
        queue("BLPOP", self.key(name, f"s:{owner}"), f"{seconds:.3f}")
        queue("EVALSHA", self._scripts["acquire"][0], 1, self.key(name), *args)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc
        if isinstance(replies[1], NoScriptError):  # claimed again, loading the script
            return _acquired(await self._arun("acquire", name, args))
        if isinstance(replies[1], redis.RedisError):
            raise self._unavailable(replies[1], name) from replies[1]
        return _acquired(replies[1])

    # wait_replicas: each acquire, then WAIT, on one connection -----------------------------

    def _replicated(self, name: str, *command: Any) -> tuple[Any, int]:
        # In one pipeline, so WAIT runs on the connection that wrote the lock.
        self._load("acquire")
        pipe = self.client.pipeline(transaction=False)
        queue: Callable[..., Any] = pipe.execute_command
        queue(*command)
        queue("WAIT", self.wait_replicas, _ms(self.wait_replicas_timeout))
        try:
            reply, acks = pipe.execute()
        except redis.RedisError as exc:
            if isinstance(exc, NoScriptError):
                self._loaded.discard("acquire")  # the server lost its scripts (a restart)
            raise self._unavailable(exc, name) from exc
        return reply, int(acks)

    def _durable(self, name: str, owner: str, result: _Won, acks: int) -> _Won:
        """Return ``result`` if enough replicas have it; else undo the acquire and raise."""
        if acks >= self.wait_replicas or not getattr(result, "acquired", True):
            return result
        holds = result.holds if isinstance(result, AcquireResult) else 1
        self.withdraw(name, owner, holds - 1)
        raise self._not_replicated(name, acks)

    def _not_replicated(self, name: str, acks: int) -> BackendUnavailableError:
        return BackendUnavailableError(
            f"Lock {name!r} was acquired, but only {acks} of the {self.wait_replicas} replicas "
            f"required (wait_replicas) acknowledged it within {self.wait_replicas_timeout}s: "
            "the acquire was undone.",
            lock_name=name,
        )

    def _load(self, script: str) -> None:
        # Pipelines need their scripts loaded first: NOSCRIPT would fail the whole pipeline.
        if script not in self._loaded:
            with self._errors(None):
                self.client.script_load(self._scripts[script][1])
            self._loaded.add(script)

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        return int(self._run("withdraw", name, [owner, holds, self._fencing_arg, attempt]))

    # The same primitives on the running event loop's asyncio client -------------------------

    async def aacquire(
        self,
        name: str,
        owner: str,
        *,
        ttl: float,
        limit: int = 1,
        metadata: str | bytes,
        fair: bool = False,
        wait: float = 0.0,
        claim: bool = False,
        holds: int | None = None,
        attempt: str = "",
    ) -> AcquireResult:
        if self.wait_replicas:  # WAIT needs the writing connection: the blocking path, offloaded
            return await super().aacquire(
                name,
                owner,
                ttl=ttl,
                limit=limit,
                metadata=metadata,
                fair=fair,
                wait=wait,
                claim=claim,
                holds=holds,
                attempt=attempt,
            )
        args = self._acquire_args(
            owner,
            ttl=ttl,
            limit=limit,
            metadata=metadata,
            fair=fair,
            wait=wait,
            claim=claim,
            holds=holds,
            attempt=attempt,
        )
        return _acquired(await self._arun("acquire", name, args))

    async def arelease(self, name: str, owner: str, holds: int | None = None) -> int | None:
        return _count(await self._arun("release", name, self._release_args(owner, holds)))

    async def aextend(
        self, name: str, owner: str, ttl: float, *, replace: bool = False
    ) -> float | None:
        args = [owner, _ms(ttl), "1" if replace else "0"]
        return _seconds(await self._arun("extend", name, args))

    async def attl(self, name: str, owner: str | None = None) -> float | None:
        return _seconds(await self._arun("ttl", name, [owner or ""]))

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        seconds = min(timeout, self.max_wait)
        if seconds < 0.001:
            return None
        if self.wait_replicas:
            return await super().await_grant(name, owner, timeout)
        command: Callable[..., Any] = (await self._async_clients.get()).execute_command
        try:
            reply = await command("BLPOP", self.key(name, f"s:{owner}"), f"{seconds:.3f}")
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc
        return _granted(reply)

    async def awithdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        return int(await self._arun("withdraw", name, [owner, holds, self._fencing_arg, attempt]))

    async def aclose(self) -> None:
        await self._async_clients.aclose()

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        # Every lease in one pipeline: one round trip, however many locks are held.
        if not leases:
            return []
        self._load("extend")
        with self._errors(None):
            return [_seconds(reply) for reply in self._renew_on(self.client, leases)]

    def _renew_on(
        self,
        client: Any,
        leases: Sequence[tuple[str, str, float]],
        keep: tuple[type[Exception], ...] = (),
    ) -> list[Any]:
        """Renew ``leases`` in one pipeline on ``client``; raise the first error of any.

        Errors of the ``keep`` types stand in the list instead, in the place of their lease.
        """
        sha, text = self._scripts["extend"]
        for attempt in range(2):
            pipe = client.pipeline(transaction=False)
            queue: Callable[..., Any] = pipe.execute_command
            for name, owner, ttl in leases:
                queue("EVALSHA", sha, 1, self.key(name), owner, _ms(ttl), "1")
            replies: list[Any] = pipe.execute(raise_on_error=False)
            if attempt == 0 and any(isinstance(r, NoScriptError) for r in replies):
                client.script_load(text)  # the server lost its scripts (a restart)
                continue
            break
        for reply in replies:
            if isinstance(reply, redis.RedisError) and not isinstance(reply, keep):
                raise reply
        return replies

    def force_release(self, name: str, owner: str | None = None) -> int:
        return int(self._run("force_release", name, [owner or "", self._fencing_arg]))

    def ping(self) -> None:
        with self._errors(None):
            self.client.ping()

    def close(self) -> None:
        self.client.connection_pool.disconnect()
        for sentinel in _sentinels_of(self.client):
            sentinel.connection_pool.disconnect()


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _acquired(reply: list[Any]) -> AcquireResult:
    # The acquire script's reply: {1, fence, holds, lease ms}, {0, ms until a lease ends}, or
    # {-1} for a known hold whose lease ended.
    if reply[0] == -1:
        return AcquireResult(False, lost=True)
    if reply[0] == 1:
        return AcquireResult(
            True, fencing_token=int(reply[1]), holds=int(reply[2]), lease=int(reply[3]) / 1000
        )
    return AcquireResult(False, retry_after=max(int(reply[1]), 0) / 1000)


def _count(reply: Any) -> int | None:
    holds = int(reply)
    return None if holds < 0 else holds


def _seconds(reply: Any) -> float | None:
    ms = int(reply)
    return None if ms < 0 else ms / 1000


def _granted(reply: list[bytes] | None) -> Grant | None:
    # A BLPOP reply: None on timeout, else (key, b"<fencing token> <lease ms>").
    if not reply:
        return None
    fence, lease_ms = reply[1].split()
    return Grant(int(fence), int(lease_ms) / 1000)


async def _close_async_client(client: redis.asyncio.Redis) -> None:
    await client.aclose()
    for sentinel in _sentinels_of(client):  # a Sentinel's own connections, to the sentinels
        await sentinel.aclose()


def _sentinels_of(client: Any) -> list[Any]:
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []
