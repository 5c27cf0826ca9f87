"""What :class:`~django_redis_lock.MultiLock` and its asyncio twin share.

A multi-lock is one single-name handle per name, taken one by one in one order for every
caller (the names sorted), under one deadline, and released again, all of them, when one
cannot be taken: callers see it held whole or not at all. Holding a name, renewing its
lease and finding it lost are each handle's own; this module only adds them up (the
``on_lost`` callback is called once, for the first name lost).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from ..backends.base import AcquireAllResult, AcquireRequest, BaseLockBackend
from ..conf import DEFAULT_ALIAS
from ..exceptions import (
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
)
from .handle import LockHandle
from .holds import Hold
from .observe import Watch, observers
from .owner import new_attempt
from .validation import (
    refuse_limit_and_min_hold,
    validate_flag,
    validate_names,
    validate_on_lost,
)

__all__ = ["Acquisition", "AtOnce", "MultiLockBase"]

logger = logging.getLogger("django_redis_lock")

H = TypeVar("H", bound=LockHandle)


class Acquisition:
    """One acquisition of a multi-lock: the holds it took, and whether its holder was told."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[Hold] = []
        self.told = False

    def tell(self) -> bool:
        """Return whether the holder is to be told of a loss now: the first time only."""
        with self._lock:
            tell, self.told = not self.told, True
            return tell


@dataclass(frozen=True)
class AtOnce:
    """An attempt to take every name in one atomic step (``BaseLockBackend.acquire_all``)."""

    backend: BaseLockBackend
    owner: str
    request: AcquireRequest
    #: The holds the caller knew it had of each name when the attempt was sent.
    holds: tuple[int, ...]
    sent: float


class MultiLockBase(Generic[H]):
    """The arguments, members and loss book-keeping of a multi-lock; subclasses do the I/O."""

    def __init__(
        self,
        names: Iterable[str],
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
        self.names = validate_names(names)
        refuse_limit_and_min_hold(
            limit,
            min_hold,
            caller="lock_all()",
            why_limit="it takes each name as a lock (limit=1), not a slot of several semaphores",
            why_min_hold="a name released because another could not be taken must be free at "
            "once, not kept held",
        )
        self.on_lost = validate_on_lost(on_lost)
        self.raise_on_lost = validate_flag(raise_on_lost, argument="raise_on_lost")
        self.using = using
        # Each hold of a held acquisition, to that acquisition: a loss is told once per one.
        self._bound: weakref.WeakKeyDictionary[Hold, Acquisition] = weakref.WeakKeyDictionary()
        self._binding = threading.Lock()
        self._members: tuple[H, ...] = tuple(
            self._member(
                name,
                ttl=ttl,
                blocking=blocking,
                timeout=timeout,
                using=using,
                metadata=metadata,
                fair=fair,
                auto_renew=auto_renew,
                max_hold=max_hold,
                owner=owner,
                on_lost=self._on_member_lost,
            )
            for name in self.names
        )

    def _member(self, name: str, **arguments: Any) -> H:
        """Return the single-name handle of ``name``, reporting its losses to this multi-lock."""
        raise NotImplementedError("subclasses of MultiLockBase must provide a _member() method")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self.names)!r} using={self.using!r}>"

    @property
    def locks(self) -> tuple[H, ...]:
        """Return the single-name handles, one per name, in the order they are acquired."""
        return self._members

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Return the fencing token of each name the calling owner holds, by name.

        Empty until an acquire succeeds, and again after release. Each name's token grows
        with each new holder of that name, as :attr:`.Lock.fencing_token` does.
        """
        tokens = {member.name: member.fencing_token for member in self._members}
        return {name: token for name, token in tokens.items() if token is not None}

    @property
    def lost(self) -> bool:
        """Return whether the calling owner's hold of any name (or its last one) was lost.

        Losing one name is losing the multi-lock: another owner may hold that name now.
        """
        return any(member.lost for member in self._members)

    # Acquiring every name in one step ----------------------------------------------------------

    def _at_once(self, backend: BaseLockBackend) -> AtOnce | None:
        """Return the all-or-nothing attempt the acquisition starts with, if any.

        Where the backend takes every name in one step (one script, on one Redis), an
        acquisition that meets no other owner costs one round trip and never holds some of
        its names without the others; else the names are taken one by one. None when the
        caller's hold of a name is lost: that name's own acquire reports it.
        """
        first = self._members[0]
        owner = first._owner_token()
        holds = self._holds()
        if self._any_lost(holds):
            return None
        request = AcquireRequest(
            ttl=first._lease_on(backend),
            metadata=first._holder_json(),
            fair=first.fair,
            attempt=new_attempt(),
        )
        counts = tuple(0 if hold is None else hold.count for hold in holds)
        return AtOnce(backend, owner, request, counts, time.monotonic())

    def _took_at_once(
        self, once: AtOnce, result: AcquireAllResult | None, blocking: bool, renew: bool
    ) -> Literal[True] | str | None:
        """Record what an attempt at once did; return what the acquisition does next.

        True: every name is held. A name: it is held by another owner, and nothing was taken.
        None: the names are to be acquired one by one (the backend cannot take them at once,
        or left a case to each name's own acquire: a lost lease reported there, say).
        """
        if result is None or not result.acquired:
            if observers and result is not None and result.refused and not blocking:
                self._watched([result.refused], blocking, acquired=False)
            return None if result is None else result.refused
        ends = [once.sent + (taken.lease or once.request.ttl) for taken in result.results]
        if self._any_lost(self._holds()) or time.monotonic() >= min(ends):
            # A lease ended before the answer came, or a name held before was found lost
            # meanwhile: no acquisition. Each name's own acquire settles it (and reports it).
            self._withdraw_at_once(once)
            return None
        for member, taken, end in zip(self._members, result.results, ends, strict=True):
            member._held(
                once.backend,
                once.owner,
                taken,
                attempt=once.request.attempt,
                ends=end,
                started=once.sent,
                renew=renew,
            )
        if observers:
            self._watched(self.names, blocking, acquired=True)
        return True

    def _holds(self) -> list[Hold | None]:
        """Return the caller's hold of each name (None where it holds none)."""
        return [member._hold() for member in self._members]

    @staticmethod
    def _any_lost(holds: list[Hold | None]) -> bool:
        """Return whether one of the caller's holds was found lost."""
        return any(hold is not None and hold.lost_reason is not None for hold in holds)

    def _withdraw_at_once(self, once: AtOnce) -> None:
        """Have whatever an attempt at once took, with no answer seen, undone on the backend."""
        for member in self._members:
            member._withdraw_later(once.backend, once.owner, once.request.attempt)

    def _watched(self, names: Iterable[str], blocking: bool, *, acquired: bool) -> None:
        first = self._members[0]
        for name in names:
            watch = Watch(self.using, name, blocking, first.timeout if blocking else None)
            watch.acquired = acquired
            watch.end()

    # Acquiring: the plan, and its outcome ------------------------------------------------------

    @staticmethod
    def _deadline(timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + timeout

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """Return the time left until ``deadline`` (None: no bound) for the next name."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _ended(self) -> str | None:
        """Return a name whose lease, taken by this acquisition, ended meanwhile (else None).

        Without renewal, the lease of a name taken first can end while the last ones are
        waited for: the names are not all held then, and the acquisition starts again.
        """
        now = time.monotonic()
        for member in self._members:
            hold = member._hold()
            ends = None if hold is None else hold.ends if hold.lease is None else hold.lease.ends
            if hold is None or ends is None or hold.lost_reason is not None or now >= ends:
                return member.name
        return None

    def _bind(self) -> Acquisition:
        """Tie the caller's holds of every name to one acquisition, and return it.

        A hold the caller had before (a reentrant acquire) stays tied to the acquisition
        that took it first.
        """
        acquisition = Acquisition()
        with self._binding:
            for member in self._members:
                hold = member._hold()
                if hold is not None and self._bound.setdefault(hold, acquisition) is acquisition:
                    acquisition.holds.append(hold)
        return acquisition

    def _unbind(self, acquisition: Acquisition) -> None:
        """Untie the holds of an acquisition being given back: their losses are no news."""
        with self._binding:
            for hold in acquisition.holds:
                self._bound.pop(hold, None)

    def _on_member_lost(self, member: LockHandle) -> object:
        """Call ``on_lost(self)`` for the first lost hold of an acquisition; return its result.

        Each name's handle calls this with itself when one of its holds is lost (where its
        own ``on_lost`` would run), and records the lost hold before it does.
        """
        with self._binding:
            taken = {self._bound.get(hold) for hold in list(member._lost.values())}
        told = [acquisition.tell() for acquisition in taken if acquisition is not None]
        return self.on_lost(self) if any(told) and self.on_lost is not None else None

    def _not_acquired(self, refused: str) -> LockNotAcquiredError:
        first = self._members[0]
        wait = "at once" if not first.blocking else f"within {first.timeout}s"
        return LockNotAcquiredError(
            f"Could not acquire every lock of {list(self.names)!r} {wait}: {refused!r} could "
            "not be taken, so none of them was kept.",
            lock_name=refused,
        )

    def _raise_failures(
        self, action: str, not_owned: list[str], errors: list[BaseException]
    ) -> None:
        """Raise what ``action``, done on every name, met: names not held first, then errors."""
        if not_owned:
            raise LockNotOwnedError(
                f"Cannot {action} lock(s) {sorted(not_owned)!r} of {list(self.names)!r}: this "
                "owner does not hold them (never acquired, already released, or lost).",
                lock_name=min(not_owned),
            )
        if errors:
            raise errors[0]

    @staticmethod
    def _shortest(leases: list[float | None]) -> float | None:
        """Return the shortest of the names' leases; None if one of them is not held."""
        return None if None in leases else min(lease for lease in leases if lease is not None)

    def _lost_error(self, lost: list[str]) -> LockLostError:
        return LockLostError(
            f"Lock(s) {lost!r} of {list(self.names)!r} were lost before the end of the hold, "
            "so another owner may have run at the same time.",
            lock_name=lost[0],
        )

    def _rollback_failed(self, name: str, error: Exception) -> None:
        logger.warning(
            "Could not release lock %r while giving up the locks of %r: %s (it is released "
            "when the backend answers again, or when its lease ends).",
            name,
            list(self.names),
            error,
        )
