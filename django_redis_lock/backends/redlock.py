"""Locks on several independent Redis masters: the Redlock algorithm.

:class:`RedlockBackend` composes one :class:`~django_redis_lock.backends.redis.RedisBackend`
per URL (the same Lua scripts and keys on each master) and asks all of them at once, from a
small thread pool, so one slow master costs at most its own ``socket_timeout``. A lock is held
when a *majority* of the N masters (``N // 2 + 1``) hold it for the same owner::

    LOCKS = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redlock.RedlockBackend",
            "OPTIONS": {
                "urls": ["redis://a:6379/0", "redis://b:6379/0", "redis://c:6379/0"],
                "socket_timeout": 0.2,  # per master: a dead master costs this much at most
            },
        }
    }

OPTIONS: ``urls`` (at least three masters; an odd number tolerates the most failures),
``key_prefix``, ``ttl``, ``fencing_ttl``, ``socket_timeout`` and ``socket_connect_timeout``
(per master, default 0.2 s), ``clock_drift_factor`` (default 0.01) and any redis-py
connection pool keyword, given to every master.

Acquire
    Every master is tried at once. The lock is taken when a majority granted it *and* the
    time the attempt took is less than the lease minus the allowed clock drift
    (``lease * clock_drift_factor + 2 ms``); the lease the caller is told of is what is left:
    ``lease - elapsed - drift``. Otherwise whatever was taken is given back at once (on every
    master that granted, and, if a majority answered, every master whose answer was lost)
    and the attempt failed. An
    owner holding the lock on a majority acquires it again (reentrancy) with its first
    fencing token. If fewer than a majority of the masters answer, acquire (like every other
    call) raises :class:`~django_redis_lock.BackendUnavailableError`, naming how many of the N
    answered, within about one ``socket_timeout`` + ``socket_connect_timeout``.

Waiting is a retry
    A single Redis can queue a waiter and hand it the lock at the release; N independent
    masters cannot (a hand-over on some masters and not others would split the lock). So
    this is the one backend on which waiting is polling: :meth:`RedlockBackend.wait` sleeps
    a short, growing, jittered while (a few ms, up to :attr:`RedlockBackend.max_wait`,
    50 ms, never past the caller's timeout) and returns None, and the lock retries its
    acquire. The ``wait`` registration asked for by acquire is ignored, so ``fair=True`` does
    not give first-come-first-served order here: the lock goes to whichever retry comes
    first. Semaphores (``limit`` > 1) are refused: per-master slot counts do not add up to a
    bound across majorities (three holders can each hold two of three masters with two slots
    each).

Fencing tokens
    Each master issues its own token, ``max(last token + 1, its clock in µs)``; the lock's
    token is the *largest* token of the masters that granted it. Any two majorities share a
    master, and on that master the later holder's token is larger; the largest across
    masters is therefore increasing as long as the masters' clocks agree to within a lease
    (a master whose clock runs far ahead can lend an early holder a token larger than a later
    holder's). After a master restarts empty, a holder listed by it may show a different
    token than the one its acquire returned. For fencing that is strictly monotonic, use one
    Redis (:class:`~django_redis_lock.backends.redis.RedisBackend`).

Majority answers
    ``release``, ``extend``, ``ttl``, ``renew``, ``withdraw`` and ``force_release`` act on every
    master; a lease counts as held when a majority confirm it, and its remaining time is the
    majority's (the majority-th longest of the masters' answers, less the clock drift). When
    the masters that answered cannot decide it (the owner confirmed on two of five, two more
    unreachable), the call raises :class:`~django_redis_lock.BackendUnavailableError` rather
    than guess: a renewal then retries instead of reporting the lock lost. Listings
    (``iter_locks``, ``lock_info``, ``scan_page``) show a holder when a majority list the same
    owner of the same name; ``scan_page`` pages a merged, sorted listing (it reads every
    matching lock of every master), not a server-side cursor.

Caveats of Redlock itself apply: safety assumes bounded clock drift between the masters and
no master that forgets a lock it granted while the lease runs (restart masters empty only
after the longest lease has passed, or run them with ``appendfsync always``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, ClassVar, TypeVar

from ..exceptions import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    InvalidLockBackendError,
    LockError,
)
from ._redis_options import CONNECTION_OPTIONS, URL_SCHEMES, redact_url
from .base import AcquireResult, BaseLockBackend, Grant, LockInfo, option_seconds
from .redis import RedisBackend

__all__ = ["RedlockBackend"]

T = TypeVar("T")

#: The shortest and longest sleep of one :meth:`RedlockBackend.wait` (seconds).
_FIRST_RETRY, _LAST_RETRY = 0.003, 0.05

#: How many (name, owner) fencing tokens and retry counters are remembered at most.
_MEMORY = 65536


def _answer(left: float | LockError | None) -> float | _Failed | None:
    # One master's renewal answer, an error it could not give counted as a failed master.
    return _Failed(left) if isinstance(left, LockError) else left


class _Failed:
    """A master that did not answer: the error it raised."""

    __slots__ = ("error",)

    def __init__(self, error: LockError) -> None:
        self.error = error


class RedlockBackend(BaseLockBackend):
    """Locks held on a majority of N independent Redis masters (see the module docstring)."""

    options: ClassVar[frozenset[str]] = BaseLockBackend.options | {
        "urls",
        "fencing_ttl",
        "socket_timeout",
        "socket_connect_timeout",
        "clock_drift_factor",
    }
    connection_options: ClassVar[frozenset[str]] = CONNECTION_OPTIONS
    url_schemes: ClassVar[frozenset[str]] = URL_SCHEMES

    #: A wait is a short sleep before the next attempt (see the module docstring).
    max_wait: float = _LAST_RETRY

    def __init__(
        self,
        *,
        urls: Sequence[str] = (),
        key_prefix: str = "lock",
        ttl: float = 30.0,
        fencing_ttl: float = 86400.0,
        socket_timeout: float = 0.2,
        socket_connect_timeout: float = 0.2,
        clock_drift_factor: float = 0.01,
        **connection_options: Any,
    ) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl)
        for problem in self.option_problems(
            {"urls": urls, "clock_drift_factor": clock_drift_factor}
        ):
            raise InvalidLockBackendError(problem)
        self.clock_drift_factor = float(clock_drift_factor)
        self.socket_timeout = option_seconds("socket_timeout", socket_timeout)
        self.socket_connect_timeout = option_seconds(
            "socket_connect_timeout", socket_connect_timeout
        )
        self.nodes: list[RedisBackend] = [
            RedisBackend(
                url=url,
                key_prefix=key_prefix,
                ttl=ttl,
                fencing_ttl=fencing_ttl,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.socket_connect_timeout,
                **connection_options,
            )
            for url in urls
        ]
        self.fencing_ttl = self.nodes[0].fencing_ttl
        #: How many masters make a majority.
        self.quorum = len(self.nodes) // 2 + 1
        # The longest a fan-out of one-round-trip calls waits for its answers: a master that
        # has not answered by then counts as unavailable (its call ends on its own).
        self._bound = self.socket_timeout + self.socket_connect_timeout + 0.25
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._memory_lock = threading.Lock()
        # (name, owner) -> the fencing token of that owner's current hold, so a reentrant
        # acquire returns its first token whichever masters answer this time.
        self._tokens: OrderedDict[tuple[str, str], int] = OrderedDict()
        # (name, owner) -> the number of retries so far, for the growing sleeps of wait().
        self._retries: OrderedDict[tuple[str, str], int] = OrderedDict()

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[str]:
        problems = []
        urls = options.get("urls", ())
        if isinstance(urls, (str, bytes)) or not isinstance(urls, (list, tuple)):
            problems.append(f"urls must be a list of Redis URLs, got {type(urls).__name__}.")
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
        return problems

    def __repr__(self) -> str:
        urls = ", ".join(redact_url(node.url) for node in self.nodes)
        return f"<{type(self).__name__} urls=[{urls}] prefix={self.key_prefix!r}>"

    @property
    def urls(self) -> list[str]:
        """Return the URLs of the masters, in the order given."""
        return [node.url for node in self.nodes]

    # Fan-out ---------------------------------------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None or self._pool_pid != os.getpid():
            with self._memory_lock:
                if self._pool is None or self._pool_pid != os.getpid():
                    # A forked child has none of its parent's threads: it builds its own pool.
                    self._pool = ThreadPoolExecutor(
                        max_workers=min(64, 8 * len(self.nodes)),
                        thread_name_prefix="django-redis-lock-redlock",
                    )
                    self._pool_pid = os.getpid()
                pool = self._pool
        return pool

    def _fan(
        self,
        call: Callable[[RedisBackend], T],
        *,
        nodes: Sequence[int] | None = None,
        bounded: bool = True,
    ) -> list[T | _Failed]:
        """Run ``call`` on every master (or those at ``nodes``) at once; return the outcomes.

        A master that raised BackendUnavailableError, or (``bounded``) did not answer within
        the per-master timeouts, is a :class:`_Failed`; any other error propagates.
        """
        chosen = range(len(self.nodes)) if nodes is None else nodes
        futures: list[Future[T]] = [
            self._executor().submit(call, self.nodes[index]) for index in chosen
        ]
        wait_futures(futures, timeout=self._bound if bounded else None)
        outcomes: list[T | _Failed] = []
        for index, future in zip(chosen, futures, strict=True):
            if not future.done():
                url = redact_url(self.nodes[index].url)
                outcomes.append(
                    _Failed(BackendUnavailableError(f"Redis at {url} did not answer in time."))
                )
                continue
            error = future.exception()
            if error is None:
                outcomes.append(future.result())
            elif isinstance(error, BackendUnavailableError):
                outcomes.append(_Failed(error))
            else:
                raise error
        return outcomes

    def _unavailable(
        self, outcomes: Sequence[object], name: str | None, summary: str | None = None
    ) -> BackendUnavailableError:
        failures = [o.error for o in outcomes if isinstance(o, _Failed)]
        answered = len(outcomes) - len(failures)
        if summary is None:
            summary = (
                f"only {answered} of {len(self.nodes)} Redis masters answered (a majority of "
                f"{self.quorum} is needed)"
            )
        detail = "; ".join(str(error) for error in failures)
        return BackendUnavailableError(
            f"Redlock: {summary}" + (f": {detail}" if detail else "."), lock_name=name
        )

    def _answered(self, outcomes: Sequence[T | _Failed], name: str | None) -> list[T]:
        """Return the answers; raise BackendUnavailableError if fewer than a majority answered."""
        answers = [o for o in outcomes if not isinstance(o, _Failed)]
        if len(answers) < self.quorum:
            raise self._unavailable(outcomes, name)
        return answers

    def _majority(
        self, outcomes: Sequence[float | _Failed | None], name: str | None
    ) -> float | None:
        """Return the majority-th largest confirmed value, or None if a majority deny.

        Raise BackendUnavailableError when the masters that answered cannot decide: too few
        confirm, but the unreachable ones could still make a majority.
        """
        confirmed = sorted((o for o in outcomes if isinstance(o, (int, float))), reverse=True)
        if len(confirmed) >= self.quorum:
            return confirmed[self.quorum - 1]
        unknown = sum(isinstance(o, _Failed) for o in outcomes)
        if len(confirmed) + unknown >= self.quorum:
            denied = len(outcomes) - len(confirmed) - unknown
            raise self._unavailable(
                outcomes,
                name,
                f"cannot tell whether the lease is held: {len(confirmed)} of "
                f"{len(self.nodes)} Redis masters confirm it, {denied} deny it and {unknown} "
                f"did not answer (a majority of {self.quorum} must confirm or deny it)",
            )
        return None

    def _drift(self, seconds: float) -> float:
        return seconds * self.clock_drift_factor + 0.002

    def _lease_left(self, seconds: float | None, elapsed: float = 0.0) -> float | None:
        if seconds is None:
            return None
        return max(0.001, round(seconds - elapsed - self._drift(seconds), 3))

    # Remembered per (name, owner) ------------------------------------------------------------

    def _remember(
        self, memory: OrderedDict[tuple[str, str], int], key: tuple[str, str], value: int
    ) -> None:
        with self._memory_lock:
            memory[key] = value
            memory.move_to_end(key)
            while len(memory) > _MEMORY:
                memory.popitem(last=False)

    def _forget(self, name: str, owner: str | None = None) -> None:
        with self._memory_lock:
            for memory in (self._tokens, self._retries):
                if owner is not None:
                    memory.pop((name, owner), None)
                else:
                    for key in [key for key in memory if key[0] == name]:
                        del memory[key]

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
        # ``wait``, ``fair`` and ``claim`` have no meaning without a queue: every attempt is a
        # plain try on each master (see "Waiting is a retry" above).
        if limit != 1:
            raise InvalidLockArgumentError(
                f"RedlockBackend does not support semaphores (limit={limit!r}): slot counts "
                "on independent masters do not bound the holders. Use limit=1, or a "
                "RedisBackend alias for semaphores.",
                lock_name=name,
            )
        if not claim:
            with self._memory_lock:
                self._retries.pop((name, owner), None)
        started = time.monotonic()
        outcomes = self._fan(
            lambda node: node.acquire(name, owner, ttl=ttl, metadata=metadata, wait=0.0)
        )
        elapsed = time.monotonic() - started
        grants = [
            (index, o)
            for index, o in enumerate(outcomes)
            if isinstance(o, AcquireResult) and o.acquired
        ]
        holds = sorted((r.holds for _, r in grants), reverse=True)
        reentrant = len(holds) >= self.quorum and holds[self.quorum - 1] > 1
        if len(grants) >= self.quorum:
            leases = sorted((r.lease or 0.0 for _, r in grants), reverse=True)
            lease = leases[self.quorum - 1]
            left = lease - elapsed - self._drift(lease)
            if left > 0:
                token = self._token(name, owner, [r for _, r in grants], reentrant=reentrant)
                with self._memory_lock:
                    self._retries.pop((name, owner), None)
                return AcquireResult(
                    True,
                    fencing_token=token,
                    holds=holds[self.quorum - 1],
                    lease=round(left, 3),
                )
        # Not acquired: give back what was taken, and what may have been where the answer was
        # lost (unless too few answered: those masters are down, and waiting on them again
        # would double the time to the error; what they may hold ends with its lease).
        failed = [i for i, o in enumerate(outcomes) if isinstance(o, _Failed)]
        keep = holds[self.quorum - 1] - 1 if reentrant else 0
        undo = {index: r.holds - 1 for index, r in grants}
        if len(outcomes) - len(failed) >= self.quorum:
            undo.update(dict.fromkeys(failed, keep))
        if undo:
            self._fan(
                lambda node: node.withdraw(name, owner, undo[self.nodes.index(node)]),
                nodes=sorted(undo),
            )
        self._answered(outcomes, name)  # fewer than a majority answered: unavailable
        waits = [
            o.retry_after
            for o in outcomes
            if isinstance(o, AcquireResult) and not o.acquired and o.retry_after
        ]
        return AcquireResult(False, retry_after=min(waits) if waits else None)

    def _token(
        self, name: str, owner: str, grants: list[AcquireResult], *, reentrant: bool
    ) -> int:
        key = (name, owner)
        if reentrant:
            with self._memory_lock:
                known = self._tokens.get(key)
            if known is not None:
                return known
            # Not remembered (another backend instance took it): the reentrant masters' best.
            return max(r.fencing_token or 0 for r in grants if r.holds > 1)
        token = max(r.fencing_token or 0 for r in grants)
        self._remember(self._tokens, key, token)
        return token

    def release(self, name: str, owner: str, holds: int | None = None) -> int | None:
        outcomes = self._fan(lambda node: node.release(name, owner, holds))
        left = self._majority(outcomes, name)
        if left is None or left == 0:
            self._forget(name, owner)
        return None if left is None else int(left)

    def extend(self, name: str, owner: str, ttl: float, *, replace: bool = False) -> float | None:
        started = time.monotonic()
        outcomes = self._fan(lambda node: node.extend(name, owner, ttl, replace=replace))
        return self._lease_left(self._majority(outcomes, name), time.monotonic() - started)

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        if owner is not None:
            return self._lease_left(self._majority(self._fan(lambda n: n.ttl(name, owner)), name))
        # Any holder: the longest lease that a majority confirm for one and the same owner.
        outcomes = self._fan(lambda node: node.lock_info(name))
        by_owner: dict[str, list[float | _Failed | None]] = {}
        for index, outcome in enumerate(outcomes):
            for info in [] if isinstance(outcome, _Failed) else outcome:
                by_owner.setdefault(info.owner, [None] * len(outcomes))[index] = info.ttl
        failed = [o if isinstance(o, _Failed) else None for o in outcomes]
        longest: float | None = None
        for seen in by_owner.values():
            merged = [f or s for f, s in zip(failed, seen, strict=True)]
            left = self._majority(merged, name)
            if left is not None and (longest is None or left > longest):
                longest = left
        if longest is None:
            self._answered(outcomes, name)
        return self._lease_left(longest)

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        time.sleep(self._retry_delay(name, owner, timeout))
        return None

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        await asyncio.sleep(self._retry_delay(name, owner, timeout))
        return None

    def _retry_delay(self, name: str, owner: str, timeout: float) -> float:
        # Growing sleeps (3 ms, 6 ms, 12 ms, ... up to 50 ms), each jittered by up to half, so
        # contenders that collided do not collide again in step. Never past ``timeout``.
        key = (name, owner)
        with self._memory_lock:
            retries = self._retries.get(key, 0)
        self._remember(self._retries, key, retries + 1)
        delay = min(_LAST_RETRY, _FIRST_RETRY * 2.0 ** min(retries, 10))
        delay *= random.uniform(0.5, 1.0)  # noqa: S311  (jitter, not secrecy)
        return max(0.0, min(timeout, delay))

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        outcomes = self._fan(lambda node: node.withdraw(name, owner, holds))
        left = sorted(self._answered(outcomes, name), reverse=True)[self.quorum - 1]
        if left == 0:
            self._forget(name, owner)
        return left

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        if not leases:
            return []
        started = time.monotonic()
        outcomes = self._fan(lambda node: node.renew(leases))
        elapsed = time.monotonic() - started
        renewed: list[float | None] = []
        for position in range(len(leases)):
            column: list[float | _Failed | None] = [
                o if isinstance(o, _Failed) else _answer(o[position]) for o in outcomes
            ]
            renewed.append(self._lease_left(self._majority(column, None), elapsed))
        return renewed

    def force_release(self, name: str, owner: str | None = None) -> int:
        outcomes = self._fan(lambda node: node.force_release(name, owner))
        self._forget(name, owner)
        return sorted(self._answered(outcomes, name), reverse=True)[self.quorum - 1]

    def ping(self) -> None:
        self._answered(self._fan(lambda node: node.ping()), None)

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        with self._memory_lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=False)

    async def aclose(self) -> None:
        await asyncio.gather(*(node.aclose() for node in self.nodes))

    # Listing ---------------------------------------------------------------------------------

    def iter_locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        outcomes = self._fan(lambda node: list(node.iter_locks(pattern)), bounded=False)
        yield from self._merge(outcomes, None)

    def lock_info(self, name: str) -> list[LockInfo]:
        outcomes = self._fan(lambda node: node.lock_info(name))
        return [info for info in self._merge(outcomes, name) if info.name == name]

    def _merge(
        self, outcomes: Sequence[list[LockInfo] | _Failed], name: str | None
    ) -> list[LockInfo]:
        # A holder is listed when a majority of the masters list the same owner of the name.
        # Shown: the majority's lease (the majority-th longest), the largest token, and the
        # rest as the master with that lease recorded them.
        answers = self._answered(outcomes, name)
        seen: dict[tuple[str, str], list[LockInfo]] = {}
        for infos in answers:
            for info in infos:
                seen.setdefault((info.name, info.owner), []).append(info)
        merged = []
        for key in sorted(seen):
            copies = seen[key]
            if len(copies) < self.quorum:
                continue
            copies.sort(key=lambda info: info.ttl, reverse=True)
            chosen = copies[self.quorum - 1]
            holds = sorted((info.holds for info in copies), reverse=True)[self.quorum - 1]
            merged.append(
                dataclasses.replace(
                    chosen,
                    ttl=self._lease_left(chosen.ttl) or 0.001,
                    holds=holds,
                    fencing_token=max(info.fencing_token for info in copies),
                )
            )
        return merged
