"""Distributed locks on Redis for Django and Celery."""

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
    LockUpgradeError,
    RateLimitExceededError,
)
from .handler import locks
from .leader import Campaign, Term, leader
from .lock import AsyncLock, Lock, alock, lock
from .multilock import AsyncMultiLock, MultiLock, alock_all, lock_all
from .ratelimit import AsyncRateLimit, RateLimit, arate_limit, rate_limit
from .rwlock import AsyncReadWriteLock, ReadWriteLock, arwlock, rwlock

__version__ = "0.1.0.dev0"

__all__ = [
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncRateLimit",
    "AsyncReadWriteLock",
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
    "LockUpgradeError",
    "MultiLock",
    "RateLimit",
    "RateLimitExceededError",
    "ReadWriteLock",
    "Term",
    "alock",
    "alock_all",
    "arate_limit",
    "arwlock",
    "leader",
    "lock",
    "lock_all",
    "locks",
    "rate_limit",
    "rwlock",
]
