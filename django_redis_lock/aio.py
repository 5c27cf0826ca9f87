"""The lock for asyncio code: :func:`alock` returns an :class:`AsyncLock`.

It keeps every promise of :class:`~django_redis_lock.Lock`, on the same backends, keys and
scripts, so blocking and asyncio code exclude each other on one name. Its owner is the
running asyncio *task*: tasks that share one handle are still different owners, and none can
release another's hold. A task cancelled while it waits leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import ParamSpec, TypeVar

from ._core.background import keep_until_done
from ._core.handle import LockHandle, Step, Withdraw
from ._core.holds import Hold
from ._core.observe import Loss, LossReason
from ._core.owner import current_task_owner
from ._core.validation import validate_ttl
from .backends.base import AcquireRequest, AcquireResult, BaseLockBackend
from .exceptions import (
    BackendUnavailableError,
    LockArgumentTypeError,
    LockError,
    LockNotOwnedError,
)
from .handler import locks

__all__ = ["AsyncLock", "alock"]

logger = logging.getLogger("django_redis_lock")

P = ParamSpec("P")
R = TypeVar("R")


class AsyncLock(LockHandle):
    """A distributed, reentrant, fenced lock for asyncio code; see :class:`~.Lock`.

    It takes the same arguments and behaves the same, with ``await`` before what may wait on
    the backend: ``await l.acquire()``, ``await l.release()``, ``await l.extend(5)``,
    ``async with alock(name):``, and ``@alock(name)`` on a coroutine function. The owner is
    the calling asyncio task (or the ``owner`` token given). Renewal runs in the process's
    renewal thread, so a busy event loop does not lose its leases; it stops when the holding
    task ends or its event loop closes, and the lease then runs out. ``on_lost`` is called on
    the holder's event loop; if it returns an awaitable, that is run as a task there.
    """

    def _owner_token(self) -> str:
        return current_task_owner() if self.owner is None else self.owner

    def _where(self) -> str:
        task = asyncio.current_task()
        thread = threading.current_thread().name
        return thread if task is None else f"{thread}/{task.get_name()}"

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
        cancels = _cancels(task)
        try:
            call = next(steps)
            while True:
                try:
                    reply = await self._call(backend, owner, call, task, cancels)
                except BaseException as error:
                    call = steps.throw(error)
                else:
                    call = steps.send(reply)
        except StopIteration as done:
            return bool(done.value)
        except BackendUnavailableError:
            _raise_if_cancelled(task, cancels)  # the client's time-out stood for a cancellation
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
            await _finish(backend.awithdraw(self.name, owner, call.holds, call.attempt))
            return None
        if isinstance(call, AcquireRequest):
            reply = await backend.aacquire(self.name, owner, call)
        else:
            reply = await backend.await_and_claim(self.name, owner, call.seconds, call.request)
        _raise_if_cancelled(task, cancels)
        return reply

    async def release(self) -> None:
        """Drop one hold of the calling task; see :meth:`.Lock.release`."""
        backend, owner = locks[self.using], self._owner_token()
        await self._release(backend, owner, self._before_release(backend, owner))

    async def _release(self, backend: BaseLockBackend, owner: str, hold: Hold | None) -> None:
        try:
            count = None if hold is None else hold.count
            # min_hold only when asked for: a backend written before it keeps working.
            window = {"min_hold": self.min_hold} if self.min_hold else {}
            left = await backend.arelease(self.name, owner, count, **window)
        except asyncio.CancelledError:
            if hold is None:
                raise
            # Cancelled mid-release: finish the release whatever its reply would have said.
            left = hold.count - 1
            try:
                left = await _finish(backend.awithdraw(self.name, owner, left, hold.attempt))
            except LockError:
                self._release_failed(owner, hold)
                raise
            self._released(owner, hold, left)
            raise
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

    async def __aenter__(self) -> AsyncLock:
        return await self._enter()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._leave(exc)

    async def _enter(self) -> AsyncLock:
        """Acquire as entering an ``async with`` block does; see :meth:`.Lock._enter`."""
        if not await self._acquire(*self._block_arguments()):
            raise self._not_acquired()
        return self

    async def _leave(self, exc: BaseException | None = None) -> None:
        """Release as leaving an ``async with`` block does; see :meth:`.Lock._leave`."""
        backend, owner = locks[self.using], self._owner_token()
        hold = self._before_release(backend, owner)
        with contextlib.suppress(LockNotOwnedError):  # reported as lost by the release
            await self._release(backend, owner, hold)
        self._left(hold, exc)

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """Decorate the coroutine function ``func`` so each call runs holding this lock."""
        if not inspect.iscoroutinefunction(func):
            raise LockArgumentTypeError(
                f"alock() decorates coroutine functions; {func!r} is not one. Use lock() "
                "for plain functions.",
                lock_name=self.name,
            )

        @functools.wraps(func)
        async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
            async with self:
                return await func(*args, **kwargs)

        return locked_call

    # Renewal and loss, seen from the event loop ------------------------------------------------

    def _orphan_check(self) -> Callable[[], Loss | None]:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        by_task = self.owner is None

        def orphaned() -> Loss | None:
            if loop.is_closed():
                return Loss(LossReason.OWNER_ENDED, "its event loop closed while holding it")
            if by_task and task is not None and task.done():
                return Loss(
                    LossReason.OWNER_ENDED, "the task holding it ended without releasing it"
                )
            return None

        return orphaned

    def _on_lost_callback(self) -> Callable[[], None] | None:
        # Called from the renewal thread: the callback runs on the holder's own loop.
        if self.on_lost is None:
            return None
        loop = asyncio.get_running_loop()

        def on_holders_loop() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is left to tell
                loop.call_soon_threadsafe(self._run_on_lost)

        return on_holders_loop

    def _run_on_lost(self) -> None:
        assert self.on_lost is not None
        try:
            result = self.on_lost(self)
            if inspect.isawaitable(result):
                task = keep_until_done(asyncio.ensure_future(result))
                task.add_done_callback(self._on_lost_done)
        except Exception:
            logger.exception("The on_lost callback of lock %r failed.", self.name)

    def _on_lost_done(self, task: asyncio.Future[object]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "The on_lost callback of lock %r failed.", self.name, exc_info=task.exception()
            )


def _cancels(task: asyncio.Task[object] | None) -> int:
    """Return how many cancellations of ``task`` are pending (0 before Python 3.11)."""
    cancelling = getattr(task, "cancelling", None)
    return 0 if cancelling is None else int(cancelling())


def _raise_if_cancelled(task: asyncio.Task[object] | None, before: int) -> None:
    """Raise the cancellation a client library swallowed while the task awaited it.

    redis-py's asyncio client can return a reply to a task cancelled meanwhile, as if the
    cancellation never came (its read timeout takes it for its own). A lock must not go on
    as if it had not been cancelled: that task would hold a lock its caller gave up.
    """
    if _cancels(task) > before:
        raise asyncio.CancelledError


async def _finish(work: Awaitable[int]) -> int:
    """Await ``work`` to its end, even if the calling task is cancelled again meanwhile."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


#: ``alock(name, ...)`` builds an :class:`AsyncLock`: ``async with alock(...):``.
alock = AsyncLock
