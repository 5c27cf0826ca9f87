"""The contract every lock backend fulfils.

A backend stores leases; it knows nothing of threads, waiting deadlines or context managers,
which live once, in :class:`django_redis_lock.lock.Lock`. Each primitive is atomic on the
server: acquire, release, extend and force-release either happen whole or not at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from asgiref.sync import sync_to_async

from .._core.owner import MIN_HOLD_PREFIX
from ..exceptions import InvalidLockArgumentError, LockError
from ._glob import glob_escape, glob_to_regex
from ._holder import holder_metadata, parse_holder_metadata
from ._info import LockInfo, WaiterInfo
from ._options import OptionRules, Problem
from ._rate_limits import Admission, Rate, RateLimitInfo, RateLimitPrimitives
from ._requests import (
    SHARED,
    AcquireAllResult,
    AcquireRequest,
    AcquireResult,
    Grant,
    ReleaseRequest,
)

__all__ = [
    "MIN_HOLD_PREFIX",
    "SHARED",
    "AcquireAllResult",
    "AcquireRequest",
    "AcquireResult",
    "Admission",
    "BaseLockBackend",
    "Grant",
    "LockInfo",
    "Problem",
    "Rate",
    "RateLimitInfo",
    "ReleaseRequest",
    "WaiterInfo",
    "glob_escape",
    "glob_to_regex",
    "holder_metadata",
    "parse_holder_metadata",
]


class BaseLockBackend(RateLimitPrimitives, OptionRules):
    """Base class of lock backends; subclasses provide the primitives below.

    Durations are seconds as floats (millisecond precision) everywhere in this API.
    ``owner`` is an opaque token chosen by the caller; the backend only compares it.
    The OPTIONS a backend takes are checked by :meth:`option_problems`, on the constructor's
    keyword arguments before ``__init__`` runs, as ``manage.py check`` checks ``LOCKS``.
    """

    def __init__(
        self, *, key_prefix: str = "lock", ttl: float = 30.0, max_hold: float | None = None
    ) -> None:
        self.key_prefix = key_prefix
        self.default_ttl = float(ttl)
        self.default_max_hold = None if max_hold is None else float(max_hold)

    #: The longest single :meth:`wait` the backend supports, in seconds.
    max_wait: float = 5.0

    #: How long renewal goes on at most for a lock that does not pass ``max_hold`` (None: no
    #: bound); the ``max_hold`` option sets it.
    default_max_hold: float | None = None

    #: Where the configuration came from, when the backend's errors must say so: the handler
    #: sets it on the default it builds when ``settings.LOCKS`` is not set.
    origin: str = ""

    @property
    def location(self) -> str:
        """Return where the locks are kept, for people to read: never a password."""
        return type(self).__name__

    def acquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        """Try once to take a lease of ``request.ttl`` seconds on ``name`` for ``owner``.

        Reentrant: an owner that already holds the lock gets its hold count increased, its
        lease lengthened to at least ``ttl``, and its existing fencing token.

        When the lock is not free and ``request.wait`` > 0, the owner is registered as a
        waiter for ``wait`` seconds: a release within that time hands it the lock (see
        :meth:`wait`). ``wait=0`` also removes an earlier registration of the owner. With
        ``fair``, a free slot goes to registered waiters first, in arrival order. With
        ``claim`` (the owner is waiting already), if it holds the lock now, the lock was
        handed to it: its short grant becomes a lease of ``ttl`` and its hold is returned
        without counting another.

        ``request.limit`` is the most owners that may hold the lock together with this one.
        Each hold keeps the limit it was taken under, and holders share the lock only with
        holders of the same limit, fewer than it: a writer (limit 1) holds alone, and readers
        (an unbounded limit) share the lock with readers only. A newcomer that would share the
        lock does not pass a live waiter that asks for another limit (a reader does not pass
        a waiting writer).
        A reentrant acquire asking for a smaller limit than its hold's takes nothing, and the
        result says ``stricter``.

        Given ``request.holds``, the owner's hold count becomes ``holds + 1``: a hold the
        caller did not know of (left by an acquire it saw fail) is never inherited (one of
        another limit is dropped, and the owner asks afresh), and with
        ``holds`` > 0 and no live lease nothing is taken and the result says ``lost``.
        ``request.attempt`` is recorded with the hold and any registration, for
        :meth:`withdraw`.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide an acquire() method")

    def acquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        """Take each of ``names`` for ``owner`` in one atomic step: every one, or none.

        Each name is taken as :meth:`acquire` would take it at once with ``request`` (a
        lock, ``limit`` 1, without waiting), and ``holds`` is the count the caller knows of
        for each name, as ``request.holds`` is for one. Return None where the backend cannot
        take these names in one step (the default: the caller then acquires them one by one,
        in one order, giving back what it took if one cannot be taken).
        """
        return None

    def release(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        """Drop one hold of ``owner``; return the holds left, or None if it held nothing.

        ``request.holds`` is the number of holds the caller knows the owner has (None: count
        down on the backend); given, the count left is ``holds - 1`` whatever the backend
        counted.

        With ``request.min_hold`` > 0, a release that drops the owner's last hold less than
        ``min_hold`` seconds after the hold was acquired (on the backend's clock) does not
        free the lock: the hold passes to the pseudo-owner ``MIN_HOLD_PREFIX + owner``, with
        its fencing token, acquired-at and metadata, and a lease that ends ``min_hold``
        seconds after the acquire. Nobody can acquire the lock until then, the same owner
        included, and nothing is handed to waiters; :meth:`force_release` still frees it.
        The answer is 0, as for any last release.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide a release() method")

    def release_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        """Do each ``(name, owner, request)`` release, as :meth:`release` would.

        Return, in order, each one's holds left, None where the owner held nothing, or the
        :class:`LockError` it met (the others are done all the same). A backend that can
        should make this one round trip (one server's releases in one pipeline); by default
        the releases go one after another.
        """
        results: list[int | LockError | None] = []
        for name, owner, request in releases:
            try:
                results.append(self.release(name, owner, request))
            except LockError as error:
                results.append(error)
        return results

    def extend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        """Add ``ttl`` seconds to the lease (or set it, with ``replace``).

        Given ``metadata`` (holder details, as :attr:`AcquireRequest.metadata` takes them),
        the owner's hold records it in place of what it had, in the same atomic step: for an
        id learned after the acquire. None keeps the recorded metadata. Holds, fencing token
        and acquired-at stay as they are.

        Return the new remaining lease in seconds, or None if ``owner`` holds nothing: an
        ended lease is never revived, and nothing is recorded for it.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide an extend() method")

    def ttl(self, name: str, owner: str | None = None) -> float | None:
        """Return the seconds left of ``owner``'s lease, or of the longest one if no owner.

        None means ``owner`` (or anyone) does not hold the lock.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide a ttl() method")

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        """Block at most ``timeout`` seconds for ``name`` to be handed to the waiting ``owner``.

        Return the :class:`Grant` when it was (the owner holds the lock then), else None.
        Never longer than :attr:`max_wait`; it may return None early.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide a wait() method")

    def wait_and_claim(
        self, name: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        """:meth:`wait` up to ``timeout`` seconds, then ``acquire(name, owner, request)``.

        ``request`` is a claim (``request.claim`` is set). Woken by a handoff or not, the
        claim settles what the wait found: it turns a grant into the full lease, takes a free
        lock, or registers the owner again. Backends that can send both at once (Redis, in
        one pipeline: the claim runs on the server as soon as the wait ends) save the waiter
        a round trip after its wake-up.
        """
        self.wait(name, owner, timeout)
        return self.acquire(name, owner, request)

    def withdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        """Undo an acquire or release of ``owner`` whose outcome it never learned.

        For a caller interrupted mid-call (a cancelled task, a ``KeyboardInterrupt``) or left
        without an answer (the server did not reply in time): leave the queue of waiters,
        drop any lock handed over meanwhile, and bring the owner's hold count down to
        ``holds``, the count it knows of. Given an ``attempt`` id, only what that acquire
        registered or took is undone, so a withdrawal sent late never undoes a later hold.
        Return the holds left.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide a withdraw() method")

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        """Set each ``(name, owner, ttl)`` lease to ``ttl`` seconds from now, all at once.

        Return, in order, each lease's new remaining seconds, or None where the owner no
        longer holds the lock (an ended lease is never revived). Backends should make this
        one round trip, however many leases are given. A backend that could not ask about
        some leases (one server of several is down) returns the error in their place, and
        they are tried again; raising fails the whole batch the same way.
        """
        return [self.extend(name, owner, ttl, replace=True) for name, owner, ttl in leases]

    def server_of(self, name: str) -> object:
        """Return which of the backend's servers holds ``name`` (any hashable; one by default).

        Renewal sends one round trip per server, each on its own, so a server that does not
        answer never delays the leases held on another.
        """
        return None

    def iter_locks(self, pattern: str = "*") -> Iterator[LockInfo]:
        """Yield every holder of every held lock whose name matches the glob ``pattern``.

        The pattern uses Redis glob syntax (``*``, ``?``, ``[abc]``, ``\\`` escapes); pass
        ``glob_escape(name)`` to match one name exactly.
        """
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide an iter_locks() method"
        )

    def waiters(self, name: str) -> list[WaiterInfo]:
        """Return the owners waiting for ``name``, in queue order (the next one first).

        Only live registrations are listed. A backend that keeps no queue of waiters (Redlock)
        returns an empty list; :attr:`LockInfo.waiting` counts the same waiters.
        """
        return []

    def scan_page(
        self, pattern: str = "*", cursor: str | None = None, count: int = 50
    ) -> tuple[str | None, list[LockInfo]]:
        """Return one page of :meth:`iter_locks` and the cursor of the next (None: the last).

        Start with ``cursor=None``; pass each returned cursor back for the next page. A page
        holds about ``count`` locks (every holder of each), possibly more or fewer; locks
        taken or freed meanwhile may or may not appear, as with Redis ``SCAN``. This default
        pages through a sorted listing; backends with a server-side cursor override it.
        """
        start = page_cursor(cursor)
        infos = sorted(self.iter_locks(pattern), key=lambda i: (i.name, i.owner))
        names = sorted({info.name for info in infos})
        chosen = set(names[start : start + count])
        end = start + count
        page = [info for info in infos if info.name in chosen]
        return (str(end) if end < len(names) else None), page

    def force_release(self, name: str, owner: str | None = None) -> int:
        """Remove every holder of ``name`` (or only ``owner``); return how many were removed.

        The lock's holders are not told: use this for locks whose holders are known dead.
        """
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a force_release() method"
        )

    def ping(self) -> None:
        """Raise :class:`~django_redis_lock.BackendUnavailableError` if unreachable."""

    def close(self) -> None:
        """Release connections and other resources; the backend may be used again later."""

    # The asyncio twins of the primitives. These defaults run the blocking method in a worker
    # thread; backends with an asyncio client override them.

    async def aacquire(self, name: str, owner: str, request: AcquireRequest) -> AcquireResult:
        """Do what :meth:`acquire` does, without blocking the event loop."""
        return await sync_to_async(self.acquire, thread_sensitive=False)(name, owner, request)

    async def aacquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        """Do what :meth:`acquire_all` does, without blocking the event loop."""
        if type(self).acquire_all is BaseLockBackend.acquire_all:
            return None  # no thread needed to learn that the backend cannot
        return await sync_to_async(self.acquire_all, thread_sensitive=False)(
            names, owner, request, holds
        )

    async def arelease(
        self, name: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        """Do what :meth:`release` does, without blocking the event loop."""
        return await sync_to_async(self.release, thread_sensitive=False)(name, owner, request)

    async def arelease_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        """Do what :meth:`release_many` does, without blocking the event loop."""
        return await sync_to_async(self.release_many, thread_sensitive=False)(releases)

    async def aextend(
        self,
        name: str,
        owner: str,
        ttl: float,
        *,
        replace: bool = False,
        metadata: str | bytes | None = None,
    ) -> float | None:
        """Do what :meth:`extend` does, without blocking the event loop."""
        # Metadata only when given: a backend written before it existed still extends.
        given = {} if metadata is None else {"metadata": metadata}
        return await sync_to_async(self.extend, thread_sensitive=False)(
            name, owner, ttl, replace=replace, **given
        )

    async def attl(self, name: str, owner: str | None = None) -> float | None:
        """Do what :meth:`ttl` does, without blocking the event loop."""
        return await sync_to_async(self.ttl, thread_sensitive=False)(name, owner)

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        """Do what :meth:`wait` does, without blocking the event loop."""
        return await sync_to_async(self.wait, thread_sensitive=False)(name, owner, timeout)

    async def await_and_claim(
        self, name: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        """Do what :meth:`wait_and_claim` does, without blocking the event loop."""
        await self.await_grant(name, owner, timeout)
        return await self.aacquire(name, owner, request)

    async def awithdraw(self, name: str, owner: str, holds: int = 0, attempt: str = "") -> int:
        """Do what :meth:`withdraw` does, without blocking the event loop."""
        return await sync_to_async(self.withdraw, thread_sensitive=False)(
            name, owner, holds, attempt
        )

    async def aclose(self) -> None:
        """Close what the running event loop uses of this backend (see :meth:`close`)."""

    def lock_info(self, name: str) -> list[LockInfo]:
        """Return the holders of exactly the lock ``name`` (an empty list when free)."""
        return [info for info in self.iter_locks(glob_escape(name)) if info.name == name]

    def locked(self, name: str) -> bool:
        """Return whether anyone holds ``name``."""
        return self.ttl(name) is not None

    async def alocked(self, name: str) -> bool:
        """Do what :meth:`locked` does, without blocking the event loop."""
        return await self.attl(name) is not None


def page_cursor(cursor: str | None) -> int:
    """Return the position a :meth:`BaseLockBackend.scan_page` cursor stands for."""
    if cursor is None:
        return 0
    if not (isinstance(cursor, str) and cursor.isdigit()):
        raise InvalidLockArgumentError(
            f"cursor must be None or a cursor returned by scan_page(), got {cursor!r}."
        )
    return int(cursor)
