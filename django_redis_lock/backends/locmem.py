"""An in-process lock backend for tests of code that uses locks.

**It is not distributed.** Locks live in the memory of one Python process: two processes (two
web workers, a web process and a Celery worker) never see each other's locks. Use it in unit
tests, where starting Redis is not wanted; use :class:`~.redis.RedisBackend` everywhere else.

It keeps the contract of every backend (leases, reentrancy, fencing tokens, limits, listing),
and a release wakes waiters at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from .base import AcquireResult, BaseLockBackend, LockInfo, glob_to_regex

__all__ = ["LocMemBackend"]


@dataclass
class _Holder:
    ends: float
    fencing_token: int
    acquired_at: float
    metadata: str
    holds: int = 1


@dataclass
class _Entry:
    holders: dict[str, _Holder] = field(default_factory=dict)


class LocMemBackend(BaseLockBackend):
    """Locks in this process's memory; thread-safe, not shared with other processes."""

    options: ClassVar[frozenset[str]] = BaseLockBackend.options

    def __init__(self, *, key_prefix: str = "lock", ttl: float = 30.0) -> None:
        super().__init__(key_prefix=key_prefix, ttl=ttl)
        self._locks: dict[str, _Entry] = {}
        self._fences: dict[str, int] = {}
        self._changed = threading.Condition()

    def _live(self, name: str, now: float) -> _Entry | None:
        entry = self._locks.get(name)
        if entry is None:
            return None
        for owner in [o for o, h in entry.holders.items() if h.ends <= now]:
            del entry.holders[owner]
        if not entry.holders:
            del self._locks[name]
            return None
        return entry

    def acquire(
        self, name: str, owner: str, *, ttl: float, limit: int = 1, metadata: str
    ) -> AcquireResult:
        with self._changed:
            now = time.monotonic()
            entry = self._live(name, now) or self._locks.setdefault(name, _Entry())
            holder = entry.holders.get(owner)
            if holder is not None:
                holder.holds += 1
                holder.ends = max(holder.ends, now + ttl)
                return AcquireResult(True, fencing_token=holder.fencing_token, holds=holder.holds)
            if len(entry.holders) >= limit:
                earliest = min(h.ends for h in entry.holders.values())
                return AcquireResult(False, retry_after=earliest - now)
            token = max(self._fences.get(name, 0) + 1, time.time_ns() // 1000)
            self._fences[name] = token
            entry.holders[owner] = _Holder(now + ttl, token, time.time(), metadata)
            return AcquireResult(True, fencing_token=token, holds=1)

    def release(self, name: str, owner: str) -> int | None:
        with self._changed:
            entry = self._live(name, time.monotonic())
            holder = entry.holders.get(owner) if entry else None
            if entry is None or holder is None:
                return None
            holder.holds -= 1
            if holder.holds > 0:
                return holder.holds
            self._drop(name, entry, owner)
            return 0

    def _drop(self, name: str, entry: _Entry, owner: str) -> None:
        del entry.holders[owner]
        if not entry.holders:
            del self._locks[name]
        self._changed.notify_all()

    def extend(self, name: str, owner: str, ttl: float, *, replace: bool = False) -> float | None:
        with self._changed:
            now = time.monotonic()
            entry = self._live(name, now)
            holder = entry.holders.get(owner) if entry else None
            if holder is None:
                return None
            holder.ends = now + ttl if replace else holder.ends + ttl
            return holder.ends - now

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        with self._changed:
            now = time.monotonic()
            entry = self._live(name, now)
            if entry is None:
                return None
            if owner is None:
                return max(h.ends for h in entry.holders.values()) - now
            holder = entry.holders.get(owner)
            return None if holder is None else holder.ends - now

    def wait(self, name: str, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def force_release(self, name: str, owner: str | None = None) -> int:
        with self._changed:
            entry = self._live(name, time.monotonic())
            if entry is None:
                return 0
            owners = list(entry.holders) if owner is None else [owner]
            removed = 0
            for one in owners:
                if one in entry.holders:
                    self._drop(name, entry, one)
                    removed += 1
            return removed

    def iter_locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        regex = glob_to_regex(pattern)
        infos: list[LockInfo] = []
        with self._changed:
            now, wall = time.monotonic(), time.time()
            for name in list(self._locks):
                entry = self._live(name, now)
                if entry is None or not regex.match(name):
                    continue
                infos.extend(
                    LockInfo.from_record(
                        name=name,
                        owner=owner,
                        holds=h.holds,
                        ttl=h.ends - now,
                        fencing_token=h.fencing_token,
                        acquired_at=h.acquired_at,
                        now=wall,
                        metadata=h.metadata,
                    )
                    for owner, h in entry.holders.items()
                )
        yield from infos
