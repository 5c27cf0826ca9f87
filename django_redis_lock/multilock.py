"""Several locks at once: :func:`lock_all` builds a :class:`MultiLock`; :func:`alock_all`, its
asyncio twin.

The names are taken one by one, in one order for every caller (sorted), so two multi-locks
over overlapping sets never wait for each other for ever; one that cannot take a name in
time gives back those it took before it returns. Both twins drive the one plan of
``_core/multi_steps.py``; each only runs its steps, blocking or awaited. The asyncio twin's
owner is the calling asyncio task, and a task cancelled while acquiring keeps none of the
names. See "Several locks at once" in the docs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import ParamSpec, TypeVar

from ._core.aio import pending_cancels, raise_if_cancelled
from ._core.decorating import held_while_awaited, held_while_called
from ._core.holds import Hold
from ._core.lock_arguments import LockOptions
from ._core.multi import Failures, MultiLockBase
from ._core.multi_steps import AtOnce, MultiStep, Reply, Take
from ._core.steps import adrive, drive
from .exceptions import LockError
from .handler import locks
from .lock import AsyncLock, Lock

__all__ = ["AsyncMultiLock", "MultiLock", "alock_all", "lock_all"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class MultiLock(MultiLockBase[Lock]):
    """The locks ``names``, held together: all of them, or none.

    It takes the keyword arguments of :class:`Lock` but ``limit`` and ``min_hold`` (each name
    is taken as a lock, and one given back must be free at once), applied to every name;
    ``timeout`` bounds the whole acquisition. The names are de-duplicated and sorted, and
    acquired in that order; when one cannot be acquired (the timeout passed, a non-blocking
    try was refused, an error, an interruption) every name already taken is released before
    :meth:`acquire` returns False or the error is raised.

    Losing one name is losing the multi-lock: :attr:`lost` turns true, :meth:`check` raises
    :class:`~django_redis_lock.LockLostError` naming the lost names, ``on_lost(multi_lock)``
    is called once, for the first name lost, and leaving the ``with`` block raises
    ``LockLostError`` (only logged with ``raise_on_lost=False``). Each name is renewed,
    held and reentrant exactly as a :class:`Lock` of that name.
    """

    def _member(self, name: str, options: LockOptions) -> Lock:
        return Lock(name, **options)

    # Acquiring and releasing -----------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire every name, or none; return whether they were acquired.

        ``blocking`` and ``timeout`` mean what they mean to :meth:`Lock.acquire`; the timeout
        bounds the acquisition of all the names together. Whatever was taken is released
        again before False is returned or an error raised.
        """
        arguments = self._members[0]._acquire_arguments(blocking, timeout)
        return self._take(*arguments) is None

    def _take(self, blocking: bool, timeout: float | None, renew: bool) -> str | None:
        """Take every name; return None, or the name that could not be taken (none kept)."""
        # The plan decides; this runs its steps, and throws their errors back in.
        return drive(self._plan(locks[self.using], blocking, timeout, renew), self._run)

    def _run(self, step: MultiStep[Lock]) -> Reply:
        if isinstance(step, AtOnce):
            return step.backend.acquire_all(self.names, step.owner, step.request, step.holds)
        if isinstance(step, Take):
            return step.member._acquire(step.blocking, step.timeout, step.renew)
        step.member.release()
        return None

    def release(self) -> None:
        """Drop one hold of every name; see :meth:`Lock.release`.

        Every name is released even if one of them fails; then :class:`LockNotOwnedError`
        names those the caller did not hold (never acquired, released, or lost), and any
        other error is raised.
        """
        self._raise_failures("release", self._release_failures(self._release_all()))

    def _release_all(self) -> list[tuple[Lock, Hold | None, BaseException | None]]:
        """Drop one hold of every name, last name first; return each member, its hold and
        what its release met.

        The releases go to the backend in one call: one round trip where it can.
        """
        backend = locks[self.using]
        prepared = self._prepared_releases(backend)
        answers = backend.release_many(self._release_requests(prepared))
        done: list[tuple[Lock, Hold | None, BaseException | None]] = []
        for (member, owner, hold), answer in zip(prepared, answers, strict=True):
            try:
                member._answered(owner, hold, answer)
            except LockError as error:
                done.append((member, hold, error))
            else:
                done.append((member, hold, None))
        return done

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the lease of every name (or set it); return the shortest.

        Every name held is extended even if one of them fails; then
        :class:`LockNotOwnedError` names those the caller does not hold (an ended lease is
        never revived), and any other error is raised.
        """
        leases, failures = _each(
            self._members, lambda member: member.extend(seconds, replace=replace)
        )
        self._raise_failures("extend", failures)
        return min(leases)

    def check(self) -> None:
        """Raise :class:`LockLostError` naming each name lost; see :meth:`Lock.check`."""
        lost = self._lost_in(_each(self._members, lambda member: member.check())[1])
        if lost:
            raise self._lost_error(lost)

    # Inspection ------------------------------------------------------------------------------

    def locked(self) -> bool:
        """Return whether any owner holds any of the names."""
        return any(member.locked() for member in self._members)

    def owned(self) -> bool:
        """Return whether the calling owner holds every name."""
        return all(member.owned() for member in self._members)

    def ttl(self) -> float | None:
        """Return the seconds left of the shortest lease of the names; see :meth:`Lock.ttl`.

        Each name's lease is the caller's where it holds the name, else its holder's. None
        means one of the names is not held by anyone.
        """
        return self._shortest([member.ttl() for member in self._members])

    # Context manager -------------------------------------------------------------------------

    def __enter__(self) -> MultiLock:
        refused = self._take(*self._members[0]._block_arguments())
        if refused is not None:
            raise self._not_acquired(refused)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        lost = self._lost_in(self._leave_failures(self._release_all()))
        if lost and exc is None and self.raise_on_lost:
            raise self._lost_error(lost)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``func`` so each call runs while holding every name."""
        return held_while_called(self, func, builder="lock_all")


def _each(members: Iterable[Lock], call: Callable[[Lock], T]) -> tuple[list[T], Failures]:
    """Call ``call`` on every member, whatever each meets; return its results and failures."""
    results: list[T] = []
    failures: Failures = []
    for member in members:
        try:
            results.append(call(member))
        except LockError as error:
            failures.append((member.name, error))
    return results, failures


#: ``lock_all(names, ...)`` builds a :class:`MultiLock`: ``with lock_all([...]):``.
lock_all = MultiLock


class AsyncMultiLock(MultiLockBase[AsyncLock]):
    """The locks ``names`` for asyncio code, held together; see :class:`~.MultiLock`.

    ``await m.acquire()``, ``await m.release()``, ``await m.check()``, ``async with
    alock_all(names):``. ``on_lost`` is called on the holder's event loop; if it returns an
    awaitable, that is run as a task there.
    """

    _builder = "alock_all()"

    def _member(self, name: str, options: LockOptions) -> AsyncLock:
        return AsyncLock(name, **options)

    # Acquiring and releasing -----------------------------------------------------------------

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire every name, or none; see :meth:`.MultiLock.acquire`.

        A task cancelled while acquiring keeps none of the names.
        """
        arguments = self._members[0]._acquire_arguments(blocking, timeout)
        return await self._take(*arguments) is None

    async def _take(self, blocking: bool, timeout: float | None, renew: bool) -> str | None:
        """Take every name; return None, or the name that could not be taken (none kept)."""
        # The plan decides; this runs its steps, and throws their errors back in.
        task = asyncio.current_task()
        cancels = pending_cancels(task)
        steps = self._plan(locks[self.using], blocking, timeout, renew)
        return await adrive(steps, lambda step: self._run(step, task, cancels))

    async def _run(
        self, step: MultiStep[AsyncLock], task: asyncio.Task[object] | None, cancels: int
    ) -> Reply:
        if isinstance(step, AtOnce):
            try:
                reply = await step.backend.aacquire_all(
                    self.names, step.owner, step.request, step.holds
                )
            except LockError:
                raise_if_cancelled(task, cancels)  # a time-out standing for a cancellation
                raise
            raise_if_cancelled(task, cancels)  # a cancellation the client swallowed
            return reply
        if isinstance(step, Take):
            return await step.member._acquire(step.blocking, step.timeout, step.renew)
        await step.member.release()  # finished even if the task is cancelled meanwhile
        return None

    async def release(self) -> None:
        """Drop one hold of every name; see :meth:`.MultiLock.release`."""
        self._raise_failures("release", self._release_failures(await self._release_all()))

    async def _release_all(self) -> list[tuple[AsyncLock, Hold | None, BaseException | None]]:
        """Do what :meth:`.MultiLock._release_all` does, awaited.

        A task cancelled meanwhile finishes every name's release all the same (as an
        AsyncLock does its own), and each name's entry carries the cancellation.
        """
        backend = locks[self.using]
        prepared = self._prepared_releases(backend)
        cancelled: asyncio.CancelledError | None = None
        try:
            answers = await backend.arelease_many(self._release_requests(prepared))
        except asyncio.CancelledError as error:
            cancelled, answers = error, [None] * len(prepared)
        done: list[tuple[AsyncLock, Hold | None, BaseException | None]] = []
        for (member, owner, hold), answer in zip(prepared, answers, strict=True):
            try:
                if cancelled is None:
                    member._answered(owner, hold, answer)
                elif hold is not None:
                    await member._finish_release(backend, owner, hold)
            except LockError as error:
                done.append((member, hold, error))
            else:
                done.append((member, hold, cancelled))
        return done

    async def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Extend the lease of every name; return the shortest. See :meth:`.MultiLock.extend`."""
        leases, failures = await _aeach(
            self._members, lambda member: member.extend(seconds, replace=replace)
        )
        self._raise_failures("extend", failures)
        return min(leases)

    async def check(self) -> None:
        """Raise :class:`LockLostError` naming every name lost; see :meth:`.MultiLock.check`."""
        lost = self._lost_in((await _aeach(self._members, lambda member: member.check()))[1])
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
        lost = self._lost_in(self._leave_failures(await self._release_all()))
        if lost and exc is None and self.raise_on_lost:
            raise self._lost_error(lost)

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """Decorate the coroutine function ``func`` so each call runs holding every name."""
        return held_while_awaited(self, func, builder="lock_all")


async def _aeach(
    members: Iterable[AsyncLock], call: Callable[[AsyncLock], Awaitable[T]]
) -> tuple[list[T], Failures]:
    """Await ``call`` on every member, whatever each meets (a cancellation too); see _each."""
    results: list[T] = []
    failures: Failures = []
    for member in members:
        try:
            results.append(await call(member))
        except (LockError, asyncio.CancelledError) as error:  # the others still go
            failures.append((member.name, error))
    return results, failures


#: ``alock_all(names, ...)`` builds an :class:`AsyncMultiLock`: ``async with alock_all([...]):``.
alock_all = AsyncMultiLock
