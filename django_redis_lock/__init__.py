"""Distributed locks on Redis for Django and Celery."""

from .aio import AsyncLock, alock
from .exceptions import (
    BackendUnavailableError,
    DuplicateTaskError,
    InvalidLockArgumentError,
    InvalidLockBackendError,
    LockArgumentTypeError,
    LockError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
)
from .handler import locks
from .leader import Campaign, Term, leader
from .lock import Lock, lock

__version__ = "0.1.0.dev0"

__all__ = [
    "AsyncLock",
    "BackendUnavailableError",
    "Campaign",
    "DuplicateTaskError",
    "InvalidLockArgumentError",
    "InvalidLockBackendError",
    "Lock",
    "LockArgumentTypeError",
    "LockError",
    "LockLostError",
    "LockNotAcquiredError",
    "LockNotOwnedError",
    "Term",
    "alock",
    "leader",
    "lock",
    "locks",
]
