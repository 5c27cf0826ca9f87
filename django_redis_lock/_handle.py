"""What the blocking :class:`~django_redis_lock.Lock` and :class:`~django_redis_lock.AsyncLock`
share: their arguments, their holds, and the acquire loop itself.

The acquire loop is written once, as a generator of backend calls (:meth:`LockHandle._steps`):
each handle runs it with its own kind of I/O, blocking or awaited, so deadlines, waiting,
handoffs and reentrancy behave the same in both.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from ._validation import (
    validate_flag,
    validate_limit,
    validate_metadata,
    validate_name,
    validate_on_lost,
    validate_optional_flag,
    validate_owner,
    validate_timeout,
    validate_ttl,
)
from .backends.base import AcquireRequest, AcquireResult, BaseLockBackend, holder_metadata
from .conf import DEFAULT_ALIAS
from .exceptions import InvalidLockArgumentError, LockLostError, LockNotOwnedError
from .handler import locks
from .holds import Hold, held, known_holds
from .owner import new_attempt
from .renewal import Lease, renewer

__all__ = ["REGISTRATION_MARGIN", "LockHandle", "Steps", "WaitThenClaim"]

logger = logging.getLogger("django_redis_lock")

_HOST = socket.gethostname()

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


@dataclass(frozen=True, slots=True)
class WaitThenClaim:
    """A step of the acquire loop: wait up to ``seconds`` for a handoff, then claim.

    The driver sends it as ``backend.wait_and_claim(name, owner, seconds, request)``.
    """

    seconds: float
    request: AcquireRequest


#: The acquire loop: it yields backend calls (an AcquireRequest: ``acquire(name, owner,
#: request)``; a WaitThenClaim: ``wait_and_claim(...)``), is sent their replies, and returns
#: whether the lock was acquired.
Steps = Generator["AcquireRequest | WaitThenClaim", AcquireResult, bool]


class LockHandle:
    """The arguments, holds and acquire loop of a lock handle; subclasses do the I/O."""

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
        self.on_lost = validate_on_lost(on_lost, lock_name=name)
        self.raise_on_lost = validate_flag(raise_on_lost, argument="raise_on_lost", lock_name=name)
        self.owner = validate_owner(owner, lock_name=name)
        self._lost: set[str] = set()
        self._holder_cache: dict[str, tuple[int, bytes]] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} using={self.using!r}>"

    def _owner_token(self) -> str:
        """Return the token of the calling owner (a thread, or an asyncio task)."""
        raise NotImplementedError("subclasses of LockHandle must provide an _owner_token() method")

    def _where(self) -> str:
        """Return what runs the caller, as shown in listings (a thread's name, say)."""
        raise NotImplementedError("subclasses of LockHandle must provide a _where() method")

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
        hold = self._hold()
        return None if hold is None else hold.fencing_token

    @property
    def lost(self) -> bool:
        """Return whether the calling owner's hold (or its last one) was lost.

        A hold is lost when its lease ended, or another owner took the lock, before release.
        """
        hold = self._hold()
        return self._owner_token() in self._lost if hold is None else hold.lost_reason is not None

    def _hold(self) -> Hold | None:
        """Return the calling owner's hold of this lock, if it has one."""
        return held.get((self.backend, self.name, self._owner_token()))

    # The acquire loop --------------------------------------------------------------------------

    def _acquire_arguments(
        self, blocking: bool | None, timeout: float | None
    ) -> tuple[bool, float | None]:
        """Return the (blocking, timeout) that an ``acquire(blocking, timeout)`` call means."""
        if blocking is None:
            blocking = self.blocking
        if timeout is None:
            return blocking, self.timeout if blocking else None
        if not blocking:
            raise InvalidLockArgumentError(
                f"timeout cannot be given to a non-blocking acquire (got {timeout!r}).",
                lock_name=self.name,
            )
        return blocking, validate_timeout(timeout, lock_name=self.name)

    def _steps(
        self,
        backend: BaseLockBackend,
        owner: str,
        blocking: bool,
        timeout: float | None,
        *,
        renew: bool,
    ) -> Steps:
        lease = backend.default_ttl if self._ttl is None else self._ttl
        hold = held.get((backend, self.name, owner))
        if hold is not None and hold.lost_reason is not None:
            raise LockLostError(hold.lost_message(), lock_name=self.name)
        known = 0 if hold is None else hold.count
        holder, started = self._holder_json(), time.monotonic()
        deadline = None if timeout is None else started + timeout
        # One id for every call of this acquire: a withdrawal undoes whatever any of them
        # registered or took (a grant to its registration included), and nothing later.
        attempt = new_attempt()
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
            if result.lost:
                assert hold is not None
                raise self._lost_nested(hold)
            # A lease that ended before this process saw the reply (it was paused, or waited
            # longer than the lease before its claim ran) is no hold.
            ends = sent + (lease if result.lease is None else result.lease)
            if result.acquired and time.monotonic() < ends:
                assert result.fencing_token is not None
                self._held(
                    backend,
                    owner,
                    result,
                    attempt=attempt,
                    ends=ends,
                    started=started,
                    renew=renew,
                )
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
                if blocking and timeout:
                    logger.warning(
                        "Gave up acquiring lock %r after %.3fs: another owner holds it.",
                        self.name,
                        time.monotonic() - started,
                    )
                return False
            # Woken by a handoff or not, the next attempt claims: a grant is short until
            # claimed, and the claim is refused if the grant has lapsed meanwhile.
            pause = min(window, result.retry_after or window, WAIT_SLICE)

    def _lease_too_short(self, lease: float, round_trip: float) -> InvalidLockArgumentError:
        return InvalidLockArgumentError(
            f"Lock {self.name!r}: a lease of {lease:g}s ended {LATE_ANSWERS} times in a row "
            f"before the server's answer came (the last round trip took {round_trip:.3f}s); "
            "a ttl must be longer than a round trip to the server.",
            lock_name=self.name,
        )

    def _lost_nested(self, hold: Hold) -> LockLostError:
        self._lost_by(hold)("its lease ended before a nested acquire")
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
            until=time.monotonic() + max(UNDO_FOR, self.lease + backend.max_wait),
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
        if hold is None:
            assert result.fencing_token is not None
            hold = held[key] = self._new_hold(backend, owner, result.fencing_token)
            self._lost.discard(owner)
            fresh = True
        else:
            fresh = False  # a reentrant acquire: announced once, with the first
        hold.count, hold.attempt, hold.ends = result.holds or 1, attempt, ends
        if renew and hold.lease is None:
            lease = backend.default_ttl if self._ttl is None else self._ttl
            hold.lease = Lease(
                backend=backend,
                name=self.name,
                owner=owner,
                ttl=lease,
                ends=ends,
                on_lost=self._lost_by(hold),
                stop_at=None if self.max_hold is None else time.monotonic() + self.max_hold,
                orphaned=self._orphan_check(),
            )
            renewer.add(hold.lease)
        if fresh:
            hold.announce_acquired(time.monotonic() - started)

    def _new_hold(self, backend: BaseLockBackend, owner: str, fencing_token: int) -> Hold:
        return Hold(self, backend, owner, fencing_token, time.monotonic())

    def _orphan_check(self) -> Callable[[], str | None] | None:
        """Return how the renewal thread learns that the holder can no longer release."""
        return None

    def _lost_by(self, hold: Hold) -> Callable[[str], None]:
        def lost(reason: str) -> None:
            if hold.lease is not None:
                renewer.remove(hold.lease)  # a lost lease is never renewed again
            self._lost.add(hold.owner)
            hold.report_lost(reason)

        return lost

    def _call_on_lost(self, hold: Hold) -> None:
        """Call the ``on_lost`` callback of a hold found lost (from any thread)."""
        if self.on_lost is None:
            return
        try:
            self.on_lost(self)
        except Exception:
            logger.exception("The on_lost callback of lock %r failed.", self.name)

    # Releasing -------------------------------------------------------------------------------

    def _before_release(self, backend: BaseLockBackend, owner: str) -> Hold | None:
        hold = held.get((backend, self.name, owner))
        if hold is not None and hold.count == 1 and hold.lease is not None:
            renewer.remove(hold.lease)  # before the release: a late renewal is then no loss
        return hold

    def _released(self, owner: str, hold: Hold | None, left: int | None) -> None:
        """Record what the backend's release answered; raise if the owner held nothing."""
        if hold is not None and (left is None or left == 0):
            held.pop((hold.backend, self.name, owner), None)
        if left is None:
            if hold is not None:
                self._lost_by(hold)("its lease ended before release")
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

    def _not_owned(self, action: str) -> LockNotOwnedError:
        return LockNotOwnedError(
            f"Cannot {action} lock {self.name!r}: this owner does not hold it (never "
            "acquired, already released, or its lease ended).",
            lock_name=self.name,
        )

    def _unrenewed(self, hold: Hold) -> bool:
        """Return whether only the backend can tell if ``hold`` is still live."""
        return hold.lost_reason is None and hold.lease is None

    def _wait_phrase(self) -> str:
        return "at once" if not self.blocking else f"within {self.timeout}s"

    def _holder_json(self) -> bytes:
        # Serialised once per thread or task name (again in a forked child: its pid differs).
        where, pid = self._where(), os.getpid()
        cached = self._holder_cache.get(where)
        if cached is None or cached[0] != pid:
            if len(self._holder_cache) >= 256:
                self._holder_cache.clear()  # task names come and go: keep the cache small
            text = holder_metadata(host=_HOST, pid=pid, thread=where, data=self.metadata)
            cached = self._holder_cache[where] = (pid, text)
        return cached[1]
