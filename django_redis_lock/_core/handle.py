"""What :class:`~django_redis_lock.Lock` and :class:`~django_redis_lock.AsyncLock` share:
their holds, the acquire loop, and every decision around their I/O.

The acquire loop is one generator of backend calls (:meth:`LockHandle._steps`); each handle
runs it with its own I/O, blocking or awaited, and throws a call's error back in where the
call was yielded. The handles' other methods are I/O between two decisions taken here.
"""

from __future__ import annotations

import logging
import time

from ..backends.base import AcquireRequest, AcquireResult, BaseLockBackend, ReleaseRequest
from ..exceptions import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    LockError,
    LockLostError,
    LockNotOwnedError,
)
from .holds import Hold, held, known_holds
from .losses import LossReports
from .observe import UNWATCHED, Loss, LossReason, Unwatched, Watch, observers
from .owner import new_attempt
from .renewal import Lease, renewer
from .steps import Step, Steps, WaitThenClaim, Withdraw

__all__ = ["REGISTRATION_MARGIN", "LockHandle", "Step", "Steps", "WaitThenClaim", "Withdraw"]

logger = logging.getLogger("django_redis_lock")

#: A waiter's registration outlives its wait by this much, so a release that comes just as
#: the wait times out still finds it registered.
REGISTRATION_MARGIN = 1.0

#: A waiter asks again at least this often (seconds). A lock handed to a waiter that died or
#: was paused is claimable for one second only (CLAIM_MS in the Lua scripts), so the next
#: waiter takes it within about two.
WAIT_SLICE = 2.0

#: How long an acquire left without an answer is withdrawn for, at most (seconds).
UNDO_FOR = 60.0

#: An acquire whose lease ends before its answer comes, this many times in a row, has a ttl
#: shorter than the round trip to the server (once is a pause of this process): refused.
LATE_ANSWERS = 3


class LockHandle(LossReports):
    """The holds, acquire loop and decisions of a lock handle; subclasses do the I/O."""

    @property
    def fencing_token(self) -> int | None:
        """Return the fencing token of the calling owner's hold, taken through this handle.

        None until this handle acquires for the caller, and again after its last release.
        Tokens grow strictly with each new holder of this name: pass yours to the resource
        you write to, so it can refuse a writer whose token is older than one it has seen.
        """
        hold = self._hold()
        return None if hold is None else hold.fencing_token

    @property
    def lost(self) -> bool:
        """Return whether the calling owner's hold (or its last one) was lost.

        A hold is lost when its lease ended, or another owner took the lock, before release.
        """
        hold = self._hold() or self._lost.get(self._owner_token())
        return hold is not None and hold.lost_reason is not None

    def _hold(self) -> Hold | None:
        """Return the calling owner's hold of this lock, if it has one."""
        return held.get((self.backend, self.name, self._owner_token()))

    # The acquire loop --------------------------------------------------------------------------

    def _steps(
        self,
        backend: BaseLockBackend,
        owner: str,
        blocking: bool,
        timeout: float | None,
        *,
        renew: bool,
    ) -> Steps:
        """Run the acquire loop, and decide what an error thrown into it leaves behind."""
        before = known_holds(backend, self.name, owner)
        # One id for every call of this acquire: a withdrawal undoes whatever any of them
        # registered or took (a grant to its registration included), and nothing later.
        attempt = new_attempt()
        watch = Watch(self.using, self.name, blocking, timeout) if observers else UNWATCHED
        try:
            return (
                yield from self._attempts(
                    backend, owner, blocking, timeout, attempt, renew=renew, watch=watch
                )
            )
        except GeneratorExit:
            raise
        except BackendUnavailableError:
            # No answer: the attempt may still run, or have run. Undone once the server answers.
            self._withdraw_later(backend, owner, attempt)
            raise
        except LockError:
            raise
        except BaseException as interrupted:
            # Interrupted (KeyboardInterrupt, a cancelled task) with the outcome unknown: undo
            # it all, here and on the backend.
            self._undo_acquire(backend, owner, before)
            try:
                yield Withdraw(before, attempt)
            except LockError:  # the interruption, not this, is the news
                self._withdraw_later(backend, owner, attempt)
            raise interrupted
        finally:
            watch.end()

    def _attempts(
        self,
        backend: BaseLockBackend,
        owner: str,
        blocking: bool,
        timeout: float | None,
        attempt: str,
        *,
        renew: bool,
        watch: Unwatched = UNWATCHED,
    ) -> Steps:
        lease = self._lease_on(backend)
        hold = held.get((backend, self.name, owner))
        if hold is not None and hold.lost_reason is not None:
            raise LockLostError(hold.lost_message(), lock_name=self.name)
        if hold is not None and self.limit < hold.limit:
            raise self._upgrade_refused(hold.limit)
        known = 0 if hold is None else hold.count
        holder, started = self._holder_json(), time.monotonic()
        deadline = None if timeout is None else started + timeout
        pause: float | None = None  # after a first refusal: wait this long, then claim
        late = 0  # leases in a row that ended before their answer came
        while True:
            remaining = None if deadline is None else deadline - time.monotonic() - (pause or 0)
            waiting = blocking and (remaining is None or remaining > 0)
            window = backend.max_wait if remaining is None else min(remaining, backend.max_wait)
            request = AcquireRequest(
                ttl=lease,
                metadata=holder,
                limit=self.limit,
                fair=self.fair,
                wait=window + REGISTRATION_MARGIN if waiting else 0.0,
                claim=pause is not None,
                holds=known,
                attempt=attempt,
            )
            sent = time.monotonic()
            result = yield request if pause is None else WaitThenClaim(pause, request)
            assert result is not None
            if result.stricter:
                raise self._upgrade_refused(None if hold is None else hold.limit)
            if result.lost:
                assert hold is not None
                raise self._lost_nested(hold)
            # A lease that ended before this process saw the reply (it was paused, or waited
            # longer than the lease before its claim ran) is no hold.
            ends = sent + (lease if result.lease is None else result.lease)
            if result.acquired and time.monotonic() < ends:
                self._held(
                    backend,
                    owner,
                    result,
                    attempt=attempt,
                    ends=ends,
                    started=started,
                    renew=renew,
                )
                watch.acquired = True
                return True
            if result.acquired:
                if hold is not None:
                    raise self._lost_nested(hold)
                late += 1
                if late == LATE_ANSWERS:
                    raise self._lease_too_short(lease, time.monotonic() - sent)
                pause = 0.0  # claim again at once: the lease, not the attempt, ended
                continue
            late = 0
            if not waiting:
                left = deadline - time.monotonic() if blocking and deadline else 0.0
                if left > 0:  # the wait before this try ended early (Redlock's are jittered)
                    pause = left
                    continue
                if blocking and timeout:
                    logger.warning(
                        "Gave up acquiring lock %r after %.3fs: another owner holds it.",
                        self.name,
                        time.monotonic() - started,
                    )
                watch.acquired = False
                return False
            # Woken by a handoff or not, the next attempt claims: a grant is short until
            # claimed, and the claim is refused if the grant has lapsed meanwhile.
            pause = min(window, result.retry_after or window, WAIT_SLICE)
            watch.queued()

    def _lease_too_short(self, lease: float, round_trip: float) -> InvalidLockArgumentError:
        return InvalidLockArgumentError(
            f"Lock {self.name!r}: a lease of {lease:g}s ended {LATE_ANSWERS} times in a row "
            f"before the server's answer came (the last round trip took {round_trip:.3f}s); "
            "a ttl must be longer than a round trip to the server.",
            lock_name=self.name,
        )

    def _lost_nested(self, hold: Hold) -> LockLostError:
        self._lost_by(hold)(Loss(LossReason.ENDED, "its lease ended before a nested acquire"))
        return LockLostError(hold.lost_message(), lock_name=self.name)

    def _undo_acquire(self, backend: BaseLockBackend, owner: str, before: int) -> None:
        """Forget a hold counted by an acquire that was interrupted (the backend is told apart)."""
        key = (backend, self.name, owner)
        hold = held.get(key)
        if hold is None or hold.count <= before:
            return
        if before:
            hold.count = before
            return
        if hold.lease is not None:
            renewer.remove(hold.lease)
        del held[key]

    def _withdraw_later(self, backend: BaseLockBackend, owner: str, attempt: str) -> None:
        """Have the renewal thread undo ``attempt`` once the backend answers again.

        Tried for as long as the server remembers a withdrawn attempt (a minute), and as long
        as the attempt's lease: what it left after that has ended by itself.
        """
        name = self.name
        renewer.withdraw_later(
            backend,
            name,
            owner,
            attempt,
            keep=lambda: known_holds(backend, name, owner),
            until=time.monotonic() + max(UNDO_FOR, self._lease_on(backend) + backend.max_wait),
        )

    def _held(
        self,
        backend: BaseLockBackend,
        owner: str,
        result: AcquireResult,
        *,
        attempt: str,
        ends: float,
        started: float,
        renew: bool,
    ) -> None:
        key = (backend, self.name, owner)
        hold = held.get(key)
        fresh = hold is None  # a reentrant acquire is announced once, with the first
        if hold is None:
            assert result.fencing_token is not None
            hold = held[key] = Hold(
                self,
                backend,
                owner,
                result.fencing_token,
                time.monotonic(),
                limit=self.limit,
                on_lost=self._on_lost_callback(),
            )
            self._lost.pop(owner, None)
        hold.count, hold.attempt, hold.ends = result.holds or 1, attempt, ends
        if renew and hold.lease is None:
            max_hold = self._max_hold_on(backend)
            hold.lease = Lease(
                backend=backend,
                name=self.name,
                owner=owner,
                ttl=self._lease_on(backend),
                ends=ends,
                on_lost=self._lost_by(hold),
                stop_at=None if max_hold is None else time.monotonic() + max_hold,
                orphaned=self._orphan_check(),
                min_hold=self.min_hold,
            )
            renewer.add(hold.lease)
        if fresh:
            hold.announce_acquired(time.monotonic() - started)

    # Releasing, checking, leaving a block --------------------------------------------------------

    def _forget(self, owner: str) -> None:
        """Stop renewing ``owner``'s hold and forget it here, leaving it held on the server.

        For a hold that something else takes on (a Celery claim going on with a retry).
        """
        hold = held.pop((self.backend, self.name, owner), None)
        if hold is not None and hold.lease is not None:
            renewer.remove(hold.lease)

    def _before_release(self, backend: BaseLockBackend, owner: str) -> Hold | None:
        hold = held.get((backend, self.name, owner))
        if hold is not None and hold.count == 1 and hold.lease is not None:
            renewer.remove(hold.lease)  # before the release: a late renewal is then no loss
        return hold

    def _release_request(self, hold: Hold | None) -> ReleaseRequest:
        """Return what a release of ``hold`` (None: one this process did not record) asks."""
        return ReleaseRequest(holds=None if hold is None else hold.count, min_hold=self.min_hold)

    def _answered(self, owner: str, hold: Hold | None, answer: int | LockError | None) -> None:
        """Record a release's answer, or the error it met instead (then raised)."""
        if isinstance(answer, LockError):
            self._release_failed(owner, hold)
            raise answer
        self._released(owner, hold, answer)

    def _released(self, owner: str, hold: Hold | None, left: int | None) -> None:
        """Record what the backend's release answered; raise if the owner held nothing."""
        if hold is not None and (left is None or left == 0):
            held.pop((hold.backend, self.name, owner), None)
        if left is None:
            if hold is not None:
                self._lost_by(hold)(Loss(LossReason.ENDED, "its lease ended before release"))
            raise self._not_owned("release")
        if hold is not None:
            hold.count = left
            hold.announce_released(left)

    def _release_failed(self, owner: str, hold: Hold | None) -> None:
        """Count a release whose reply never came as done; the backend is told later."""
        if hold is None:
            return
        hold.count -= 1
        if hold.count <= 0:
            held.pop((hold.backend, self.name, owner), None)
        self._withdraw_later(hold.backend, owner, hold.attempt)

    def _extended(self, remaining: float | None) -> float:
        """Return what an extend answered; raise if the owner held nothing."""
        if remaining is None:
            raise self._not_owned("extend")
        return remaining

    def _not_owned(self, action: str) -> LockNotOwnedError:
        return LockNotOwnedError(
            f"Cannot {action} lock {self.name!r}: this owner does not hold it (never "
            "acquired, already released, or its lease ended).",
            lock_name=self.name,
        )

    def _hold_to_check(self) -> tuple[Hold, bool]:
        """Return the caller's hold for ``check()``, and whether to ask the backend about it.

        Only the backend can tell whether a hold that is not renewed is still live.
        """
        hold = self._hold()
        if hold is None:
            raise self._not_owned("check")
        return hold, hold.lost_reason is None and hold.lease is None

    def _checked(self, hold: Hold, live: bool) -> None:
        """Finish ``check()``: ``live`` is false when the backend knew no lease of the owner."""
        if not live:
            self._lost_by(hold)(Loss(LossReason.ENDED, "its lease ended"))
        if hold.lost_reason is not None:
            raise LockLostError(hold.lost_message(), lock_name=self.name)

    def _left(self, hold: Hold | None, exc: BaseException | None) -> None:
        """Finish leaving a ``with`` block, after its release: raise if the hold was lost.

        The block's own exception ``exc`` (or ``raise_on_lost=False``) wins over the loss,
        which was logged and signalled all the same.
        """
        if exc is None and self.raise_on_lost and hold and hold.lost_reason is not None:
            raise LockLostError(hold.lost_message(), lock_name=self.name)
