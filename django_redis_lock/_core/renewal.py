"""Lease renewal: one daemon thread per process keeps the leases of held locks alive.

A lock held with ``auto_renew`` registers its lease here. The thread wakes when the earliest
lease is a third of the way through, and then renews *every* registered lease of that
server together, in one round trip (:meth:`BaseLockBackend.renew`), so a process holding a
thousand locks costs one round trip per interval, not a thousand. Each server's round trip
runs in a thread of its own, so a server that does not answer never delays another's.

It also withdraws, as soon as their server answers again, the acquires and releases whose
reply never came (the server was frozen or cut off): such an acquire may still run, or have
run, and must not leave a hold that nobody knows of until its lease ends.

A lease that renewal finds gone (ended, force-released, or taken by another owner) is never
revived: the backend's renew is owner-checked. Its holder is told through the callback it
registered. A lease stops being renewed when its lock is released (before the release is
sent, so a late renewal reply can never be mistaken for a loss), or when its ``max_hold``
runs out; the holder then learns of the loss when the lease ends. A lease whose holder can
no longer release it (its thread or asyncio task ended, its event loop closed) is never
renewed again: the renewal thread releases it on the server for the holder, so another owner
need not wait for the lease to end, and reports the hold lost.

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

from ..backends.base import BaseLockBackend, ReleaseRequest
from ..exceptions import LockError
from .observe import Loss, LossReason, notify, observers

__all__ = ["Lease", "Renewer", "Undo", "renewer"]

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
    on_lost: Callable[[Loss], None]
    stop_at: float | None = None
    #: Return why nobody can release the lock any more (its holder's thread ended, say), or
    #: None: an orphaned lease is no longer renewed, but released here and reported lost.
    orphaned: Callable[[], Loss | None] | None = None
    #: The ``min_hold`` of the handle, which the release of an orphaned lease keeps too.
    min_hold: float = 0.0
    due: float = field(init=False)
    active: bool = field(default=True, init=False)
    renewing: bool = field(default=True, init=False)
    #: Being renewed by a lane thread right now: not due again until it answers.
    busy: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        now = time.monotonic()
        self.due = now + (self.ends - now) / 3


@dataclass(eq=False)
class Undo:
    """An acquire or release that got no answer, to withdraw once its server answers."""

    backend: BaseLockBackend
    name: str
    owner: str
    attempt: str
    #: The holds the owner knows of when the withdrawal is sent (it may have moved on).
    keep: Callable[[], int]
    #: After this, whatever the attempt left has ended with its lease: nothing to undo.
    until: float
    due: float = field(default_factory=time.monotonic)
    busy: bool = field(default=False, init=False)


#: Work for one lane: the leases to renew and the attempts to withdraw on one server.
_Batch = tuple[list[Lease], list[Undo]]


class Renewer:
    """The per-process registry of leases and the threads that renew them.

    One scheduling thread decides what is due; the round trips run on one *lane* per server
    (per backend, and per primary of a Redis Cluster), each a short-lived thread, so a server
    that does not answer delays only the leases it holds, never those on another server.
    """

    def __init__(self) -> None:
        # Held directly (not through the condition) where nobody waits, as it is cheaper.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._leases: set[Lease] = set()
        self._undos: list[Undo] = []
        self._thread: threading.Thread | None = None
        self._wakes_at = float("inf")

    def add(self, lease: Lease) -> None:
        """Start renewing ``lease``."""
        with self._lock:
            self._leases.add(lease)
            self._wake(lease.due)

    def withdraw_later(
        self,
        backend: BaseLockBackend,
        name: str,
        owner: str,
        attempt: str,
        *,
        keep: Callable[[], int],
        until: float,
    ) -> None:
        """Withdraw ``attempt`` of ``owner`` as soon as the backend answers (before ``until``)."""
        with self._cond:
            self._undos.append(Undo(backend, name, owner, attempt, keep, until))
            self._wake(time.monotonic())

    def drop_undos(self, backend: BaseLockBackend) -> None:
        """Give up the withdrawals still waiting for ``backend``'s servers."""
        with self._cond:
            self._undos = [undo for undo in self._undos if undo.backend is not backend]

    def _wake(self, due: float) -> None:
        # Called with the lock held.
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="django-redis-lock-renewal", daemon=True
            )
            self._thread.start()
        if due < self._wakes_at:
            # Waking the thread costs a context switch: only when it must wake sooner.
            self._cond.notify()

    def remove(self, lease: Lease) -> None:
        """Stop renewing ``lease``; a renewal already sent for it is ignored."""
        with self._lock:
            lease.active = False
            self._leases.discard(lease)

    def __len__(self) -> int:
        with self._cond:
            return len(self._leases)

    def lateness(self) -> tuple[dict[BaseLockBackend, float], bool]:
        """Return how far past due the latest lease of each backend is, and if the thread runs.

        Only backends with a lease past its due time are listed, in seconds. The thread is
        reported running when it is alive, or when no lease is held (it starts on demand).
        """
        with self._lock:
            now = time.monotonic()
            late: dict[BaseLockBackend, float] = {}
            for lease in self._leases:
                if lease.due < now:
                    late[lease.backend] = max(late.get(lease.backend, 0.0), now - lease.due)
            thread = self._thread
            running = not self._leases or (thread is not None and thread.is_alive())
            return late, running

    def _run(self) -> None:
        try:
            while True:
                for lane, batch in self._wait_for_due().items():
                    threading.Thread(
                        target=self._work,
                        args=(lane[0], batch),
                        name="django-redis-lock-renewal-lane",
                        daemon=True,
                    ).start()
        finally:  # a thread that could not be started, say: the next registration starts one
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _wait_for_due(self) -> dict[tuple[BaseLockBackend, object], _Batch]:
        with self._cond:
            while True:
                now = time.monotonic()
                self._undos = [undo for undo in self._undos if undo.until > now]
                work: list[Lease | Undo] = [*self._leases, *self._undos]
                # A lane takes every lease and undo of its server, once one of them is due;
                # a lane still waiting for its server takes nothing more meanwhile.
                busy = {_lane(item) for item in work if item.busy}
                idle = [item for item in work if not item.busy and _lane(item) not in busy]
                due = min((item.due for item in idle), default=float("inf"))
                if due <= now:
                    break
                self._wakes_at = due
                self._cond.wait(None if due == float("inf") else due - now)
            self._wakes_at = float("inf")
            due_lanes = {_lane(item) for item in idle if item.due <= now}
            chosen: dict[tuple[BaseLockBackend, object], _Batch] = {}
            for item in idle:
                lane = _lane(item)
                if lane in due_lanes:
                    item.busy = True
                    leases, undos = chosen.setdefault(lane, ([], []))
                    if isinstance(item, Lease):
                        leases.append(item)
                    else:
                        undos.append(item)
            return chosen

    def _work(self, backend: BaseLockBackend, batch: _Batch) -> None:
        leases, undos = batch
        try:
            if undos:
                self._withdraw(backend, undos)
            if leases:
                self._renew(backend, leases)
        except Exception:  # the thread must outlive any one failure
            logger.exception("Renewing %d lease(s) failed unexpectedly.", len(leases))
        finally:
            items: list[Lease | Undo] = [*leases, *undos]
            with self._cond:
                for item in items:
                    item.busy = False
                self._cond.notify()

    def _withdraw(self, backend: BaseLockBackend, undos: list[Undo]) -> None:
        for position, undo in enumerate(undos):
            sent = time.monotonic()
            try:
                backend.withdraw(undo.name, undo.owner, undo.keep(), undo.attempt)
            except Exception as exc:  # retried until its lease would have ended (undo.until)
                if not isinstance(exc, LockError):
                    logger.warning(
                        "Withdrawing an attempt on lock %r failed unexpectedly.",
                        undo.name,
                        exc_info=exc,
                    )
                # Again at once after a time-out (a frozen server runs it as it wakes), a
                # little later after a quick refusal; the rest of the batch with it, as the
                # server would not answer them either.
                due = max(time.monotonic(), sent + RETRY_AFTER_FAILURE)
                for waiting in undos[position:]:
                    waiting.due = due
                return
            with self._cond:
                if undo in self._undos:
                    self._undos.remove(undo)

    def _renew(self, backend: BaseLockBackend, leases: list[Lease]) -> None:
        leases = [lease for lease in leases if not self._orphaned(lease)]
        sent = time.monotonic()
        lost: list[tuple[Lease, Loss]] = []
        for lease in leases:
            if lease.renewing and lease.stop_at is not None and sent >= lease.stop_at:
                lease.renewing = False
                lease.due = lease.ends
            elif not lease.renewing and sent >= lease.ends:
                sentence = "it reached its max_hold, and its lease was not renewed"
                lost.append((lease, Loss(LossReason.MAX_HOLD, sentence)))
        renewed = [lease for lease in leases if lease.renewing]
        try:
            remaining = backend.renew([(x.name, x.owner, x.ttl) for x in renewed])
        except Exception as exc:  # any failure is retried, and a lease that ends meanwhile told
            if not isinstance(exc, LockError):
                logger.warning(
                    "Renewing %d lease(s) failed unexpectedly.", len(renewed), exc_info=exc
                )
            if observers and renewed:
                notify("renewed", backend, len(renewed), time.monotonic() - sent, False)
            lost += self._failed(renewed, exc)
        else:
            if observers and renewed:
                notify("renewed", backend, len(renewed), time.monotonic() - sent, True)
            lost += self._renewed(renewed, remaining, sent)
        for lease, loss in lost:
            with self._cond:
                if not lease.active:
                    continue  # released meanwhile: not a loss
                lease.active = False
                self._leases.discard(lease)
            lease.on_lost(loss)

    def _orphaned(self, lease: Lease) -> bool:
        loss = None if lease.orphaned is None else lease.orphaned()
        if loss is None:
            return False
        with self._cond:
            if not lease.active:
                return True  # released meanwhile (an owner= token shared with another loop)
            lease.active = False
            self._leases.discard(lease)
        # Nobody is left to release it: waiting for the lease to end would keep every other
        # owner out for a ttl, and a hold that nobody will ever release is a lost hold.
        try:
            release = ReleaseRequest(holds=1, min_hold=lease.min_hold)
            lease.backend.release(lease.name, lease.owner, release)
        except Exception as exc:  # the lease then ends by itself, within a ttl
            freed = f"It ends with its lease, as releasing it failed: {exc}"
        else:
            freed = "Released it on the server"
        logger.warning(
            "Stopped renewing lock %r of owner %s: %s. %s.",
            lease.name,
            lease.owner,
            loss.sentence,
            freed,
        )
        lease.on_lost(loss)
        return True

    def _renewed(
        self, leases: list[Lease], remaining: Sequence[float | LockError | None], sent: float
    ) -> list[tuple[Lease, Loss]]:
        lost = []
        unknown: dict[LockError, list[Lease]] = {}
        for lease, left in zip(leases, remaining, strict=True):
            if isinstance(left, LockError):
                unknown.setdefault(left, []).append(lease)  # retried, as a failed batch is
            elif left is None:
                sentence = "its lease ended, or another owner took the lock"
                lost.append((lease, Loss(LossReason.RENEWAL_REFUSED, sentence)))
            else:
                lease.ends = sent + left
                lease.due = sent + lease.ttl / 3
        for exc, failed in unknown.items():
            lost += self._failed(failed, exc)
        return lost

    def _failed(self, leases: list[Lease], exc: Exception) -> list[tuple[Lease, Loss]]:
        now = time.monotonic()
        logger.warning("Could not renew %d lease(s): %s", len(leases), exc)
        lost = []
        for lease in leases:
            if now >= lease.ends:
                sentence = f"its lease ended while renewal failed: {exc}"
                lost.append((lease, Loss(LossReason.RENEWAL_FAILED, sentence)))
            else:
                lease.due = now + min(RETRY_AFTER_FAILURE, (lease.ends - now) / 3)
        return lost

    def _forget_in_child(self) -> None:
        # A forked child holds none of its parent's locks and has no renewal thread.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._leases = set()
        self._undos = []
        self._thread = None
        self._wakes_at = float("inf")


def _lane(item: Lease | Undo) -> tuple[BaseLockBackend, object]:
    return item.backend, item.backend.server_of(item.name)


renewer = Renewer()
os.register_at_fork(after_in_child=renewer._forget_in_child)
