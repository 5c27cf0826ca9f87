"""Locks on several independent Redis masters: the Redlock algorithm.

:class:`RedlockBackend` composes one :class:`~django_redis_lock.backends.redis.RedisBackend`
per URL (the same Lua scripts and keys on each master) and asks all of them at once
(``_quorum.py``). A lock is held when a *majority* of the N masters (``N // 2 + 1``) hold it
for the same owner. How acquire, waiting, fencing tokens and majority answers work, and the
caveats of Redlock itself, are in the "RedlockBackend" section of docs/backends.rst.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .._core.owner import new_attempt
from ..exceptions import InvalidLockArgumentError, LockError
from ._per_owner import PerOwner
from ._quorum import Failed, Quorum, answer
from ._redis.clients import family_problems
from ._redis.connections import (
    CONNECTION_OPTIONS,
    CONNECTION_OPTIONS_DESCRIBED,
    REFUSED_CONNECTION_OPTIONS,
    URL_SCHEMES,
    url_problems,
)
from ._withdrawals import Try, Withdrawals
from .base import (
    SHARED,
    AcquireRequest,
    AcquireResult,
    Admission,
    BaseLockBackend,
    Grant,
    LockInfo,
    Problem,
    Rate,
    ReleaseRequest,
)
from .redis import RedisBackend

__all__ = ["RedlockBackend"]

#: The shortest and longest sleep of one :meth:`RedlockBackend.wait` (seconds).
_FIRST_RETRY, _LAST_RETRY = 0.003, 0.05

#: The OPTIONS in seconds, besides ``ttl``.
_DURATIONS = frozenset({"fencing_ttl", "socket_timeout", "socket_connect_timeout"})


class RedlockBackend(BaseLockBackend):
    """Locks held on a majority of N independent Redis masters.

    OPTIONS: ``urls`` (at least three masters; an odd number tolerates the most failures),
    ``key_prefix``, ``ttl``, ``fencing_ttl``, ``socket_timeout`` and
    ``socket_connect_timeout`` (per master, default 0.2 s), ``clock_drift_factor`` (default
    0.01), ``client`` (``"redis"`` or ``"valkey"``; by default each master's URL decides, as
    for :class:`~.redis.RedisBackend`) and any redis-py connection pool keyword, given to
    every master.
    """

    duration_options: ClassVar[frozenset[str]] = BaseLockBackend.duration_options | _DURATIONS
    switch_duration_options: ClassVar[frozenset[str]] = frozenset({"fencing_ttl"})
    options: ClassVar[frozenset[str]] = (
        BaseLockBackend.options | _DURATIONS | {"urls", "clock_drift_factor", "client"}
    )
    connection_options: ClassVar[frozenset[str]] = CONNECTION_OPTIONS
    connection_options_described: ClassVar[str] = CONNECTION_OPTIONS_DESCRIBED
    refused_options: ClassVar[Mapping[str, str]] = REFUSED_CONNECTION_OPTIONS
    #: The schemes each of ``urls`` may have.
    url_schemes: ClassVar[frozenset[str]] = URL_SCHEMES

    #: A wait is a short sleep before the next attempt: waiting is a retry here.
    max_wait: float = _LAST_RETRY

    def __init__(
        self,
        *,
        urls: Sequence[str] = (),
        key_prefix: str = "lock",
        ttl: float = 30.0,
        max_hold: float | None = None,
        fencing_ttl: float = 0.0,
        socket_timeout: float = 0.2,
        socket_connect_timeout: float = 0.2,
        clock_drift_factor: float = 0.01,
        client: str | None = None,
        **connection_options: Any,
    ) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl, max_hold=max_hold)
        self.clock_drift_factor = float(clock_drift_factor)
        self.socket_timeout = float(socket_timeout)
        self.socket_connect_timeout = float(socket_connect_timeout)
        self.nodes: list[RedisBackend] = [
            RedisBackend(
                url=url,
                key_prefix=key_prefix,
                ttl=ttl,
                fencing_ttl=fencing_ttl,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_connect_timeout,
                client=client,
                **connection_options,
            )
            for url in urls
        ]
        self.fencing_ttl = self.nodes[0].fencing_ttl
        self._masters = Quorum(
            self.nodes,
            bound=self.socket_timeout + self.socket_connect_timeout + 0.25,
            clock_drift_factor=self.clock_drift_factor,
        )
        #: How many masters make a majority.
        self.quorum = self._masters.quorum
        self._withdrawals = Withdrawals(self._masters)
        # The fencing token of each owner's current hold, so a reentrant acquire returns its
        # first token whichever masters answer this time.
        self._tokens: PerOwner[int] = PerOwner()
        # The number of retries so far, for the growing sleeps of wait().
        self._retries: PerOwner[int] = PerOwner()
        # The masters' id of the owner's last try (see acquire), and its ttl.
        self._tries: PerOwner[tuple[str, float]] = PerOwner()
        self._try_numbers = itertools.count()

    @classmethod
    def option_problems(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        found = super().option_problems(options, where=where)
        problems = []
        urls = options.get("urls", ())
        if isinstance(urls, (str, bytes)) or not isinstance(urls, (list, tuple)):
            problems.append(f"urls must be a list of Redis URLs, got {type(urls).__name__}.")
            urls = ()
        elif len(urls) < 3:
            problems.append(
                f"urls must name at least 3 independent Redis masters, got {len(urls)}: "
                "Redlock needs a majority that survives the loss of one."
            )
        elif len(set(map(str, urls))) != len(urls):
            problems.append(
                "urls must name distinct masters: a repeated URL would count one server twice."
            )
        factor = options.get("clock_drift_factor", 0.01)
        if (
            isinstance(factor, bool)
            or not isinstance(factor, (int, float))
            or not 0 <= factor < 0.5
        ):
            problems.append(
                "clock_drift_factor must be a number from 0 up to (not including) 0.5, got "
                f"{factor!r}."
            )
        found += url_problems(urls, cls.url_schemes, options, where=where)
        found += family_problems(options.get("client"), urls, list(options), where=where)
        return found + [cls.own_problem(where, problem) for problem in problems]

    def __repr__(self) -> str:
        urls = ", ".join(node.location for node in self.nodes)
        return f"<{type(self).__name__} urls=[{urls}] prefix={self.key_prefix!r}>"

    @property
    def location(self) -> str:
        """Return the masters' URLs, passwords redacted."""
        return "Redlock masters " + ", ".join(node.location for node in self.nodes)

    @property
    def urls(self) -> list[str]:
        """Return the URLs of the masters, in the order given."""
        return [node.url for node in self.nodes]

    def _forget(self, name: str, owner: str | None = None) -> None:
        for memory in (self._tokens, self._retries, self._tries):
            memory.forget(name, owner)

    # Primitives ------------------------------------------------------------------------------

    def acquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        # ``wait``, ``fair`` and ``claim`` have no meaning without a queue: every attempt is a
        # plain try on each master (see "Waiting is a retry" in docs/backends.rst).
        if request.limit == SHARED:
            raise InvalidLockArgumentError(
                "RedlockBackend does not support read-write locks: it keeps no queue of "
                "waiters, so a waiting writer could not stop new readers, and would starve. "
                "Use a RedisBackend (or Sentinel or Cluster) alias for read-write locks.",
                lock_name=name,
            )
        if request.limit != 1:
            raise InvalidLockArgumentError(
                f"RedlockBackend does not support semaphores (limit={request.limit!r}): slot "
                "counts on independent masters do not bound the holders. Use limit=1, or a "
                "RedisBackend alias for semaphores.",
                lock_name=name,
            )
        if not request.claim:
            self._retries.forget(name, owner)
        # Each try has an id of its own on the masters: a failed one is withdrawn for good
        # (a master that runs it late takes nothing), while the caller tries again. Numbered
        # in order, so a master that runs it only after a later try took the lock leaves that
        # hold alone (see later() in _redis/lua/_helpers.lua).
        try_id = f"{request.attempt or new_attempt()}~{next(self._try_numbers):x}"
        self._tries.put(name, owner, (try_id, request.ttl))
        started = time.monotonic()
        plain = dataclasses.replace(request, wait=0.0, fair=False, claim=False, attempt=try_id)
        outcomes = self._masters.fan(
            lambda node: node.acquire(name, owner, plain),
            decided=self._acquire_settled,
            order=name,
        )
        elapsed = time.monotonic() - started
        grants = [o for o in outcomes if isinstance(o, AcquireResult) and o.acquired]
        counts = sorted((r.holds for r in grants), reverse=True)
        reentrant = len(counts) >= self.quorum and counts[self.quorum - 1] > 1
        if len(grants) >= self.quorum:
            leases = sorted((r.lease or 0.0 for r in grants), reverse=True)
            lease = leases[self.quorum - 1]
            left = lease - elapsed - self._masters.drift(lease)
            if left > 0:
                token = self._token(name, owner, grants, reentrant=reentrant)
                self._retries.forget(name, owner)
                return AcquireResult(
                    True,
                    fencing_token=token,
                    holds=counts[self.quorum - 1],
                    lease=round(left, 3),
                )
        # Not acquired: withdraw the try on every master that took it, or may run it late (it
        # did not answer). A master that runs it only after its withdrawal takes nothing, so
        # a failed owner never ends up holding a majority late.
        failed = Try(name, owner, request.holds or 0, try_id, request.ttl)
        self._withdrawals.failed(failed, outcomes)
        self._masters.answered(outcomes, name)  # fewer than a majority answered: unavailable
        if request.holds and any(isinstance(o, AcquireResult) and o.lost for o in outcomes):
            return AcquireResult(False, lost=True)
        waits = [
            o.retry_after
            for o in outcomes
            if isinstance(o, AcquireResult) and not o.acquired and o.retry_after
        ]
        return AcquireResult(False, retry_after=min(waits) if waits else None)

    def _acquire_settled(self, outcomes: list[AcquireResult | Failed]) -> bool:
        # Settled by the masters that answered: a majority granted, or enough refused that no
        # majority can grant. Masters that failed settle nothing: the others are waited for
        # (within the bound), so an error counts exactly the masters that answered.
        granted = sum(isinstance(o, AcquireResult) and o.acquired for o in outcomes)
        refused = sum(isinstance(o, AcquireResult) and not o.acquired for o in outcomes)
        return granted >= self.quorum or refused > len(self.nodes) - self.quorum

    def _token(
        self, name: str, owner: str, grants: list[AcquireResult], *, reentrant: bool
    ) -> int:
        if reentrant:
            known = self._tokens.get(name, owner)
            if known is not None:
                return known
            # Not remembered (another backend instance took it): the reentrant masters' best.
            return max(r.fencing_token or 0 for r in grants if r.holds > 1)
        token = max(r.fencing_token or 0 for r in grants)
        self._tokens.put(name, owner, token)
        return token

    def release(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        # Each master keeps the window on its own clock, from its own record of the acquire.
        outcomes = self._masters.ask(lambda node: node.release(name, owner, request), name)
        left = self._masters.majority(outcomes, name)
        if left is None or left == 0:
            self._forget(name, owner)
        return None if left is None else int(left)

    def extend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        started = time.monotonic()
        outcomes = self._masters.ask(
            lambda node: node.extend(name, owner, ttl, replace=replace, metadata=metadata), name
        )
        left = self._masters.majority(outcomes, name)
        return self._masters.lease_left(left, time.monotonic() - started)

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        if owner is not None:
            answers = self._masters.ask(lambda n: n.ttl(name, owner))
            return self._masters.lease_left(self._masters.majority(answers, name))
        # Any holder: the longest lease that a majority confirm for one and the same owner.
        outcomes = self._masters.fan(lambda node: node.lock_info(name))
        by_owner: dict[str, list[float | Failed | None]] = {}
        for index, outcome in enumerate(outcomes):
            for info in [] if isinstance(outcome, Failed) else outcome:
                by_owner.setdefault(info.owner, [None] * len(outcomes))[index] = info.ttl
        failed = [o if isinstance(o, Failed) else None for o in outcomes]
        longest: float | None = None
        for seen in by_owner.values():
            merged = [f or s for f, s in zip(failed, seen, strict=True)]
            left = self._masters.majority(merged, name)
            if left is not None and (longest is None or left > longest):
                longest = left
        if longest is None:
            self._masters.answered(outcomes, name)
        return self._masters.lease_left(longest)

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        time.sleep(self._retry_delay(name, owner, timeout))
        return None

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        await asyncio.sleep(self._retry_delay(name, owner, timeout))
        return None

    def _retry_delay(self, name: str, owner: str, timeout: float) -> float:
        # Growing sleeps (3 ms, 6 ms, 12 ms, ... up to 50 ms), each jittered by up to half, so
        # contenders that collided do not collide again in step. Never past ``timeout``.
        retries = self._retries.get(name, owner) or 0
        self._retries.put(name, owner, retries + 1)
        delay = min(_LAST_RETRY, _FIRST_RETRY * 2.0 ** min(retries, 10))
        delay *= random.uniform(0.5, 1.0)  # noqa: S311  (jitter, not secrecy)
        return max(0.0, min(timeout, delay))

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        ttl = self.default_ttl
        if attempt:
            last, last_ttl = self._tries.get(name, owner) or ("", ttl)
            if last.startswith(f"{attempt}~"):
                attempt, ttl = last, last_ttl
        outcomes = self._masters.ask(lambda node: node.withdraw(name, owner, holds, attempt), name)
        if attempt:  # a master that did not answer may run the try late: it is owed this
            self._withdrawals.unanswered(Try(name, owner, holds, attempt, ttl), outcomes)
        left = sorted(self._masters.answered(outcomes, name), reverse=True)[self.quorum - 1]
        if left == 0:
            self._forget(name, owner)
        return int(left)

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        if not leases:
            return []
        started = time.monotonic()
        outcomes = self._masters.fan(lambda node: node.renew(leases))
        elapsed = time.monotonic() - started
        renewed: list[float | None] = []
        for position in range(len(leases)):
            column: list[float | Failed | None] = [
                o if isinstance(o, Failed) else answer(o[position]) for o in outcomes
            ]
            renewed.append(self._masters.lease_left(self._masters.majority(column, None), elapsed))
        return renewed

    def force_release(self, name: str, owner: str | None = None) -> int:
        outcomes = self._masters.ask(lambda node: node.force_release(name, owner), name)
        self._forget(name, owner)
        return int(sorted(self._masters.answered(outcomes, name), reverse=True)[self.quorum - 1])

    def ping(self) -> None:
        self._masters.answered(self._masters.fan(lambda node: node.ping()), None)

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self._masters.close()

    async def aclose(self) -> None:
        await asyncio.gather(*(node.aclose() for node in self.nodes))

    def admit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        raise InvalidLockArgumentError(
            "RedlockBackend keeps no rate limits: hits counted on independent masters do not "
            "bound the hits across majorities. Pass rate_limit() the alias of a RedisBackend "
            "or RedisClusterBackend (using=...).",
            lock_name=name,
        )

    # Listing ---------------------------------------------------------------------------------

    def iter_locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        outcomes = self._masters.fan(lambda node: list(node.iter_locks(pattern)), bounded=False)
        yield from self._masters.holders(outcomes, None)

    def lock_info(self, name: str) -> list[LockInfo]:
        outcomes = self._masters.fan(lambda node: node.lock_info(name))
        return [info for info in self._masters.holders(outcomes, name) if info.name == name]
