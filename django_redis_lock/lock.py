"""The lock a user holds: :func:`lock` builds a :class:`Lock`; :func:`alock`, its asyncio twin.

A lock is a cheap handle over a backend. It can be created at import time (as a decorator,
say): it reads settings only when first used. One handle may be shared by threads: each
thread is its own owner, with its own hold count and fencing token. The asyncio twin keeps
every promise of ``Lock`` on the same backends, keys and scripts, so blocking and asyncio
code exclude each other on one name; its owner is the running asyncio *task*. Both drive the
one acquire loop of ``_core/handle.py``; each only sends its steps, blocking or awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

from ._core.aio import finish, on_holders_loop, pending_cancels, raise_if_cancelled
from ._core.decorating import held_while_awaited, held_while_called
from ._core.handle import LockHandle, Step, WaitThenClaim, Withdraw
from ._core.holds import Hold
from ._core.owner import TASKS, current_owner
from ._core.steps import adrive, drive
from ._core.validation import validate_ttl
from .backends.base import AcquireRequest, AcquireResult, BaseLockBackend
from .exceptions import (
    BackendUnavailableError,
    LockError,
    LockNotOwnedError,
)
from .handler import locks

__all__ = ["AsyncLock", "Lock", "alock", "current_owner", "lock"]

P = ParamSpec("P")
R = TypeVar("R")


class Lock(LockHandle):
    """A distributed, reentrant, fenced lock named ``name``, on the backend ``using``.

    Use it as a context manager, a decorator, or through :meth:`acquire` and :meth:`release`,
    as you would :class:`threading.RLock`; :func:`lock` is the same class, by the name that
    reads well in ``with lock("reports:daily"):``.

    ``ttl`` is the lease in seconds (default: the backend's ``ttl`` option): a holder that
    dies frees the lock when it ends. ``timeout`` bounds a blocking acquire (None: wait for
    ever). ``metadata`` is a JSON-serialisable dict shown to anyone listing held locks.

    ``limit`` lets that many owners hold the lock at once (a counting semaphore). ``fair``
    serves waiters strictly in arrival order. ``auto_renew`` renews the lease every third of
    it while the lock is held (default: on for ``with`` blocks and decorators, off for
    :meth:`~Lock.acquire`), for at most ``max_hold`` seconds (default: the backend's
    ``max_hold`` option, else no bound). A thread that ends holding a renewed lock loses it:
    renewal releases it for the thread. When a hold is lost, ``on_lost(lock)`` is called, and
    leaving the ``with`` block raises :class:`~django_redis_lock.LockLostError` (only logged
    with ``raise_on_lost=False``).

    ``min_hold`` keeps the lock held until at least that many seconds after it was acquired,
    even when the body finishes sooner: the last release within that window leaves the lock
    held, by nobody, until the window ends (see "Holding for a minimum time" in the docs).

    ``owner`` replaces the calling thread as the owner with a token of your own (a job's id,
    say): every thread using the handle is then that one owner, and anyone who knows the
    token can release what it holds (as a Celery worker does for a task whose process died).
    """

    # Acquiring and releasing -----------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire the lock; return whether it was acquired.

        Blocking (the default) waits until the lock is free, or at most ``timeout`` seconds
        (``None``: the handle's timeout, which defaults to waiting for ever). With
        ``blocking=False`` one attempt is made. An owner that already holds the lock
        acquires it again at once (reentrancy); release it as many times.

        A waiting owner is handed the lock by the release that frees it, at once, and claims
        it (the claim goes with its wait), so it returns with the lease it asked for. The lease is
        renewed only with ``auto_renew=True`` (``with`` blocks and decorators renew unless
        ``auto_renew=False``). A reentrant acquire whose lease has ended raises
        :class:`LockLostError`. If the backend does not answer in time,
        :class:`~django_redis_lock.BackendUnavailableError` is raised, and whatever the
        attempt may still do on the server is withdrawn once it answers again.
        """
        return self._acquire(*self._acquire_arguments(blocking, timeout))

    def _acquire(self, blocking: bool, timeout: float | None, renew: bool) -> bool:
        # The loop decides; this sends its calls, and throws their errors back in.
        backend, owner = locks[self.using], self._owner_token()
        steps = self._steps(backend, owner, blocking, timeout, renew=renew)
        return drive(steps, lambda call: self._call(backend, owner, call))

    def _call(self, backend: BaseLockBackend, owner: str, call: Step) -> AcquireResult | None:
        if isinstance(call, AcquireRequest):
            return backend.acquire(self.name, owner, call)
        if isinstance(call, WaitThenClaim):
            return backend.wait_and_claim(self.name, owner, call.seconds, call.request)
        backend.withdraw(self.name, owner, call.holds, call.attempt)
        return None

    def release(self) -> None:
        """Drop one hold of the calling owner; the lock is free when its last hold is dropped.

        A freed lock is handed to the owner that has waited longest, if any; with
        ``min_hold``, a last release sooner than that after the acquire keeps the lock held
        until the window ends, and hands it to nobody. Raises
        :class:`LockNotOwnedError` if the caller holds nothing: it never acquired, it
        already released, or its lease ended (and another owner may hold the lock now).
        """
        backend, owner = locks[self.using], self._owner_token()
        self._release(backend, owner, self._before_release(backend, owner))

    def _release(self, backend: BaseLockBackend, owner: str, hold: Hold | None) -> None:
        try:
            answer: int | LockError | None = backend.release(
                self.name, owner, self._release_request(hold)
            )
        except LockError as error:
            answer = error
        self._answered(owner, hold, answer)

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the caller's lease (or, with ``replace``, set it); return it.

        Raises :class:`LockNotOwnedError` if the caller does not hold the lock, which
        includes a lease that already ended: an ended lease is never revived.
        """
        seconds = validate_ttl(seconds, argument="seconds", lock_name=self.name)
        owner = self._owner_token()
        return self._extended(self.backend.extend(self.name, owner, seconds, replace=replace))

    def check(self) -> None:
        """Raise :class:`LockLostError` if the caller's hold is lost; for long work.

        With renewal, this reads what the renewal thread found (no round trip); without,
        it asks the backend.
        """
        hold, ask = self._hold_to_check()
        self._checked(hold, not ask or self.backend.ttl(self.name, hold.owner) is not None)

    # Inspection ------------------------------------------------------------------------------

    def locked(self) -> bool:
        """Return whether any owner holds the lock."""
        return self.backend.locked(self.name)

    def owned(self) -> bool:
        """Return whether the calling owner holds the lock."""
        return self.backend.ttl(self.name, self._owner_token()) is not None

    def ttl(self) -> float | None:
        """Return the seconds left of the caller's lease (else of the current holder's).

        None means nobody holds the lock.
        """
        backend = self.backend
        remaining = backend.ttl(self.name, self._owner_token())
        return backend.ttl(self.name) if remaining is None else remaining

    # Context manager and decorator -----------------------------------------------------------

    def _enter(self) -> Lock:
        """Acquire as entering a ``with`` block does: renewed, or LockNotAcquiredError.

        For integrations that hold the lock across calls a ``with`` block cannot span.
        """
        if not self._acquire(*self._block_arguments()):
            raise self._not_acquired()
        return self

    __enter__ = _enter

    def _leave(self, exc: BaseException | None = None) -> None:
        """Release as leaving a ``with`` block does, ``exc`` being the block's own error.

        Raises LockLostError if the hold was lost and the block raised nothing.
        """
        backend, owner = locks[self.using], self._owner_token()
        hold = self._before_release(backend, owner)
        with contextlib.suppress(LockNotOwnedError):  # reported as lost by the release
            self._release(backend, owner, hold)
        self._left(hold, exc)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._leave(exc)

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``func`` so each call runs while holding this lock."""
        return held_while_called(self, func, builder="lock", lock_name=self.name)


#: ``lock(name, ...)`` builds a :class:`Lock`: the name reads well in ``with lock(...):``.
lock = Lock


class AsyncLock(LockHandle):
    """A distributed, reentrant, fenced lock for asyncio code; see :class:`~.Lock`.

    It takes the same arguments and behaves the same, with ``await`` before what may wait on
    the backend: ``await l.acquire()``, ``await l.release()``, ``await l.extend(5)``,
    ``async with alock(name):``, and ``@alock(name)`` on a coroutine function. The owner is
    the calling asyncio task (or the ``owner`` token given); tasks that share one handle are
    still different owners. Renewal runs in the process's renewal thread, so a busy event
    loop does not lose its leases; it stops when the holding task ends or its event loop
    closes, and the lease then runs out. ``on_lost`` is called on the holder's event loop; if
    it returns an awaitable, that is run as a task there. A task cancelled while it waits
    leaves nothing behind.
    """

    _owners = TASKS

    def _on_lost_callback(self) -> Callable[[], None] | None:
        # Called from the renewal thread: the callback runs on the holder's own loop.
        on_lost = self.on_lost
        return None if on_lost is None else on_holders_loop(self.name, lambda: on_lost(self))

    # Acquiring and releasing -----------------------------------------------------------------

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire the lock; return whether it was acquired. See :meth:`.Lock.acquire`.

        A task cancelled while acquiring leaves no trace: it leaves the queue of waiters, and
        a lock handed to it meanwhile is released to the next one.
        """
        return await self._acquire(*self._acquire_arguments(blocking, timeout))

    async def _acquire(self, blocking: bool, timeout: float | None, renew: bool) -> bool:
        # The loop decides; this sends its calls, and throws their errors back in.
        backend, owner = locks[self.using], self._owner_token()
        steps = self._steps(backend, owner, blocking, timeout, renew=renew)
        task = asyncio.current_task()
        cancels = pending_cancels(task)

        def call(step: Step) -> Awaitable[AcquireResult | None]:
            return self._call(backend, owner, step, task, cancels)

        try:
            return await adrive(steps, call)
        except BackendUnavailableError:
            raise_if_cancelled(task, cancels)  # the client's time-out stood for a cancellation
            raise

    async def _call(
        self,
        backend: BaseLockBackend,
        owner: str,
        call: Step,
        task: asyncio.Task[object] | None,
        cancels: int,
    ) -> AcquireResult | None:
        if isinstance(call, Withdraw):
            # Seen to its end even if the task is cancelled again meanwhile.
            await finish(backend.awithdraw(self.name, owner, call.holds, call.attempt))
            return None
        if isinstance(call, AcquireRequest):
            reply = await backend.aacquire(self.name, owner, call)
        else:
            reply = await backend.await_and_claim(self.name, owner, call.seconds, call.request)
        raise_if_cancelled(task, cancels)
        return reply

    async def release(self) -> None:
        """Drop one hold of the calling task; see :meth:`.Lock.release`."""
        backend, owner = locks[self.using], self._owner_token()
        await self._release(backend, owner, self._before_release(backend, owner))

    async def _release(self, backend: BaseLockBackend, owner: str, hold: Hold | None) -> None:
        try:
            answer: int | LockError | None = await backend.arelease(
                self.name, owner, self._release_request(hold)
            )
        except asyncio.CancelledError:
            if hold is not None:
                await self._finish_release(backend, owner, hold)
            raise
        except LockError as error:
            answer = error
        self._answered(owner, hold, answer)

    async def _finish_release(self, backend: BaseLockBackend, owner: str, hold: Hold) -> None:
        """Finish a release cancelled mid-way, whatever its reply would have said."""
        left = hold.count - 1
        try:
            left = await finish(backend.awithdraw(self.name, owner, left, hold.attempt))
        except LockError:
            self._release_failed(owner, hold)
            raise
        self._released(owner, hold, left)

    async def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the caller's lease (or, with ``replace``, set it); return it."""
        seconds = validate_ttl(seconds, argument="seconds", lock_name=self.name)
        owner = self._owner_token()
        return self._extended(
            await self.backend.aextend(self.name, owner, seconds, replace=replace)
        )

    async def check(self) -> None:
        """Raise :class:`LockLostError` if the caller's hold is lost; see :meth:`.Lock.check`."""
        hold, ask = self._hold_to_check()
        self._checked(hold, not ask or await self.backend.attl(self.name, hold.owner) is not None)

    # Inspection ------------------------------------------------------------------------------

    async def locked(self) -> bool:
        """Return whether any owner holds the lock."""
        return await self.backend.alocked(self.name)

    async def owned(self) -> bool:
        """Return whether the calling task holds the lock."""
        return await self.backend.attl(self.name, self._owner_token()) is not None

    async def ttl(self) -> float | None:
        """Return the seconds left of the caller's lease (else of the current holder's)."""
        backend = self.backend
        remaining = await backend.attl(self.name, self._owner_token())
        return await backend.attl(self.name) if remaining is None else remaining

    # Context manager and decorator -----------------------------------------------------------

    async def _enter(self) -> AsyncLock:
        """Acquire as entering an ``async with`` block does; see :meth:`.Lock._enter`."""
        if not await self._acquire(*self._block_arguments()):
            raise self._not_acquired()
        return self

    __aenter__ = _enter

    async def _leave(self, exc: BaseException | None = None) -> None:
        """Release as leaving an ``async with`` block does; see :meth:`.Lock._leave`."""
        backend, owner = locks[self.using], self._owner_token()
        hold = self._before_release(backend, owner)
        with contextlib.suppress(LockNotOwnedError):  # reported as lost by the release
            await self._release(backend, owner, hold)
        self._left(hold, exc)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._leave(exc)

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """Decorate the coroutine function ``func`` so each call runs holding this lock."""
        return held_while_awaited(self, func, builder="lock", lock_name=self.name)


#: ``alock(name, ...)`` builds an :class:`AsyncLock`: ``async with alock(...):``.
alock = AsyncLock
