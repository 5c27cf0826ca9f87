"""An in-process lock backend for tests of code that uses locks.

**It is not distributed.** Locks live in the memory of one Python process: two processes (two
web workers, a web process and a Celery worker) never see each other's locks. Use it in unit
tests, where starting Redis is not wanted; use :class:`~.redis.RedisBackend` everywhere else.

It keeps the contract of every backend (leases, reentrancy, fencing tokens, limits, waiters
handed the lock at a release, fair order, listing), on this process's monotonic clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import ClassVar

from ._locmem_entries import CLAIM_SECONDS, Entry, Holder, Waiter
from ._locmem_windows import RateWindows
from ._rate_limits import Admission, Rate, RateLimitInfo
from .base import (
    MIN_HOLD_PREFIX,
    AcquireAllResult,
    AcquireRequest,
    AcquireResult,
    BaseLockBackend,
    Grant,
    LockInfo,
    ReleaseRequest,
    WaiterInfo,
    glob_to_regex,
)

__all__ = ["LocMemBackend"]


class LocMemBackend(BaseLockBackend):
    """Locks in this process's memory; thread-safe, not shared with other processes."""

    options: ClassVar[frozenset[str]] = BaseLockBackend.options

    def __init__(
        self, *, key_prefix: str = "lock", ttl: float = 30.0, max_hold: float | None = None
    ) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl, max_hold=max_hold)
        self._locks: dict[str, Entry] = {}
        self._fences: dict[str, int] = {}
        self._changed = threading.Condition()
        # Asyncio waiters, woken through their own loop when a lock is handed to them.
        self._async_waiters: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._rates = RateWindows()

    @property
    def location(self) -> str:
        """Return where the locks are: this process's memory."""
        return f"the memory of process {os.getpid()}"

    # Bookkeeping (always called with self._changed held) ---------------------------------

    def _entry(self, name: str, now: float) -> Entry:
        entry = self._locks.setdefault(name, Entry())
        for owner in [o for o, h in entry.holders.items() if h.ends <= now]:
            del entry.holders[owner]
        for owner in [o for o, w in entry.queue.items() if w.ends <= now]:
            del entry.queue[owner]
        for owner in [o for o in entry.grants if o not in entry.holders]:
            del entry.grants[owner]  # handed to a waiter that never came for it
        return entry

    @contextlib.contextmanager
    def _opened(self, name: str) -> Iterator[tuple[Entry, float]]:
        # Every primitive: under the condition's lock, on the entry with ended leases and
        # registrations dropped, and the entry removed afterwards if nothing is left in it.
        with self._changed:
            now = time.monotonic()
            entry = self._entry(name, now)
            try:
                yield entry, now
            finally:
                self._tidy(name, entry)

    def _tidy(self, name: str, entry: Entry) -> None:
        if not (entry.holders or entry.queue or entry.grants):
            self._locks.pop(name, None)

    def _hold(self, name: str, entry: Entry, owner: str, lease: float, request: Waiter) -> int:
        token = max(self._fences.get(name, 0) + 1, time.time_ns() // 1000)
        self._fences[name] = token
        now = time.monotonic()
        entry.holders[owner] = Holder(
            now + lease,
            token,
            time.time(),
            request.metadata,
            request.attempt,
            since=now,
            limit=request.limit,
        )
        return token

    def _handoff(self, name: str, entry: Entry, now: float) -> None:
        while entry.queue:
            owner, waiter = next(iter(entry.queue.items()))
            if not entry.admits(waiter.limit):
                return
            del entry.queue[owner]
            lease = min(waiter.lease, CLAIM_SECONDS)
            token = self._hold(name, entry, owner, lease, waiter)
            entry.grants[owner] = Grant(token, lease)
            self._changed.notify_all()
            future = self._async_waiters.get((name, owner))
            if future is not None:
                with contextlib.suppress(RuntimeError):  # its loop closed: nobody to wake
                    future.get_loop().call_soon_threadsafe(_wake, future)

    # The contract ----------------------------------------------------------------------------

    def acquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        with self._opened(name) as (entry, now):
            return self._acquire(name, entry, owner, request, now)

    def _acquire(
        self, name: str, entry: Entry, owner: str, request: AcquireRequest, now: float
    ) -> AcquireResult:
        entry.forget_registration(owner, unless_limit=request.limit)
        # What the owner leaves in the queue, and then on its hold: lease, limit, metadata.
        waiter = Waiter(
            now + request.wait,
            request.ttl,
            request.limit,
            request.metadata,
            request.attempt,
            request.fair,
            entry.queue[owner].since if owner in entry.queue else time.time(),
        )
        holder = entry.holders.get(owner)
        if holder is not None and holder.limit != request.limit and request.holds == 0:
            del entry.holders[owner]  # left by an acquire the owner saw fail: it asks afresh
            holder = None
        if holder is not None and request.limit < holder.limit:
            return AcquireResult(False, stricter=True)
        if holder is not None:
            if request.claim:
                entry.grants.pop(owner, None)
            else:
                holder.holds = holder.holds + 1 if request.holds is None else request.holds + 1
            holder.attempt = request.attempt
            holder.ends = max(holder.ends, now + request.ttl)
            return AcquireResult(True, holder.fencing_token, holder.holds, lease=holder.ends - now)
        if request.holds:
            return AcquireResult(False, lost=True)
        waits = waiter.ends > now
        queued = entry.queued(owner, request)
        if queued:
            if waits:
                entry.queue[owner] = waiter  # re-registering keeps the owner's first place
            self._handoff(name, entry, now)
            if owner in entry.holders:
                entry.grants.pop(owner, None)
                mine = entry.holders[owner]
                mine.ends = now + request.ttl  # the lease asked for, not a grant's
                mine.attempt = request.attempt  # taken by this attempt (as on Redis)
                return AcquireResult(True, mine.fencing_token, 1, lease=request.ttl)
        if entry.admits(request.limit) and not (queued and entry.queue):
            entry.queue.pop(owner, None)
            token = self._hold(name, entry, owner, request.ttl, waiter)
            return AcquireResult(True, token, 1, lease=request.ttl)
        if waits:
            entry.queue[owner] = waiter
        else:
            entry.queue.pop(owner, None)
        ends = [h.ends for h in entry.holders.values()]
        return AcquireResult(False, retry_after=max(0.0, min(ends) - now) if ends else 0.0)

    def acquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        # As the Redis script does: look at every name, then take every one, or none.
        with self._changed:
            now = time.monotonic()
            entries = [self._entry(name, now) for name in names]
            try:
                for name, entry, known in zip(names, entries, holds, strict=True):
                    holder = entry.holders.get(owner)
                    if holder is not None and holder.limit == 1:
                        continue  # a reentrant acquire
                    if holder is not None or known > 0 or (request.fair and entry.queue):
                        return AcquireAllResult()  # settled by each name's own acquire
                    if not entry.admits(1):
                        ends = min(h.ends for h in entry.holders.values())
                        return AcquireAllResult(refused=name, retry_after=max(0.0, ends - now))
                return AcquireAllResult(
                    tuple(
                        self._acquire(name, entry, owner, replace(request, holds=known), now)
                        for name, entry, known in zip(names, entries, holds, strict=True)
                    )
                )
            finally:
                for name, entry in zip(names, entries, strict=True):
                    self._tidy(name, entry)

    def release(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        holds, min_hold = request.holds, request.min_hold
        with self._opened(name) as (entry, now):
            holder = entry.holders.get(owner)
            if holder is None:
                return None
            holder.holds = holder.holds - 1 if holds is None else holds - 1
            if holder.holds > 0:
                return holder.holds
            del entry.holders[owner]
            if holder.since + min_hold > now:  # kept for its window, by nobody (see base.py)
                kept = entry.holders.get(MIN_HOLD_PREFIX + owner)
                holder.ends = max(holder.since + min_hold, kept.ends if kept else 0.0)
                holder.holds = 0
                entry.holders[MIN_HOLD_PREFIX + owner] = holder
            self._handoff(name, entry, now)
            self._changed.notify_all()
            return 0

    def extend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        with self._opened(name) as (entry, now):
            holder = entry.holders.get(owner)
            if holder is None:
                return None
            holder.ends = now + ttl if replace else holder.ends + ttl
            if metadata is not None:
                holder.metadata = metadata
            # (now + ttl) - now can round past ttl: a replaced lease has exactly ttl left.
            return ttl if replace else holder.ends - now

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        with self._opened(name) as (entry, now):
            if owner is None:
                ends = [h.ends for h in entry.holders.values()]
                return max(ends) - now if ends else None
            holder = entry.holders.get(owner)
            return None if holder is None else holder.ends - now

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        deadline = time.monotonic() + min(timeout, self.max_wait)
        with self._changed:
            while True:
                grant = self._take_grant(name, owner)
                if grant is not None:
                    return grant
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining)

    def _take_grant(self, name: str, owner: str) -> Grant | None:
        entry = self._locks.get(name)
        if entry is None or owner not in entry.grants:
            return None
        grant = entry.grants.pop(owner)
        self._tidy(name, entry)
        return grant

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        with self._opened(name) as (entry, now):
            waiter = entry.queue.get(owner)
            if waiter is not None and attempt in ("", waiter.attempt):
                del entry.queue[owner]
            holder = entry.holders.get(owner)
            mine = holder is None or attempt in ("", holder.attempt)
            if mine:
                entry.grants.pop(owner, None)
            if holder is None or holder.holds <= holds or not mine:
                self._handoff(name, entry, now)
                return 0 if holder is None else holder.holds
            if holds > 0:
                holder.holds = holds
                return holds
            del entry.holders[owner]
            self._handoff(name, entry, now)
            self._changed.notify_all()
            return 0

    # The asyncio twins: every primitive but waiting is a short critical section, run
    # directly; waiting is a future that a handoff resolves through the waiter's own loop.

    async def aacquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        return self.acquire(name, owner, request)

    async def aacquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        return self.acquire_all(names, owner, request, holds)

    async def arelease(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        return self.release(name, owner, request)

    async def aextend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        return self.extend(name, owner, ttl, replace=replace, metadata=metadata)

    async def attl(self, name: str, owner: str | None = None) -> float | None:
        return self.ttl(name, owner)

    async def awithdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        return self.withdraw(name, owner, holds, attempt)

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        future = asyncio.get_running_loop().create_future()
        with self._changed:
            grant = self._take_grant(name, owner)
            if grant is not None:
                return grant
            self._async_waiters[name, owner] = future
        try:
            # Not wait_for(): before Python 3.12 it may swallow a cancellation that comes
            # with the wake-up, and the cancelled task would go on holding the lock.
            await asyncio.wait({future}, timeout=min(timeout, self.max_wait))
        finally:
            with self._changed:
                self._async_waiters.pop((name, owner), None)
        with self._changed:
            return self._take_grant(name, owner)

    def force_release(self, name: str, owner: str | None = None) -> int:
        with self._opened(name) as (entry, now):
            owners = list(entry.holders) if owner is None else [owner]
            removed = [one for one in owners if entry.holders.pop(one, None)]
            self._handoff(name, entry, now)
            self._changed.notify_all()
            return len(removed)

    def iter_locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        regex = glob_to_regex(pattern)
        infos: list[LockInfo] = []
        with self._changed:
            now, wall = time.monotonic(), time.time()
            for name in list(self._locks):
                entry = self._entry(name, now)
                if regex.match(name):
                    infos.extend(entry.lock_infos(name, now, wall))
                self._tidy(name, entry)
        yield from infos

    def admit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        with self._changed:
            admission = self._rates.admit(name, rates, cost, _us(time.monotonic()))
            return replace(admission, at=time.time()) if admission.admitted else admission

    def schedule_retry(self, name: str, rate: Rate, not_before: float) -> float:
        with self._changed:
            now = _us(time.monotonic())
            return self._rates.schedule_retry(name, rate, _us(not_before), now) / 1e6

    def iter_rate_limits(self, pattern: str = "*") -> Iterator[RateLimitInfo]:
        with self._changed:
            infos = list(self._rates.infos(pattern, _us(time.monotonic())))
        yield from infos

    def waiters(self, name: str) -> list[WaiterInfo]:
        with self._changed:
            now, wall = time.monotonic(), time.time()
            entry = self._entry(name, now)
            found = entry.waiter_infos(name, now, wall)
            self._tidy(name, entry)
        return found


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
