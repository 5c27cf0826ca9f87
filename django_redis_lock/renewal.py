"""Lease renewal: one daemon thread per process keeps the leases of held locks alive.

A lock held with ``auto_renew`` registers its lease here. The thread wakes when the earliest
lease is a third of the way through, and then renews *every* registered lease of that
backend together, in one round trip (:meth:`BaseLockBackend.renew`), so a process holding a
thousand locks costs one round trip per interval, not a thousand.

A lease that renewal finds gone (ended, force-released, or taken by another owner) is never
revived: the backend's renew is owner-checked. Its holder is told through the callback it
registered. A lease stops being renewed when its lock is released (before the release is
sent, so a late renewal reply can never be mistaken for a loss), or when its ``max_hold``
runs out; the holder then learns of the loss when the lease ends.

The thread starts lazily on the first registration, and survives backend errors: it retries,
and reports a loss once its estimate of the lease's end has passed (an estimate that errs
early, by at most a round trip, never late). A forked child does not inherit it: the child
starts with no registered leases.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .backends.base import BaseLockBackend
from .exceptions import LockError

__all__ = ["Lease", "Renewer", "renewer"]

logger = logging.getLogger("django_redis_lock")

#: How soon a renewal is tried again after the backend failed, at most.
RETRY_AFTER_FAILURE = 1.0


@dataclass(eq=False)
class Lease:
    """One held lease to keep alive; times are :func:`time.monotonic` seconds."""

    backend: BaseLockBackend
    name: str
    owner: str
    ttl: float
    ends: float
    on_lost: Callable[[str], None]
    stop_at: float | None = None
    #: Renew once, at once, then forget the lease: for a lease handed over short to a holder
    #: that does not renew, so its acquire need not wait for a second round trip.
    once: bool = False
    #: Return why nobody can release the lock any more (its holder's event loop closed, say),
    #: or None: an orphaned lease is no longer renewed, and ends by itself.
    orphaned: Callable[[], str | None] | None = None
    due: float = field(init=False)
    active: bool = field(default=True, init=False)
    renewing: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        now = time.monotonic()
        self.due = now if self.once else now + (self.ends - now) / 3


class Renewer:
    """The per-process registry of leases and the thread that renews them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._leases: set[Lease] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = float("inf")

    def add(self, lease: Lease) -> None:
        """Start renewing ``lease``."""
        with self._cond:
            self._leases.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="django-redis-lock-renewal", daemon=True
                )
                self._thread.start()
            if lease.due < self._wakes_at:
                # Waking the thread costs a context switch: only when it must wake sooner.
                self._cond.notify()

    def remove(self, lease: Lease) -> None:
        """Stop renewing ``lease``; a renewal already sent for it is ignored."""
        with self._cond:
            lease.active = False
            self._leases.discard(lease)

    def __len__(self) -> int:
        with self._cond:
            return len(self._leases)

    def _run(self) -> None:
        while True:
            batches = self._wait_for_due()
            for backend, leases in batches.items():
                try:
                    self._renew(backend, leases)
                except Exception:  # the thread must outlive any one failure
                    logger.exception("Renewing %d lease(s) failed unexpectedly.", len(leases))

    def _wait_for_due(self) -> dict[BaseLockBackend, list[Lease]]:
        with self._cond:
            while True:
                now = time.monotonic()
                due = min((lease.due for lease in self._leases), default=float("inf"))
                if due <= now:
                    break
                self._wakes_at = due
                self._cond.wait(None if due == float("inf") else due - now)
            self._wakes_at = float("inf")
            backends = {lease.backend for lease in self._leases if lease.due <= now}
            return {
                backend: [lease for lease in self._leases if lease.backend is backend]
                for backend in backends
            }

    def _renew(self, backend: BaseLockBackend, leases: list[Lease]) -> None:
        leases = [lease for lease in leases if not self._orphaned(lease)]
        sent = time.monotonic()
        lost: list[tuple[Lease, str]] = []
        for lease in leases:
            if lease.renewing and lease.stop_at is not None and sent >= lease.stop_at:
                lease.renewing = False
                lease.due = lease.ends
            elif not lease.renewing and sent >= lease.ends:
                lost.append((lease, "it reached its max_hold, and its lease was not renewed"))
        renewed = [lease for lease in leases if lease.renewing]
        try:
            remaining = backend.renew([(x.name, x.owner, x.ttl) for x in renewed])
        except LockError as exc:
            lost += self._failed(renewed, exc)
        else:
            lost += self._renewed(renewed, remaining, sent)
        for lease, reason in lost:
            with self._cond:
                if not lease.active:
                    continue  # released meanwhile: not a loss
                lease.active = False
                self._leases.discard(lease)
            lease.on_lost(reason)

    def _orphaned(self, lease: Lease) -> bool:
        reason = None if lease.orphaned is None else lease.orphaned()
        if reason is None:
            return False
        self.remove(lease)
        logger.warning(
            "Stopped renewing lock %r of owner %s: %s. It ends with its lease.",
            lease.name,
            lease.owner,
            reason,
        )
        return True

    def _renewed(
        self, leases: list[Lease], remaining: Sequence[float | LockError | None], sent: float
    ) -> list[tuple[Lease, str]]:
        lost = []
        unknown: dict[LockError, list[Lease]] = {}
        for lease, left in zip(leases, remaining, strict=True):
            if isinstance(left, LockError):
                unknown.setdefault(left, []).append(lease)  # retried, as a failed batch is
            elif left is None:
                lost.append((lease, "its lease ended, or another owner took the lock"))
            elif lease.once:
                self.remove(lease)
            else:
                lease.ends = sent + left
                lease.due = sent + lease.ttl / 3
        for exc, failed in unknown.items():
            lost += self._failed(failed, exc)
        return lost

    def _failed(self, leases: list[Lease], exc: LockError) -> list[tuple[Lease, str]]:
        now = time.monotonic()
        logger.warning("Could not renew %d lease(s): %s", len(leases), exc)
        lost = []
        for lease in leases:
            if now >= lease.ends:
                lost.append((lease, f"its lease ended while renewal failed: {exc}"))
            else:
                lease.due = now + min(RETRY_AFTER_FAILURE, (lease.ends - now) / 3)
        return lost

    def _forget_in_child(self) -> None:
        # A forked child holds none of its parent's locks and has no renewal thread.
        self._cond = threading.Condition()
        self._leases = set()
        self._thread = None
        self._wakes_at = float("inf")


renewer = Renewer()
os.register_at_fork(after_in_child=renewer._forget_in_child)
