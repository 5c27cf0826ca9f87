"""What :class:`~.locmem.LocMemBackend` keeps of one lock: its holders, queue and grants.

An :class:`Entry` also answers the two questions an acquire asks of a lock, by the rules the
Redis scripts follow (see ``AcquireRequest.limit``): may one more owner hold it, and must
an owner wait its turn in the queue; and it says how its holders and waiters read in a listing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._info import LockInfo, WaiterInfo
from ._requests import AcquireRequest, Grant

__all__ = ["CLAIM_SECONDS", "Entry", "Holder", "Waiter"]

#: A lease handed to a waiter lasts this long until the waiter claims it (as on Redis).
CLAIM_SECONDS = 1.0


@dataclass
class Holder:
    """One owner's hold of a lock."""

    ends: float
    fencing_token: int
    acquired_at: float
    metadata: str | bytes
    attempt: str
    holds: int = 1
    #: When the hold was taken, on the monotonic clock (``acquired_at`` is wall time).
    since: float = 0.0
    #: The most holders it shares the lock with (see ``AcquireRequest.limit``).
    limit: int = 1


@dataclass
class Waiter:
    """One owner's registration in a lock's queue."""

    ends: float
    lease: float
    limit: int
    metadata: str | bytes
    attempt: str = ""
    fair: bool = False
    #: When the owner joined the queue (wall time); kept when it registers again.
    since: float = 0.0


@dataclass
class Entry:
    """One lock: its holders, its queue (insertion order is arrival), grants not yet claimed."""

    holders: dict[str, Holder] = field(default_factory=dict)
    queue: dict[str, Waiter] = field(default_factory=dict)
    grants: dict[str, Grant] = field(default_factory=dict)

    def admits(self, limit: int) -> bool:
        """Return whether one more owner, asking for ``limit``, may join the holders.

        They must all hold under that same limit, and be fewer than it.
        """
        holders = self.holders.values()
        return len(self.holders) < limit and all(h.limit == limit for h in holders)

    def queued(self, owner: str, request: AcquireRequest) -> bool:
        """Return whether ``owner`` is served in queue order.

        It is when fair, or when it would share the lock and a waiter asks for another limit
        (a reader behind a writer).
        """
        return bool(self.queue) and (
            request.fair
            or (
                request.limit > 1
                and any(w.limit != request.limit for o, w in self.queue.items() if o != owner)
            )
        )

    def forget_registration(self, owner: str, *, unless_limit: int) -> None:
        """Drop ``owner``'s registration if it was made under a limit other than this one.

        It was left by an attempt the owner saw fail (or by a process of the same owner that
        died): not the current request's, to be handed a slot under that limit.
        """
        waiter = self.queue.get(owner)
        if waiter is not None and waiter.limit != unless_limit:
            del self.queue[owner]

    def lock_infos(self, name: str, now: float, wall: float) -> list[LockInfo]:
        """Return each holder as listed (``now`` on the monotonic clock, ``wall`` the time)."""
        return [
            LockInfo.from_record(
                name=name,
                owner=owner,
                holds=h.holds,
                ttl=h.ends - now,
                fencing_token=h.fencing_token,
                acquired_at=h.acquired_at,
                now=wall,
                metadata=h.metadata,
                waiting=len(self.queue),
            )
            for owner, h in self.holders.items()
        ]

    def waiter_infos(self, name: str, now: float, wall: float) -> list[WaiterInfo]:
        """Return each registered waiter as listed, in queue order."""
        return [
            WaiterInfo.from_record(
                name=name,
                owner=owner,
                position=position,
                fair=w.fair,
                since=w.since,
                ends=wall + (w.ends - now),
                now=wall,
                metadata=w.metadata,
            )
            for position, (owner, w) in enumerate(self.queue.items())
        ]
