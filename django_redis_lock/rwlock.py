"""Read-write locks: :func:`rwlock` returns a :class:`ReadWriteLock`, :func:`arwlock` its twin.

Both sides are plain lock handles over one name, told apart by their ``limit``: a writer takes
the lock alone (``limit=1``), readers share it with readers only (an unbounded limit). Every
promise of :class:`~django_redis_lock.Lock` holds for each side: leases and their renewal,
loss reporting, handoff to waiters, fair order, reentrancy. See "Read-write locks" in the docs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ._core.lock_arguments import LockOptions, accept_options
from .backends.base import SHARED
from .lock import AsyncLock, Lock

if TYPE_CHECKING:
    from typing_extensions import Unpack

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
    _builder: ClassVar[str]

    def __init__(self, name: str, **options: Unpack[LockOptions]) -> None:
        accept_options(options, caller=self._builder, lock_name=name)
        reader, writer = self._sides
        self._reader: H = reader(name, limit=SHARED, **options)
        self._writer: H = writer(name, limit=1, **options)
        self.name, self.using = self._reader.name, self._reader.using

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

    It takes the keyword arguments of :class:`~django_redis_lock.Lock` but ``limit`` and
    ``min_hold``, which are not its to give (its sides set their own limits);
    :meth:`read` and :meth:`write` return its two sides, each a :class:`~django_redis_lock.Lock`
    on ``name``. Fencing tokens come from one sequence per name, shared by both sides, so a
    resource can refuse a writer older than the last reader it served, and the reverse.
    """

    _sides = (_ReadLock, _WriteLock)
    _builder = "rwlock()"


class AsyncReadWriteLock(_ReadWrite[AsyncLock]):
    """The read-write lock for asyncio code: its sides are :class:`~.AsyncLock` handles.

    See :class:`ReadWriteLock`; each asyncio task is its own owner.
    """

    _sides = (_AsyncReadLock, _AsyncWriteLock)
    _builder = "arwlock()"


#: ``rwlock(name, ...)`` builds a :class:`ReadWriteLock`.
rwlock = ReadWriteLock

#: ``arwlock(name, ...)`` builds an :class:`AsyncReadWriteLock`.
arwlock = AsyncReadWriteLock
