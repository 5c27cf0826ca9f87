"""Several locks at once in asyncio code: :func:`alock_all` returns an :class:`AsyncMultiLock`.

The twin of :mod:`django_redis_lock.multilock`, as :class:`~django_redis_lock.AsyncLock` is
of :class:`~django_redis_lock.Lock`: the same names, order and rules, awaited; the owner is
the calling asyncio task, and a task cancelled while acquiring keeps none of the names.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from ._core.aio import pending_cancels as _cancels
from ._core.aio import raise_if_cancelled as _raise_if_cancelled
from ._core.multi import MultiLockBase
from .exceptions import LockArgumentTypeError, LockError, LockLostError, LockNotOwnedError
from .handler import locks
from .lock import AsyncLock

__all__ = ["AsyncMultiLock", "alock_all"]

P = ParamSpec("P")
R = TypeVar("R")


class AsyncMultiLock(MultiLockBase[AsyncLock]):
    """The locks ``names`` for asyncio code, held together; see :class:`~.MultiLock`.

    ``await m.acquire()``, ``await m.release()``, ``await m.check()``, ``async with
    alock_all(names):``. ``on_lost`` is called on the holder's event loop; if it returns an
    awaitable, that is run as a task there.
    """

    def _member(self, name: str, **arguments: Any) -> AsyncLock:
        return AsyncLock(name, **arguments)

    # Acquiring and releasing -----------------------------------------------------------------

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire every name, or none; see :meth:`.MultiLock.acquire`.

        A task cancelled while acquiring keeps none of the names.
        """
        arguments = self._members[0]._acquire_arguments(blocking, timeout)
        return await self._take(*arguments) is None

    async def _take(self, blocking: bool, timeout: float | None, renew: bool) -> str | None:
        """Take every name; return None, or the name that could not be taken (none kept)."""
        deadline = self._deadline(timeout)
        outcome = await self._take_at_once(blocking, renew)
        if outcome is True:
            self._bind()
            return None
        if outcome is not None and not blocking:
            return outcome
        while True:
            taken: list[AsyncLock] = []
            try:
                for member in self._members:
                    left = self._left(deadline) if blocking else None
                    if not await member._acquire(blocking, left, renew):
                        await self._give_back(taken)
                        return member.name
                    taken.append(member)
                acquisition = self._bind()
            except BaseException:
                await self._give_back(taken)
                raise
            ended = self._ended()
            if ended is None:
                return None
            self._unbind(acquisition)
            await self._give_back(taken)  # and start again, if there is time left
            if not blocking or self._left(deadline) == 0:
                return ended

    async def _take_at_once(self, blocking: bool, renew: bool) -> Literal[True] | str | None:
        """Try to take every name in one step; see :meth:`MultiLockBase._took_at_once`."""
        backend = locks[self.using]
        once = self._at_once(backend)
        if once is None:
            return None
        task = asyncio.current_task()
        cancels = _cancels(task)
        try:
            try:
                result = await backend.aacquire_all(
                    self.names, once.owner, once.request, once.holds
                )
            except LockError:
                _raise_if_cancelled(task, cancels)  # a time-out standing for a cancellation
                raise
            _raise_if_cancelled(task, cancels)  # a cancellation the client swallowed
        except BaseException:
            self._withdraw_at_once(once)  # no answer (or cancelled): undone later
            raise
        return self._took_at_once(once, result, blocking, renew)

    async def _give_back(self, taken: list[AsyncLock]) -> None:
        """Release what an acquisition that failed took, last first, even when cancelled."""
        cancelled: asyncio.CancelledError | None = None
        for member in reversed(taken):
            try:
                await member.release()
            except LockError as error:  # a lease already ended, or the backend is away
                self._rollback_failed(member.name, error)
            except asyncio.CancelledError as error:  # the release was finished all the same
                cancelled = error
        if cancelled is not None:
            raise cancelled

    async def release(self) -> None:
        """Drop one hold of every name; see :meth:`.MultiLock.release`."""
        not_owned: list[str] = []
        errors: list[BaseException] = []
        for member in reversed(self._members):
            try:
                await member.release()
            except LockNotOwnedError:
                not_owned.append(member.name)
            except (LockError, asyncio.CancelledError) as error:  # the others still go
                errors.append(error)
        _raise_cancelled(errors)
        self._raise_failures("release", not_owned, errors)

    async def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Extend the lease of every name; return the shortest. See :meth:`.MultiLock.extend`."""
        not_owned: list[str] = []
        errors: list[BaseException] = []
        leases: list[float] = []
        for member in self._members:
            try:
                leases.append(await member.extend(seconds, replace=replace))
            except LockNotOwnedError:
                not_owned.append(member.name)
            except (LockError, asyncio.CancelledError) as error:  # the others still go
                errors.append(error)
        _raise_cancelled(errors)
        self._raise_failures("extend", not_owned, errors)
        return min(leases)

    async def check(self) -> None:
        """Raise :class:`LockLostError` naming every name lost; see :meth:`.MultiLock.check`."""
        lost: list[str] = []
        for member in self._members:
            try:
                await member.check()
            except LockLostError:
                lost.append(member.name)
        if lost:
            raise self._lost_error(lost)

    # Inspection ------------------------------------------------------------------------------

    async def locked(self) -> bool:
        """Return whether any owner holds any of the names."""
        return any([await member.locked() for member in self._members])

    async def owned(self) -> bool:
        """Return whether the calling task holds every name."""
        return all([await member.owned() for member in self._members])

    async def ttl(self) -> float | None:
        """Return the seconds left of the shortest lease of the names; see MultiLock.ttl."""
        return self._shortest([await member.ttl() for member in self._members])

    # Context manager -------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncMultiLock:
        refused = await self._take(*self._members[0]._block_arguments())
        if refused is not None:
            raise self._not_acquired(refused)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        lost: list[str] = []
        errors: list[BaseException] = []
        for member in reversed(self._members):
            try:
                await member._leave()
            except LockLostError:
                lost.append(member.name)
            except (LockError, asyncio.CancelledError) as error:  # the others still go
                errors.append(error)
        _raise_cancelled(errors)
        if errors:
            raise errors[0]
        if lost and exc is None and self.raise_on_lost:
            raise self._lost_error(sorted(lost))

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """Decorate the coroutine function ``func`` so each call runs holding every name."""
        if not inspect.iscoroutinefunction(func):
            raise LockArgumentTypeError(
                f"alock_all() decorates coroutine functions; {func!r} is not one. Use "
                "lock_all() for plain functions."
            )

        @functools.wraps(func)
        async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
            async with self:
                return await func(*args, **kwargs)

        return locked_call


def _raise_cancelled(errors: list[BaseException]) -> None:
    """Raise the cancellation among ``errors``, once every name has been seen to."""
    for error in errors:
        if isinstance(error, asyncio.CancelledError):
            raise error


#: ``alock_all(names, ...)`` builds an :class:`AsyncMultiLock`: ``async with alock_all([...]):``.
alock_all = AsyncMultiLock
