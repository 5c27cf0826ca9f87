"""Exceptions raised by django-redis-lock.

Every runtime failure of a lock derives from one root, so ``except LockError`` catches them
all. Configuration mistakes are different: they derive from Django's
``ImproperlyConfigured`` only, so a bad setting is never swallowed by a lock handler::

    LockError                       a lock operation failed (carries ``lock_name``)
    ├── LockNotAcquiredError        a ``with`` block could not acquire (in time)
    │   ├── DuplicateTaskError      a task with the same key is queued or running already
    │   └── RateLimitExceededError  a rate limit had no room in time (carries ``retry_after``)
    ├── LockNotOwnedError           release/extend by an owner that does not hold the lock
    ├── LockLostError               the lease ended (or was taken) while the holder worked
    ├── LockUpgradeError            a reader asked to write while reading (also a RuntimeError)
    ├── BackendUnavailableError     Redis did not answer in time, or refused the command
    └── InvalidLockArgumentError    a bad name, ttl, timeout or metadata (also a ValueError)
        └── LockArgumentTypeError   an argument of the wrong type (also a TypeError)

    ImproperlyConfigured (Django)
    └── InvalidLockBackendError     the LOCKS setting is wrong
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "BackendUnavailableError",
    "DuplicateTaskError",
    "InvalidLockArgumentError",
    "InvalidLockBackendError",
    "LockArgumentTypeError",
    "LockError",
    "LockLostError",
    "LockNotAcquiredError",
    "LockNotOwnedError",
    "LockUpgradeError",
    "RateLimitExceededError",
]


class LockError(Exception):
    """Root of every runtime lock failure; ``lock_name`` names the lock involved.

    An error keeps its type and its attributes when pickled or copied, as a Celery result
    backend or a process pool hands it on.
    """

    def __init__(self, message: str, *, lock_name: str | None = None) -> None:
        super().__init__(message)
        self.lock_name = lock_name

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[LockError], args: tuple[Any, ...], state: dict[str, Any]) -> LockError:
    """Return an error of ``cls`` with ``args`` and the attributes in ``state`` (unpickling)."""
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class LockNotAcquiredError(LockError):
    """The lock is held by another owner and could not be acquired in time."""


class DuplicateTaskError(LockNotAcquiredError):
    """A task was not sent: an instance with the same key is queued or running already.

    ``task_id`` is that instance's task id, when known.
    """

    def __init__(
        self, message: str, *, lock_name: str | None = None, task_id: str | None = None
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.task_id = task_id


class RateLimitExceededError(LockNotAcquiredError):
    """A rate limit had no room for a hit in time: nothing was counted.

    ``retry_after`` is the seconds until a slot frees, as the backend saw it (a hit of another
    process may take it first).
    """

    def __init__(
        self, message: str, *, lock_name: str | None = None, retry_after: float = 0.0
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.retry_after = retry_after


class LockNotOwnedError(LockError):
    """The caller does not hold the lock it tried to release or extend."""


class LockLostError(LockError):
    """The holder's lease ended, or another owner took the lock, before release."""


class LockUpgradeError(LockError, RuntimeError):
    """An owner asked for a stricter hold than the one it has: a reader asked to write.

    A read hold never becomes a write hold while it is held (two readers upgrading at once
    would wait for each other for ever): release the read hold, then acquire the write one.
    """


class BackendUnavailableError(LockError):
    """The backend did not answer within its timeout, or refused; the cause is chained."""


class InvalidLockArgumentError(LockError, ValueError):
    """An argument of a lock call has a value that cannot work; the message names it."""


class LockArgumentTypeError(InvalidLockArgumentError, TypeError):
    """An argument of a lock call has the wrong type; the message names it."""


class InvalidLockBackendError(ImproperlyConfigured):
    """The ``LOCKS`` setting names a backend or options that cannot work."""
