"""Several locks at once: :func:`lock_all` returns a :class:`MultiLock`.

The names are taken one by one, in one order for every caller (sorted), so two multi-locks
over overlapping sets never wait for each other for ever; one that cannot take a name in
time gives back those it took before it returns. See "Several locks at once" in the docs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from ._core.multi import MultiLockBase
from .exceptions import LockArgumentTypeError, LockError, LockLostError, LockNotOwnedError
from .handler import locks
from .lock import Lock

__all__ = ["MultiLock", "lock_all"]

P = ParamSpec("P")
R = TypeVar("R")


class MultiLock(MultiLockBase[Lock]):
    """The locks ``names``, held together: all of them, or none.

    It takes the arguments of :class:`Lock` (``limit`` and ``min_hold`` excepted), applied to
    every name; ``timeout`` bounds the whole acquisition. The names are de-duplicated and
    sorted, and acquired in that order; when one cannot be acquired (the timeout passed,
    a non-blocking try was refused, an error, an interruption) every name already taken is
    released before :meth:`acquire` returns False or the error is raised.

    Losing one name is losing the multi-lock: :attr:`lost` turns true, :meth:`check` raises
    :class:`~django_redis_lock.LockLostError` naming the lost names, ``on_lost(multi_lock)``
    is called once, for the first name lost, and leaving the ``with`` block raises
    ``LockLostError`` (only logged with ``raise_on_lost=False``). Each name is renewed,
    held and reentrant exactly as a :class:`Lock` of that name.
    """

    def _member(self, name: str, **arguments: Any) -> Lock:
        return Lock(name, **arguments)

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
        deadline = self._deadline(timeout)
        outcome = self._take_at_once(blocking, renew)
        if outcome is True:
            self._bind()
            return None
        if outcome is not None and not blocking:
            return outcome
        while True:
            taken: list[Lock] = []
            try:
                for member in self._members:
                    left = self._left(deadline) if blocking else None
                    if not member._acquire(blocking, left, renew):
                        self._give_back(taken)
                        return member.name
                    taken.append(member)
                acquisition = self._bind()
            except BaseException:
                self._give_back(taken)
                raise
            ended = self._ended()
            if ended is None:
                return None
            self._unbind(acquisition)
            self._give_back(taken)  # and start again, if there is time left
            if not blocking or self._left(deadline) == 0:
                return ended

    def _take_at_once(self, blocking: bool, renew: bool) -> Literal[True] | str | None:
        """Try to take every name in one step; see :meth:`MultiLockBase._took_at_once`."""
        backend = locks[self.using]
        once = self._at_once(backend)
        if once is None:
            return None
        try:
            result = backend.acquire_all(self.names, once.owner, once.request, once.holds)
        except BaseException:
            self._withdraw_at_once(once)  # no answer: what it took is undone later
            raise
        return self._took_at_once(once, result, blocking, renew)

    def _give_back(self, taken: list[Lock]) -> None:
        """Release what an acquisition that failed took, last first; its errors are logged."""
        for member in reversed(taken):
            try:
                member.release()
            except LockError as error:  # a lease already ended, or the backend is away
                self._rollback_failed(member.name, error)

    def release(self) -> None:
        """Drop one hold of every name; see :meth:`Lock.release`.

        Every name is released even if one of them fails; then :class:`LockNotOwnedError`
        names those the caller did not hold (never acquired, released, or lost), and any
        other error is raised.
        """
        not_owned: list[str] = []
        errors: list[BaseException] = []
        for member in reversed(self._members):
            try:
                member.release()
            except LockNotOwnedError:
                not_owned.append(member.name)
            except LockError as error:
                errors.append(error)
        self._raise_failures("release", not_owned, errors)

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the lease of every name (or set it); return the shortest.

        Every name held is extended even if one of them fails; then
        :class:`LockNotOwnedError` names those the caller does not hold (an ended lease is
        never revived), and any other error is raised.
        """
        not_owned: list[str] = []
        errors: list[BaseException] = []
        leases: list[float] = []
        for member in self._members:
            try:
                leases.append(member.extend(seconds, replace=replace))
            except LockNotOwnedError:
                not_owned.append(member.name)
            except LockError as error:
                errors.append(error)
        self._raise_failures("extend", not_owned, errors)
        return min(leases)

    def check(self) -> None:
        """Raise :class:`LockLostError` naming each name lost; see :meth:`Lock.check`."""
        lost: list[str] = []
        for member in self._members:
            try:
                member.check()
            except LockLostError:
                lost.append(member.name)
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
        lost: list[str] = []
        errors: list[LockError] = []
        for member in reversed(self._members):
            try:
                member._leave()
            except LockLostError:
                lost.append(member.name)
            except LockError as error:
                errors.append(error)
        if errors:
            raise errors[0]
        if lost and exc is None and self.raise_on_lost:
            raise self._lost_error(sorted(lost))

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``func`` so each call runs while holding every name."""
        if inspect.iscoroutinefunction(func):
            raise LockArgumentTypeError(
                f"lock_all() cannot decorate the coroutine function {func.__qualname__}: it "
                "would hold the locks while the coroutine is created, not while it runs. "
                "Use alock_all() for coroutine functions."
            )

        @functools.wraps(func)
        def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return func(*args, **kwargs)

        return locked_call


#: ``lock_all(names, ...)`` builds a :class:`MultiLock`: ``with lock_all([...]):``.
lock_all = MultiLock
