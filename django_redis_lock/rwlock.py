"""Read-write locks: :func:`rwlock` returns a :class:`ReadWriteLock`, :func:`arwlock` its twin.

Both sides are plain lock handles over one name, told apart by their ``limit``: a writer takes
the lock alone (``limit=1``), readers share it with readers only (an unbounded limit). Every
promise of :class:`~django_redis_lock.Lock` holds for each side: leases and their renewal,
loss reporting, handoff to waiters, fair order, reentrancy. See "Read-write locks" in the docs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from ._core.validation import refuse_limit_and_min_hold
from .backends.base import SHARED
from .conf import DEFAULT_ALIAS
from .lock import AsyncLock, Lock

__all__ = ["AsyncReadWriteLock", "ReadWriteLock", "arwlock", "rwlock"]

H = TypeVar("H", Lock, AsyncLock)


class _ReadLock(Lock):
    mode = "read"


class _WriteLock(Lock):
    mode = "write"


class _AsyncReadLock(AsyncLock):
    mode = "read"


class _AsyncWriteLock(AsyncLock):
    mode = "write"


class _ReadWrite(Generic[H]):
    """The two sides of a read-write lock, built once with the arguments they share."""

    _sides: ClassVar[tuple[type[Any], type[Any]]]

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,
        using: str = DEFAULT_ALIAS,
        metadata: dict[str, Any] | None = None,
        limit: int = 1,
        fair: bool = False,
        auto_renew: bool | None = None,
        max_hold: float | None = None,
        min_hold: float = 0.0,
        on_lost: Callable[[Any], object] | None = None,
        raise_on_lost: bool = True,
        owner: str | None = None,
    ) -> None:
        refuse_limit_and_min_hold(
            limit,
            min_hold,
            caller="rwlock()",
            why_limit="its sides set their own (a writer holds alone, readers share the lock "
            "with readers)",
            why_min_hold="it keeps a lock, not a side of a read-write lock, held for a "
            "minimum time",
            lock_name=name,
        )
        arguments: dict[str, Any] = {
            "ttl": ttl,
            "blocking": blocking,
            "timeout": timeout,
            "using": using,
            "metadata": metadata,
            "fair": fair,
            "auto_renew": auto_renew,
            "max_hold": max_hold,
            "on_lost": on_lost,
            "raise_on_lost": raise_on_lost,
            "owner": owner,
        }
        reader, writer = self._sides
        self._reader: H = reader(name, limit=SHARED, **arguments)
        self._writer: H = writer(name, limit=1, **arguments)
        self.name, self.using = self._reader.name, using

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} using={self.using!r}>"

    def read(self) -> H:
        """Return the read side: held by many owners at once, never beside a writer.

        The same handle every time, so ``@rw.read()`` decorates and ``with rw.read():``
        holds. While a writer waits, new readers queue behind it (writers never starve).
        """
        return self._reader

    def write(self) -> H:
        """Return the write side: held by one owner, with no reader beside it.

        An owner that holds the write side may also read (a nested read counts as another
        hold of its write hold); an owner that holds the read side cannot write until it
        releases it: :class:`~django_redis_lock.LockUpgradeError`.
        """
        return self._writer


class ReadWriteLock(_ReadWrite[Lock]):
    """A read-write lock named ``name``: many readers at once, or one writer.

    It takes the arguments of :class:`~django_redis_lock.Lock` but ``limit`` and ``min_hold``
    (refused with :class:`~django_redis_lock.InvalidLockArgumentError`);
    :meth:`read` and :meth:`write` return its two sides, each a :class:`~django_redis_lock.Lock`
    on ``name``. Fencing tokens come from one sequence per name, shared by both sides, so a
    resource can refuse a writer older than the last reader it served, and the reverse.
    """

    _sides = (_ReadLock, _WriteLock)


class AsyncReadWriteLock(_ReadWrite[AsyncLock]):
    """The read-write lock for asyncio code: its sides are :class:`~.AsyncLock` handles.

    See :class:`ReadWriteLock`; each asyncio task is its own owner.
    """

    _sides = (_AsyncReadLock, _AsyncWriteLock)


#: ``rwlock(name, ...)`` builds a :class:`ReadWriteLock`.
rwlock = ReadWriteLock

#: ``arwlock(name, ...)`` builds an :class:`AsyncReadWriteLock`.
arwlock = AsyncReadWriteLock
