"""What a lock handle was asked for: its arguments, checked once, and what they mean per call.

:class:`LockArguments` is the base of :class:`~django_redis_lock._core.handle.LockHandle`: the
lease a call takes, the blocking and timeout an ``acquire()`` or a ``with`` block means, and
the holder details recorded with each hold.

:class:`LockKeywords` names every keyword of :func:`~django_redis_lock.lock` as one type
(``LockArguments`` spells them out with their defaults; a test keeps the two in step).
:class:`LockOptions` is the part that a handle made of several locks passes on to each:
``lock_all()`` and ``rwlock()`` take only these, as ``**options``, since ``limit`` and
``min_hold`` are not theirs to give (a multi-lock takes each name as a lock; a read-write
lock's sides set their own limits). Integrations build a run's handle from the same type.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict

from ..backends.base import SHARED, BaseLockBackend, holder_metadata
from ..conf import DEFAULT_ALIAS
from ..exceptions import (
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockNotAcquiredError,
    LockUpgradeError,
)
from ..handler import locks
from .owner import THREADS, Owners
from .validation import (
    validate_flag,
    validate_limit,
    validate_metadata,
    validate_min_hold,
    validate_name,
    validate_on_lost,
    validate_optional_flag,
    validate_owner,
    validate_timeout,
    validate_ttl,
)

if TYPE_CHECKING:
    from .holds import Hold

__all__ = ["HOST", "LockArguments", "LockKeywords", "LockOptions", "accept_options"]

#: This machine's name, as holders record it.
HOST = socket.gethostname()

#: The most holder details kept serialised per cache (thread and task names come and go).
_HOLDER_CACHE = 256

#: The holder details of handles without metadata, shared: each ``lock(name)`` is a new
#: handle, and its holder reads the same as the last one's in that thread.
_holders_without_metadata: dict[tuple[str, int, str | None], bytes] = {}


class LockOptions(TypedDict, total=False):
    """The keywords every lock handle takes; see :class:`~django_redis_lock.Lock`."""

    ttl: float | None
    blocking: bool
    timeout: float | None
    using: str
    metadata: dict[str, Any] | None
    fair: bool
    auto_renew: bool | None
    max_hold: float | None
    on_lost: Callable[[Any], object] | None
    raise_on_lost: bool
    owner: str | None


class LockKeywords(LockOptions, total=False):
    """Every keyword of :func:`~django_redis_lock.lock`: the options, a limit, a window."""

    limit: int
    min_hold: float


def accept_options(
    options: Mapping[str, object], *, caller: str, lock_name: str | None = None
) -> None:
    """Raise :class:`LockArgumentTypeError` for a keyword of ``options`` that is no option.

    As Python refuses an unexpected keyword argument, naming the keyword; ``limit`` and
    ``min_hold`` are told apart, since ``lock()`` takes them and ``caller`` does not.
    """
    unknown = sorted(set(options) - LockOptions.__optional_keys__)
    if not unknown:
        return
    names = ", ".join(repr(name) for name in unknown)
    what = "unexpected keyword arguments" if len(unknown) > 1 else "an unexpected keyword argument"
    own = [name for name in unknown if name in LockKeywords.__optional_keys__]
    why = f" ({' and '.join(own)}: only lock() takes {'them' if len(own) > 1 else 'it'})"
    raise LockArgumentTypeError(
        f"{caller} got {what} {names}{why if own else ''}; it "
        f"takes {', '.join(sorted(LockOptions.__optional_keys__))}.",
        lock_name=lock_name,
    )


class LockArguments:
    """The arguments of a lock handle, checked; subclasses say who the calling owner is."""

    #: Who owns a hold when no ``owner`` is given: each thread, or each asyncio task.
    _owners: ClassVar[Owners] = THREADS

    #: The side of a read-write lock that the handle takes, as listings show it (None: a lock).
    mode: ClassVar[str | None] = None

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
        min_hold: float = 0.0,
        on_lost: Callable[[Any], object] | None = None,
        raise_on_lost: bool = True,
        owner: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        self._ttl = None if ttl is None else validate_ttl(ttl, lock_name=name)
        self.blocking = validate_flag(blocking, argument="blocking", lock_name=name)
        self.timeout = validate_timeout(timeout, lock_name=name)
        if not blocking and timeout is not None:
            raise InvalidLockArgumentError(
                f"timeout cannot be given to a non-blocking lock (got {timeout!r}).",
                lock_name=name,
            )
        self.using = using
        self.metadata = validate_metadata(metadata, lock_name=name)
        self.limit = validate_limit(limit, lock_name=name)
        self.fair = validate_flag(fair, argument="fair", lock_name=name)
        self.auto_renew = validate_optional_flag(auto_renew, argument="auto_renew", lock_name=name)
        self.max_hold = (
            None
            if max_hold is None
            else validate_ttl(max_hold, argument="max_hold", lock_name=name)
        )
        self.min_hold = validate_min_hold(min_hold, lock_name=name)
        if self.min_hold and limit != 1:
            raise InvalidLockArgumentError(
                f"min_hold cannot be given to a lock with limit={limit!r}: it keeps a lock "
                "(limit=1) held for a minimum time, not a semaphore's slot.",
                lock_name=name,
            )
        self.on_lost = validate_on_lost(on_lost, lock_name=name)
        self.raise_on_lost = validate_flag(raise_on_lost, argument="raise_on_lost", lock_name=name)
        self.owner = validate_owner(owner, lock_name=name)
        self._holder_cache: dict[tuple[str, int, str | None], bytes] = {}
        # The holds this handle found lost, by owner, so ``lost`` still answers after release.
        self._lost: dict[str, Hold] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} using={self.using!r}>"

    def _owner_token(self) -> str:
        """Return the token of the calling owner (a thread, an asyncio task, or ``owner``)."""
        return self._owners.token() if self.owner is None else self.owner

    def _where(self) -> str:
        """Return what runs the caller, as shown in listings (a thread's name, say)."""
        return self._owners.where()

    @property
    def backend(self) -> BaseLockBackend:
        """Return the backend of this lock's alias (built on first use)."""
        return locks[self.using]

    @property
    def lease(self) -> float:
        """Return the lease in seconds that each acquire takes."""
        return self._lease_on(self.backend)

    def _lease_on(self, backend: BaseLockBackend) -> float:
        """Return the lease each acquire takes on ``backend`` (its ``ttl`` option by default)."""
        return backend.default_ttl if self._ttl is None else self._ttl

    def _max_hold_on(self, backend: BaseLockBackend) -> float | None:
        """Return how long renewal goes on at most on ``backend`` (its ``max_hold`` option)."""
        return backend.default_max_hold if self.max_hold is None else self.max_hold

    def _acquire_arguments(
        self, blocking: bool | None, timeout: float | None
    ) -> tuple[bool, float | None, bool]:
        """Return the (blocking, timeout, renew) that an ``acquire(blocking, timeout)`` means.

        ``acquire()`` renews the lease only with ``auto_renew=True``.
        """
        renew = self.auto_renew is True
        if blocking is None:
            blocking = self.blocking
        if timeout is None:
            return blocking, self.timeout if blocking else None, renew
        if not blocking:
            raise InvalidLockArgumentError(
                f"timeout cannot be given to a non-blocking acquire (got {timeout!r}).",
                lock_name=self.name,
            )
        return blocking, validate_timeout(timeout, lock_name=self.name), renew

    def _block_arguments(self) -> tuple[bool, float | None, bool]:
        """Return the (blocking, timeout, renew) of entering a ``with`` block.

        A block renews the lease unless ``auto_renew=False``: it cannot know how long it runs.
        """
        return self.blocking, self.timeout if self.blocking else None, self.auto_renew is not False

    def _not_acquired(self) -> LockNotAcquiredError:
        """Return the error of a ``with`` block (or decorator) that could not acquire."""
        wait = "at once" if not self.blocking else f"within {self.timeout}s"
        return LockNotAcquiredError(
            f"Could not acquire lock {self.name!r} {wait}: another owner holds it.",
            lock_name=self.name,
        )

    def _upgrade_refused(self, held_limit: int | None) -> LockUpgradeError:
        """Return the error of an acquire asking for a stricter hold than the caller has.

        ``held_limit`` is the hold's limit, None when only the backend knew of the hold.
        """
        wanted = "for writing" if self.mode == "write" else f"with limit={self.limit}"
        if held_limit == SHARED or (held_limit is None and self.mode == "write"):
            held = "for reading, and a read hold is never upgraded (two readers upgrading at "
            held += "once would wait for each other for ever)"
        else:
            limit = "a larger limit" if held_limit is None else f"limit={held_limit}"
            held = f"with {limit}, and a hold is never made stricter while it is held"
        return LockUpgradeError(
            f"Cannot acquire lock {self.name!r} {wanted}: this owner holds it {held}. "
            "Release it first.",
            lock_name=self.name,
        )

    def _holder_json(self) -> bytes:
        """Return the holder details recorded with a hold of the caller (see holder_metadata)."""
        # Serialised once per thread or task name, and again in a forked child (its pid differs).
        key = (self._where(), os.getpid(), self.mode)
        cache = self._holder_cache if self.metadata else _holders_without_metadata
        cached = cache.get(key)
        if cached is None:
            if len(cache) >= _HOLDER_CACHE:
                cache.clear()
            cached = cache[key] = holder_metadata(
                host=HOST, pid=key[1], thread=key[0], data=self.metadata, mode=self.mode
            )
        return cached
