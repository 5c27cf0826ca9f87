"""What a listing says of a lock: its holders (:class:`LockInfo`) and its waiters."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .._core.owner import MIN_HOLD_PREFIX
from ._holder import parse_holder_metadata

__all__ = ["LockInfo", "WaiterInfo"]


@dataclass(frozen=True)
class LockInfo:
    """One holder of one lock, as listed by :meth:`~.base.BaseLockBackend.iter_locks`.

    A lock with ``limit`` > 1 (a semaphore) yields one ``LockInfo`` per holder. Durations
    are measured on the backend's clock, so clock skew between machines does not matter.
    ``host``, ``pid`` and ``thread`` say where the holder runs; ``metadata`` is the dict the
    holder passed to :func:`~django_redis_lock.lock`. ``mode`` is ``"read"`` or ``"write"``
    for a holder of a read-write lock (:func:`~django_redis_lock.rwlock`), else None.

    A hold kept after its release until its ``min_hold`` window ends is held by nobody: its
    ``owner`` is :data:`MIN_HOLD_PREFIX` and the token of the owner that released it, which
    ``min_hold_of`` gives, and its ``ttl`` is what is left of the window.
    """

    name: str
    owner: str
    holds: int
    ttl: float
    fencing_token: int
    acquired_at: dt.datetime
    held_for: float
    host: str | None = None
    pid: int | None = None
    thread: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    min_hold_of: str | None = None
    mode: str | None = None
    #: How many owners wait for the lock (live registrations), as ``waiters()`` lists them.
    waiting: int = 0

    @classmethod
    def from_record(
        cls,
        *,
        name: str,
        owner: str,
        holds: int,
        ttl: float,
        fencing_token: int,
        acquired_at: float,
        now: float,
        metadata: str | bytes,
        waiting: int = 0,
    ) -> LockInfo:
        """Build a LockInfo from stored values (times in seconds since the epoch)."""
        return cls(
            name=name,
            owner=owner,
            holds=holds,
            ttl=ttl,
            fencing_token=fencing_token,
            acquired_at=dt.datetime.fromtimestamp(acquired_at, tz=dt.timezone.utc),
            held_for=max(0.0, now - acquired_at),
            **_holder_details(metadata),
            min_hold_of=owner.removeprefix(MIN_HOLD_PREFIX)
            if owner.startswith(MIN_HOLD_PREFIX)
            else None,
            waiting=waiting,
        )


T = TypeVar("T")


def _typed(value: object, kind: type[T]) -> T | None:
    return value if isinstance(value, kind) else None


def _holder_details(metadata: str | bytes) -> dict[str, Any]:
    """Return the host, pid, thread and user metadata recorded by a holder or a waiter."""
    holder = parse_holder_metadata(metadata)
    data = holder.get("data")
    return {
        "host": _typed(holder.get("host"), str),
        "pid": _typed(holder.get("pid"), int),
        "thread": _typed(holder.get("thread"), str),
        "metadata": data if isinstance(data, dict) else {},
        "mode": holder.get("mode") if holder.get("mode") in ("read", "write") else None,
    }


@dataclass(frozen=True)
class WaiterInfo:
    """One owner waiting for a lock, as listed by :meth:`~.base.BaseLockBackend.waiters`.

    ``position`` is its place in the queue (0: ``next``, the owner a release hands the lock
    to first); ``fair`` says whether it asked for strict FIFO order (None: the backend does not
    know). ``waiting_since`` is when it joined the queue, ``waited_for`` the seconds since, and
    ``expires_in`` the seconds its registration has left: a waiter that dies or gives up drops
    out of the queue when its registration ends, if it did not leave it before. ``host``,
    ``pid``, ``thread`` and ``metadata`` are the holder details it registered, as
    :class:`LockInfo` has them (a Celery task's id is in ``metadata``), and so is ``mode``.
    """

    name: str
    owner: str
    position: int
    fair: bool | None
    waiting_since: dt.datetime
    waited_for: float
    expires_in: float
    host: str | None = None
    pid: int | None = None
    thread: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    mode: str | None = None

    @property
    def next(self) -> bool:
        """Return whether this owner is the first a release hands the lock to."""
        return self.position == 0

    @classmethod
    def from_record(
        cls,
        *,
        name: str,
        owner: str,
        position: int,
        fair: bool | None,
        since: float,
        ends: float,
        now: float,
        metadata: str | bytes,
    ) -> WaiterInfo:
        """Build a WaiterInfo from stored values (times in seconds since the epoch)."""
        return cls(
            name=name,
            owner=owner,
            position=position,
            fair=fair,
            waiting_since=dt.datetime.fromtimestamp(since, tz=dt.timezone.utc),
            waited_for=max(0.0, now - since),
            expires_in=max(0.0, ends - now),
            **_holder_details(metadata),
        )
