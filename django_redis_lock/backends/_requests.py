"""What a backend is asked and what it answers: the typed requests and replies of the contract.

They are re-exported by :mod:`django_redis_lock.backends.base`, the contract itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "SHARED",
    "AcquireAllResult",
    "AcquireRequest",
    "AcquireResult",
    "Grant",
    "ReleaseRequest",
]


#: The ``limit`` of a reader of a read-write lock: unbounded, so readers share the lock with
#: each other, but never with a writer (limit 1). The Lua scripts keep limits as integers.
SHARED = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AcquireRequest:
    """What one acquire attempt asks of a backend: see :meth:`BaseLockBackend.acquire`.

    Only ``ttl`` (the lease, in seconds) has no default; ``metadata`` defaults to a holder
    with no details. A new acquire option is a new field here, and handled by the backends.
    """

    ttl: float
    metadata: str | bytes = b"{}"
    limit: int = 1
    fair: bool = False
    wait: float = 0.0
    claim: bool = False
    holds: int | None = None
    attempt: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseRequest:
    """What one release asks of a backend: see :meth:`BaseLockBackend.release`.

    ``holds`` is the number of holds the caller knows the owner has (None: count down on the
    backend); ``min_hold`` the seconds after the acquire that a last release keeps the lock
    held, by nobody (0: none). A new release option is a new field here.
    """

    holds: int | None = None
    min_hold: float = 0.0


class AcquireResult(NamedTuple):
    """What one acquire attempt did.

    On success ``fencing_token`` is the holder's token (the same for every reentrant acquire),
    ``holds`` its hold count and ``lease`` the seconds its lease has left. On failure
    ``retry_after`` is the number of seconds until the earliest current lease ends, so a
    waiter never sleeps past it. ``lost`` says the owner knew of holds (``holds`` > 0 was
    asked) but its lease had ended: nothing was taken. ``stricter`` says the owner holds the
    lock under a larger ``limit`` than it asked for (a reader asking to write): nothing was
    taken, since a hold is never made stricter while it is held.
    """

    acquired: bool
    fencing_token: int | None = None
    holds: int = 0
    retry_after: float | None = None
    lease: float | None = None
    lost: bool = False
    stricter: bool = False


class AcquireAllResult(NamedTuple):
    """What one all-or-nothing attempt on several names did (see ``acquire_all``).

    ``results`` has each name's :class:`AcquireResult`, in order, when every name was taken.
    Otherwise nothing was taken: ``refused`` names a lock that another owner holds, with
    ``retry_after`` seconds until its earliest lease ends; with no ``refused``, the names are
    left to be acquired one by one (a lease the owner lost, a hold under another limit, fair
    order with owners queued), where each case is settled as a single acquire settles it.
    """

    results: tuple[AcquireResult, ...] = ()
    refused: str | None = None
    retry_after: float | None = None

    @property
    def acquired(self) -> bool:
        """Return whether every name was taken."""
        return bool(self.results)


class Grant(NamedTuple):
    """A lock handed to a waiting owner at a release: its fencing token and lease (seconds)."""

    fencing_token: int
    lease: float
