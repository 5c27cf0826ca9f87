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
import itertools
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, ClassVar, TypeVar

from ..exceptions import BackendUnavailableError, InvalidLockArgumentError, LockError
from ..owner import new_attempt
from ._redis_options import (
    CONNECTION_OPTIONS,
    CONNECTION_OPTIONS_DESCRIBED,
    URL_SCHEMES,
    redact_url,
    url_problems,
)
from .base import AcquireResult, BaseLockBackend, Grant, LockInfo, Problem
from .redis import RedisBackend

__all__ = ["RedlockBackend"]

T = TypeVar("T")

#: The shortest and longest sleep of one :meth:`RedlockBackend.wait` (seconds).
_FIRST_RETRY, _LAST_RETRY = 0.003, 0.05

#: How many (name, owner) fencing tokens and retry counters are remembered at most.
_MEMORY = 65536

#: Calls that may wait on one master at once; past that, it counts as not answering.
_THREADS_PER_MASTER = 8

#: The longest a settled call waits for the masters that have not answered yet (seconds).
_GRACE = 0.005


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
    connection_options_described: ClassVar[str] = CONNECTION_OPTIONS_DESCRIBED
    duration_options: ClassVar[frozenset[str]] = BaseLockBackend.duration_options | {
        "fencing_ttl",
        "socket_timeout",
        "socket_connect_timeout",
    }
    #: The schemes each of ``urls`` may have.
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
        self._pools: list[ThreadPoolExecutor] | None = None
        self._outstanding: list[int] = []
        self._pool_pid = 0
        self._memory_lock = threading.Lock()
        # (name, owner) -> the fencing token of that owner's current hold, so a reentrant
        # acquire returns its first token whichever masters answer this time.
        self._tokens: OrderedDict[tuple[str, str], int] = OrderedDict()
        # (name, owner) -> the number of retries so far, for the growing sleeps of wait().
        self._retries: OrderedDict[tuple[str, str], int] = OrderedDict()
        # (name, owner) -> the masters' id of the owner's last try (see acquire).
        self._tries: OrderedDict[tuple[str, str], str] = OrderedDict()
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
        return found + [cls.own_problem(where, problem) for problem in problems]

    def __repr__(self) -> str:
        urls = ", ".join(redact_url(node.url) for node in self.nodes)
        return f"<{type(self).__name__} urls=[{urls}] prefix={self.key_prefix!r}>"

    @property
    def urls(self) -> list[str]:
        """Return the URLs of the masters, in the order given."""
        return [node.url for node in self.nodes]

    # Fan-out ---------------------------------------------------------------------------------

    def _executors(self) -> list[ThreadPoolExecutor]:
        pools = self._pools
        if pools is None or self._pool_pid != os.getpid():
            with self._memory_lock:
                if self._pools is None or self._pool_pid != os.getpid():
                    # A forked child has none of its parent's threads: it builds its own pools.
                    self._pools = [
                        ThreadPoolExecutor(
                            max_workers=_THREADS_PER_MASTER,
                            thread_name_prefix=f"django-redis-lock-redlock-{index}",
                        )
                        for index in range(len(self.nodes))
                    ]
                    self._outstanding = [0] * len(self.nodes)
                    self._pool_pid = os.getpid()
                pools = self._pools
        return pools

    def _submit(self, index: int, call: Callable[[RedisBackend], T]) -> Future[T]:
        # Each master has threads of its own, so one that does not answer ties up only its
        # own; past a few calls outstanding it is not asked at all until it answers again.
        pools = self._executors()
        with self._memory_lock:
            busy = self._outstanding[index] >= _THREADS_PER_MASTER
            if not busy:
                self._outstanding[index] += 1
        if busy:
            url = redact_url(self.nodes[index].url)
            refused: Future[T] = Future()
            refused.set_exception(
                BackendUnavailableError(f"Redis at {url} has not answered earlier calls yet.")
            )
            return refused
        future = pools[index].submit(call, self.nodes[index])
        future.add_done_callback(lambda _: self._answered_one(index))
        return future

    def _answered_one(self, index: int) -> None:
        with self._memory_lock:
            self._outstanding[index] -= 1

    def _fan(
        self,
        call: Callable[[RedisBackend], T],
        *,
        nodes: Sequence[int] | None = None,
        bounded: bool = True,
        decided: Callable[[list[T | _Failed]], bool] | None = None,
    ) -> list[T | _Failed]:
        """Run ``call`` on every master (or those at ``nodes``) at once; return the outcomes.

        A master that raised BackendUnavailableError, or (``bounded``) did not answer within
        the per-master timeouts, is a :class:`_Failed`; any other error propagates. Given
        ``decided`` (true of the answers so far once they settle the outcome), the masters
        that have not answered by then are not waited for, and count as failed.
        """
        chosen = range(len(self.nodes)) if nodes is None else nodes
        started = time.monotonic()
        futures = {self._submit(index, call): index for index in chosen}
        deadline = started + self._bound if bounded else None
        pending = set(futures)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = wait_futures(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                break  # the bound passed
            if (
                decided is not None
                and pending
                and decided([self._outcome(f) for f in futures if f.done()])
            ):
                # Settled. The others get as long again as the quorum took (a few ms at
                # most), so healthy masters all answer, and a frozen one costs no more.
                wait_futures(pending, timeout=min(_GRACE, time.monotonic() - started))
                break
        outcomes: list[T | _Failed] = []
        for future, index in futures.items():
            if not future.done():
                url = redact_url(self.nodes[index].url)
                outcomes.append(
                    _Failed(BackendUnavailableError(f"Redis at {url} did not answer in time."))
                )
                continue
            outcomes.append(self._outcome(future))
        return outcomes

    def _outcome(self, future: Future[Any]) -> Any:
        """Return what a master answered, or a :class:`_Failed` for one that failed."""
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, BackendUnavailableError):
            return _Failed(error)
        raise error

    def _settled(self, outcomes: Sequence[object]) -> bool:
        """Return whether the answers so far settle a majority answer: confirmed or denied."""
        confirmed = sum(isinstance(o, (int, float)) and not isinstance(o, bool) for o in outcomes)
        denied = sum(o is None for o in outcomes)
        return confirmed >= self.quorum or denied >= self.quorum

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
        self, memory: OrderedDict[tuple[str, str], Any], key: tuple[str, str], value: object
    ) -> None:
        with self._memory_lock:
            memory[key] = value
            memory.move_to_end(key)
            while len(memory) > _MEMORY:
                memory.popitem(last=False)

    def _forget(self, name: str, owner: str | None = None) -> None:
        with self._memory_lock:
            memories: tuple[OrderedDict[tuple[str, str], Any], ...] = (
                self._tokens,
                self._retries,
                self._tries,
            )
            for memory in memories:
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
        # Each try has an id of its own on the masters: a failed one is withdrawn for good
        # (a master that runs it late takes nothing), while the caller tries again.
        try_id = f"{attempt or new_attempt()}~{next(self._try_numbers):x}"
        self._remember(self._tries, (name, owner), try_id)
        started = time.monotonic()
        outcomes = self._fan(
            lambda node: node.acquire(
                name, owner, ttl=ttl, metadata=metadata, wait=0.0, holds=holds, attempt=try_id
            ),
            decided=self._acquire_settled,
        )
        elapsed = time.monotonic() - started
        grants = [
            (index, o)
            for index, o in enumerate(outcomes)
            if isinstance(o, AcquireResult) and o.acquired
        ]
        counts = sorted((r.holds for _, r in grants), reverse=True)
        reentrant = len(counts) >= self.quorum and counts[self.quorum - 1] > 1
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
                    holds=counts[self.quorum - 1],
                    lease=round(left, 3),
                )
        # Not acquired: withdraw the attempt on every master, without waiting for the slow
        # ones. A master that runs the attempt only now (it was frozen) finds it withdrawn
        # and takes nothing, so a failed owner never ends up holding a majority late.
        self._fan(
            lambda node: node.withdraw(name, owner, holds or 0, try_id),
            decided=lambda answers: len(answers) >= self.quorum,
        )
        self._answered(outcomes, name)  # fewer than a majority answered: unavailable
        if holds and any(isinstance(o, AcquireResult) and o.lost for o in outcomes):
            return AcquireResult(False, lost=True)
        waits = [
            o.retry_after
            for o in outcomes
            if isinstance(o, AcquireResult) and not o.acquired and o.retry_after
        ]
        return AcquireResult(False, retry_after=min(waits) if waits else None)

    def _acquire_settled(self, outcomes: list[AcquireResult | _Failed]) -> bool:
        # Settled by the masters that answered: a majority granted, or enough refused that no
        # majority can grant. Masters that failed settle nothing: the others are waited for
        # (within the bound), so an error counts exactly the masters that answered.
        granted = sum(isinstance(o, AcquireResult) and o.acquired for o in outcomes)
        refused = sum(isinstance(o, AcquireResult) and not o.acquired for o in outcomes)
        return granted >= self.quorum or refused > len(self.nodes) - self.quorum

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
        outcomes = self._fan(lambda node: node.release(name, owner, holds), decided=self._settled)
        left = self._majority(outcomes, name)
        if left is None or left == 0:
            self._forget(name, owner)
        return None if left is None else int(left)

    def extend(self, name: str, owner: str, ttl: float, *, replace: bool = False) -> float | None:
        started = time.monotonic()
        outcomes = self._fan(
            lambda node: node.extend(name, owner, ttl, replace=replace), decided=self._settled
        )
        return self._lease_left(self._majority(outcomes, name), time.monotonic() - started)

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        if owner is not None:
            answers = self._fan(lambda n: n.ttl(name, owner), decided=self._settled)
            return self._lease_left(self._majority(answers, name))
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
        if attempt:
            with self._memory_lock:
                last = self._tries.get((name, owner), "")
            attempt = last if last.startswith(f"{attempt}~") else attempt
        outcomes = self._fan(
            lambda node: node.withdraw(name, owner, holds, attempt), decided=self._settled
        )
        left = sorted(self._answered(outcomes, name), reverse=True)[self.quorum - 1]
        if left == 0:
            self._forget(name, owner)
        return int(left)

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
        outcomes = self._fan(lambda node: node.force_release(name, owner), decided=self._settled)
        self._forget(name, owner)
        return int(sorted(self._answered(outcomes, name), reverse=True)[self.quorum - 1])

    def ping(self) -> None:
        self._answered(self._fan(lambda node: node.ping()), None)

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        with self._memory_lock:
            pools, self._pools = self._pools, None
        if pools is not None and self._pool_pid == os.getpid():
            for pool in pools:
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
