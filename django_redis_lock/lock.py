"""The lock a user holds: :func:`lock` returns a :class:`Lock`.

A ``Lock`` is a cheap handle over a backend. It can be created at import time (as a decorator,
say): it reads settings only when first used. One handle may be shared by threads: each
thread is its own owner, with its own hold count and fencing token.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from ._validation import (
    validate_metadata,
    validate_name,
    validate_timeout,
    validate_ttl,
)
from .backends.base import BaseLockBackend, holder_metadata
from .conf import DEFAULT_ALIAS
from .exceptions import (
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
)
from .handler import locks

__all__ = ["Lock", "current_owner", "lock"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")

_owner = threading.local()
_HOST = socket.gethostname()


def current_owner() -> str:
    """Return the owner token of the calling thread: random, from :mod:`secrets`."""
    token: str | None = getattr(_owner, "token", None)
    if token is None:
        token = _owner.token = secrets.token_hex(16)
    return token


def _forget_owners_in_child() -> None:
    # A forked child is a new owner: it must not release or extend its parent's locks.
    global _owner  # noqa: PLW0603
    _owner = threading.local()


os.register_at_fork(after_in_child=_forget_owners_in_child)


class Lock:
    """A distributed, reentrant, fenced lock with a lease.

    Use it as a context manager, a decorator, or through :meth:`acquire` and :meth:`release`,
    as you would :class:`threading.RLock`.
    """

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        blocking: bool = True,
        timeout: float | None = None,
        using: str = DEFAULT_ALIAS,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.name = validate_name(name)
        self._ttl = None if ttl is None else validate_ttl(ttl, lock_name=name)
        if not isinstance(blocking, bool):
            raise LockArgumentTypeError(
                f"blocking must be True or False, got {blocking!r}.", lock_name=name
            )
        self.blocking = blocking
        self.timeout = validate_timeout(timeout, lock_name=name)
        if not blocking and timeout is not None:
            raise InvalidLockArgumentError(
                f"timeout cannot be given to a non-blocking lock (got {timeout!r}).",
                lock_name=name,
            )
        self.using = using
        self.metadata = validate_metadata(metadata, lock_name=name)
        self._fencing: dict[str, int] = {}
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"<Lock {self.name!r} using={self.using!r}>"

    @property
    def backend(self) -> BaseLockBackend:
        """Return the backend of this lock's alias (built on first use)."""
        return locks[self.using]

    @property
    def lease(self) -> float:
        """Return the lease in seconds that each acquire takes."""
        return self.backend.default_ttl if self._ttl is None else self._ttl

    @property
    def fencing_token(self) -> int | None:
        """Return the fencing token of the calling owner's hold, taken through this handle.

        None until this handle acquires for the caller, and again after its last release.

        Tokens grow strictly with each new holder of this name: pass yours to the resource
        you write to, so it can refuse a writer whose token is older than one it has seen.
        """
        return self._fencing.get(current_owner())

    # Acquiring and releasing -----------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire the lock; return whether it was acquired.

        Blocking (the default) waits until the lock is free, or at most ``timeout`` seconds
        (``None``: the handle's timeout, which defaults to waiting for ever). With
        ``blocking=False`` one attempt is made. An owner that already holds the lock
        acquires it again at once (reentrancy); release it as many times.
        """
        if blocking is None:
            blocking = self.blocking
        if timeout is None:
            timeout = self.timeout if blocking else None
        elif not blocking:
            raise InvalidLockArgumentError(
                f"timeout cannot be given to a non-blocking acquire (got {timeout!r}).",
                lock_name=self.name,
            )
        else:
            timeout = validate_timeout(timeout, lock_name=self.name)
        backend, owner, lease = self.backend, current_owner(), self.lease
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        holder = self._holder_json()
        while True:
            result = backend.acquire(self.name, owner, ttl=lease, metadata=holder)
            if result.acquired:
                assert result.fencing_token is not None
                self._fencing[owner] = result.fencing_token
                logger.debug(
                    "Acquired lock %r (fencing token %s, holds %s) after %.3fs.",
                    self.name,
                    result.fencing_token,
                    result.holds,
                    time.monotonic() - started,
                )
                return True
            pause = result.retry_after if result.retry_after is not None else lease
            if not blocking:
                return False
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    logger.debug("Timed out acquiring lock %r after %ss.", self.name, timeout)
                    return False
                pause = min(pause, remaining)
            backend.wait(self.name, pause)

    def release(self) -> None:
        """Drop one hold of the calling owner; the lock is free when its last hold is dropped.

        Raises :class:`LockNotOwnedError` if the caller holds nothing: it never acquired, it
        already released, or its lease ended (and another owner may hold the lock now).
        """
        owner = current_owner()
        left = self.backend.release(self.name, owner)
        if left is None:
            self._fencing.pop(owner, None)
            raise LockNotOwnedError(
                f"Cannot release lock {self.name!r}: this owner does not hold it (never "
                "acquired, already released, or its lease ended).",
                lock_name=self.name,
            )
        if left == 0:
            self._fencing.pop(owner, None)
        logger.debug("Released lock %r (%s holds left).", self.name, left)

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the caller's lease (or, with ``replace``, set it); return it.

        Raises :class:`LockNotOwnedError` if the caller does not hold the lock, which
        includes a lease that already ended: an ended lease is never revived.
        """
        seconds = validate_ttl(seconds, argument="seconds", lock_name=self.name)
        remaining = self.backend.extend(self.name, current_owner(), seconds, replace=replace)
        if remaining is None:
            raise LockNotOwnedError(
                f"Cannot extend lock {self.name!r}: this owner does not hold it (never "
                "acquired, already released, or its lease ended).",
                lock_name=self.name,
            )
        return remaining

    # Inspection ------------------------------------------------------------------------------

    def locked(self) -> bool:
        """Return whether any owner holds the lock."""
        return self.backend.locked(self.name)

    def owned(self) -> bool:
        """Return whether the calling owner holds the lock."""
        return self.backend.ttl(self.name, current_owner()) is not None

    def ttl(self) -> float | None:
        """Return the seconds left of the caller's lease (else of the current holder's).

        None means nobody holds the lock.
        """
        backend = self.backend
        remaining = backend.ttl(self.name, current_owner())
        return backend.ttl(self.name) if remaining is None else remaining

    # Context manager and decorator -----------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            wait = "at once" if not self.blocking else f"within {self.timeout}s"
            raise LockNotAcquiredError(
                f"Could not acquire lock {self.name!r} {wait}: another owner holds it.",
                lock_name=self.name,
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockNotOwnedError:
            message = (
                f"Lock {self.name!r} was lost before the end of the block: its lease of "
                f"{self.lease}s ended, so another owner may have run at the same time."
            )
            if exc_type is not None:
                # Keep the block's own exception; the loss is still reported.
                logger.warning(message)
                return
            raise LockLostError(message, lock_name=self.name) from None

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``func`` so each call runs while holding this lock."""
        if inspect.iscoroutinefunction(func):
            raise LockArgumentTypeError(
                f"lock() cannot decorate the coroutine function {func.__qualname__}: it "
                "would hold the lock while the coroutine is created, not while it runs.",
                lock_name=self.name,
            )

        @functools.wraps(func)
        def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
            with self:
                return func(*args, **kwargs)

        return locked_call

    def _holder_json(self) -> str:
        # Serialised once per thread (and again in a forked child, whose pid differs).
        cached: tuple[int, str] | None = getattr(self._local, "holder", None)
        pid = os.getpid()
        if cached is None or cached[0] != pid:
            text = holder_metadata(
                host=_HOST, pid=pid, thread=threading.current_thread().name, data=self.metadata
            )
            cached = self._local.holder = (pid, text)
        return cached[1]


def lock(
    name: str,
    *,
    ttl: float | None = None,
    blocking: bool = True,
    timeout: float | None = None,
    using: str = DEFAULT_ALIAS,
    metadata: dict[str, Any] | None = None,
) -> Lock:
    """Return a :class:`Lock` named ``name`` on the backend ``using``.

    ``ttl`` is the lease in seconds (default: the backend's ``ttl`` option): a holder that
    dies frees the lock when it ends. ``timeout`` bounds a blocking acquire (None: wait for
    ever). ``metadata`` is a JSON-serialisable dict shown to anyone listing held locks.
    """
    return Lock(name, ttl=ttl, blocking=blocking, timeout=timeout, using=using, metadata=metadata)
