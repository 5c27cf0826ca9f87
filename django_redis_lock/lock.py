"""The lock a user holds: :func:`lock` returns a :class:`Lock`.

A ``Lock`` is a cheap handle over a backend. It can be created at import time (as a decorator,
say): it reads settings only when first used. One handle may be shared by threads: each
thread is its own owner, with its own hold count and fencing token.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from ._validation import (
    validate_limit,
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
from .holds import Hold
from .owner import current_owner
from .renewal import Lease, renewer

__all__ = ["Lock", "current_owner", "lock"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")

_HOST = socket.gethostname()

#: A waiter's registration outlives its wait by this much, so a release that comes just as
#: the wait times out still finds it registered.
REGISTRATION_MARGIN = 1.0

_OWNER = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")


class Lock:
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
    :meth:`~Lock.acquire`), for at most ``max_hold`` seconds if given. When a hold is lost,
    ``on_lost(lock)`` is called, and leaving the ``with`` block raises
    :class:`~django_redis_lock.LockLostError` (only logged with ``raise_on_lost=False``).

    ``owner`` replaces the calling thread as the owner with a token of your own (a job's id,
    say): every thread using the handle is then that one owner, and anyone who knows the
    token can release what it holds (as a Celery worker does for a task whose process died).
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
        limit: int = 1,
        fair: bool = False,
        auto_renew: bool | None = None,
        max_hold: float | None = None,
        on_lost: Callable[[Lock], object] | None = None,
        raise_on_lost: bool = True,
        owner: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        self._ttl = None if ttl is None else validate_ttl(ttl, lock_name=name)
        for flag, value in (
            ("blocking", blocking),
            ("fair", fair),
            ("raise_on_lost", raise_on_lost),
        ):
            if not isinstance(value, bool):
                raise LockArgumentTypeError(
                    f"{flag} must be True or False, got {value!r}.", lock_name=name
                )
        if auto_renew is not None and not isinstance(auto_renew, bool):
            raise LockArgumentTypeError(
                f"auto_renew must be None, True or False, got {auto_renew!r}.", lock_name=name
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
        self.limit = validate_limit(limit, lock_name=name)
        self.fair = fair
        self.auto_renew = auto_renew
        self.max_hold = (
            None
            if max_hold is None
            else validate_ttl(max_hold, argument="max_hold", lock_name=name)
        )
        if on_lost is not None and not callable(on_lost):
            raise LockArgumentTypeError(
                f"on_lost must be a callable taking the lock, got {on_lost!r}.", lock_name=name
            )
        self.on_lost = on_lost
        self.raise_on_lost = raise_on_lost
        if owner is not None and (not isinstance(owner, str) or not _OWNER.fullmatch(owner)):
            raise InvalidLockArgumentError(
                f"owner must be 1 to 200 letters, digits or '-_.:@' characters, got {owner!r}.",
                lock_name=name,
            )
        self.owner = owner
        self._holds: dict[str, Hold] = {}
        self._lost: set[str] = set()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"<Lock {self.name!r} using={self.using!r}>"

    def _owner_token(self) -> str:
        return current_owner() if self.owner is None else self.owner

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
        hold = self._holds.get(self._owner_token())
        return None if hold is None else hold.fencing_token

    @property
    def lost(self) -> bool:
        """Return whether the calling owner's hold (or its last one) was lost.

        A hold is lost when its lease ended, or another owner took the lock, before release.
        """
        owner = self._owner_token()
        hold = self._holds.get(owner)
        return owner in self._lost if hold is None else hold.lost_reason is not None

    # Acquiring and releasing -----------------------------------------------------------------

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire the lock; return whether it was acquired.

        Blocking (the default) waits until the lock is free, or at most ``timeout`` seconds
        (``None``: the handle's timeout, which defaults to waiting for ever). With
        ``blocking=False`` one attempt is made. An owner that already holds the lock
        acquires it again at once (reentrancy); release it as many times.

        A waiting owner is handed the lock by the release that frees it, at once. The lease
        is renewed only with ``auto_renew=True`` (``with`` blocks and decorators renew
        unless ``auto_renew=False``).
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
        return self._acquire(blocking, timeout, renew=self.auto_renew is True)

    def _acquire(self, blocking: bool, timeout: float | None, *, renew: bool) -> bool:
        backend, owner = self.backend, self._owner_token()
        lease = backend.default_ttl if self._ttl is None else self._ttl
        holder, started = self._holder_json(), time.monotonic()
        deadline = None if timeout is None else started + timeout
        claim = False
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            waiting = blocking and (remaining is None or remaining > 0)
            window = backend.max_wait if remaining is None else min(remaining, backend.max_wait)
            result = backend.acquire(
                self.name,
                owner,
                ttl=lease,
                limit=self.limit,
                metadata=holder,
                fair=self.fair,
                wait=window + REGISTRATION_MARGIN if waiting else 0.0,
                claim=claim,
            )
            if result.acquired:
                assert result.fencing_token is not None
                granted = lease if result.lease is None else result.lease
                self._held(owner, result.fencing_token, granted, started, renew=renew)
                return True
            if not waiting:
                if blocking and timeout:
                    logger.warning(
                        "Gave up acquiring lock %r after %.3fs: another owner holds it.",
                        self.name,
                        time.monotonic() - started,
                    )
                return False
            pause = window if not result.retry_after else min(window, result.retry_after)
            grant = backend.wait(self.name, owner, pause)
            claim = True
            if grant is not None:
                self._held(owner, grant.fencing_token, grant.lease, started, renew=renew)
                return True

    def _held(
        self, owner: str, fencing_token: int, granted: float, started: float, *, renew: bool
    ) -> None:
        hold = self._holds.get(owner)
        now = time.monotonic()
        if hold is not None and hold.fencing_token == fencing_token:
            hold.count += 1
            return  # a reentrant acquire: announced once, with the first
        hold = self._holds[owner] = Hold(self, owner, fencing_token, now)
        self._lost.discard(owner)
        # Renewed leases are registered with the renewal thread. So is a lease handed over
        # short (see the backend) to a holder that does not renew: the thread tops it up to
        # the full lease once, at once, so this acquire returns without a second round trip.
        if renew or granted + 0.001 < self.lease:
            hold.lease = Lease(
                backend=self.backend,
                name=self.name,
                owner=owner,
                ttl=self.lease,
                ends=now + granted,
                on_lost=self._lost_by(hold),
                stop_at=None if not renew or self.max_hold is None else now + self.max_hold,
                once=not renew,
            )
            renewer.add(hold.lease)
        hold.announce_acquired(now - started)

    def _lost_by(self, hold: Hold) -> Callable[[str], None]:
        def lost(reason: str) -> None:
            self._lost.add(hold.owner)
            hold.report_lost(reason)

        return lost

    def release(self) -> None:
        """Drop one hold of the calling owner; the lock is free when its last hold is dropped.

        A freed lock is handed to the owner that has waited longest, if any. Raises
        :class:`LockNotOwnedError` if the caller holds nothing: it never acquired, it
        already released, or its lease ended (and another owner may hold the lock now).
        """
        owner = self._owner_token()
        hold = self._holds.get(owner)
        if hold is not None and hold.count == 1 and hold.lease is not None:
            renewer.remove(hold.lease)  # before the release: a late renewal is then no loss
        left = self.backend.release(self.name, owner)
        if hold is not None and (left is None or hold.count == 1):
            del self._holds[owner]
        if left is None:
            if hold is not None:
                self._lost_by(hold)("its lease ended before release")
            raise LockNotOwnedError(
                f"Cannot release lock {self.name!r}: this owner does not hold it (never "
                "acquired, already released, or its lease ended).",
                lock_name=self.name,
            )
        if hold is not None:
            hold.count -= 1
            hold.announce_released(left)

    def extend(self, seconds: float, *, replace: bool = False) -> float:
        """Add ``seconds`` to the caller's lease (or, with ``replace``, set it); return it.

        Raises :class:`LockNotOwnedError` if the caller does not hold the lock, which
        includes a lease that already ended: an ended lease is never revived.
        """
        seconds = validate_ttl(seconds, argument="seconds", lock_name=self.name)
        remaining = self.backend.extend(self.name, self._owner_token(), seconds, replace=replace)
        if remaining is None:
            raise LockNotOwnedError(
                f"Cannot extend lock {self.name!r}: this owner does not hold it (never "
                "acquired, already released, or its lease ended).",
                lock_name=self.name,
            )
        return remaining

    def check(self) -> None:
        """Raise :class:`LockLostError` if the caller's hold is lost; for long work.

        With renewal, this reads what the renewal thread found (no round trip); without,
        it asks the backend.
        """
        owner = self._owner_token()
        hold = self._holds.get(owner)
        if hold is None:
            raise LockNotOwnedError(
                f"Cannot check lock {self.name!r}: this owner does not hold it.",
                lock_name=self.name,
            )
        unrenewed = hold.lost_reason is None and (hold.lease is None or hold.lease.once)
        if unrenewed and self.backend.ttl(self.name, owner) is None:
            self._lost_by(hold)("its lease ended")
        if hold.lost_reason is not None:
            raise LockLostError(hold.lost_message(), lock_name=self.name)

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

    def __enter__(self) -> Lock:
        timeout = self.timeout if self.blocking else None
        if not self._acquire(self.blocking, timeout, renew=self.auto_renew is not False):
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
        hold = self._holds.get(self._owner_token())
        with contextlib.suppress(LockNotOwnedError):  # reported as lost by release()
            self.release()
        if hold is None or hold.lost_reason is None:
            return
        if exc_type is None and self.raise_on_lost:
            raise LockLostError(hold.lost_message(), lock_name=self.name)
        # The block's own exception (or raise_on_lost=False) wins; the loss was logged.

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

    def _holder_json(self) -> bytes:
        # Serialised once per thread (and again in a forked child, whose pid differs).
        cached: tuple[int, bytes] | None = getattr(self._local, "holder", None)
        pid = os.getpid()
        if cached is None or cached[0] != pid:
            text = holder_metadata(
                host=_HOST, pid=pid, thread=threading.current_thread().name, data=self.metadata
            )
            cached = self._local.holder = (pid, text)
        return cached[1]


#: ``lock(name, ...)`` builds a :class:`Lock`: the name reads well in ``with lock(...):``.
lock = Lock
