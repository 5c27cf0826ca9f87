"""What one owner holds of one lock, and how its events are announced.

A process keeps one :class:`Hold` per (backend, lock name, owner), whichever handles the owner
used to acquire (``with lock("x"): with lock("x"):`` is one hold counted twice), so the hold
count it sends with each acquire and release is the whole truth: the backend then never
counts a hold its owner does not know of (one left by an acquire that reported failure), and
a reentrant acquire whose lease has ended is refused and reported as a loss.

Every announcement goes out as a log line on the ``django_redis_lock`` logger and a Django
signal (:mod:`django_redis_lock.signals`); a lost hold also calls the callback the handle gave
it (the handle's ``on_lost``, run where the handle says), once.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from django.dispatch import Signal

from ..signals import lock_acquired, lock_lost, lock_released
from .aio import keep_until_done
from .observe import Loss, notify, observers
from .renewal import Lease

if TYPE_CHECKING:
    from ..backends.base import BaseLockBackend

__all__ = ["Hold", "Holder", "held", "known_holds", "send"]


class Holder(Protocol):
    """What a hold reads of the handle that took it, the sender of the hold's signals."""

    @property
    def name(self) -> str: ...

    @property
    def using(self) -> str: ...


logger = logging.getLogger("django_redis_lock")


@dataclass(eq=False)
class Hold:
    """One owner's hold of one lock, shared by the owner's handles; times are monotonic.

    ``lock`` is the handle that took it first, and ``on_lost`` what it asked to be called
    (from any thread) when the hold is lost.
    """

    lock: Holder
    backend: BaseLockBackend
    owner: str
    fencing_token: int
    acquired_at: float
    count: int = 1
    #: The most holders it shares the lock with (``limit``; see ``AcquireRequest.limit``).
    limit: int = 1
    #: The id of the last acquire that took or counted this hold (see ``withdraw``).
    attempt: str = ""
    #: When the lease taken by the last acquire ends, as this process knows it (renewal
    #: moves ``lease.ends`` on from there).
    ends: float = 0.0
    lease: Lease | None = None
    #: Why the hold was lost (None while it is not): the one record of a loss.
    lost_reason: str | None = None
    on_lost: Callable[[], None] | None = None

    def announce_acquired(self, waited: float) -> None:
        """Log and signal that the hold was taken after ``waited`` seconds."""
        logger.debug(
            "Acquired lock %r (fencing token %s) after %.3fs.",
            self.lock.name,
            self.fencing_token,
            waited,
        )
        if lock_acquired.receivers:  # the arguments are not built when nobody listens
            self._send(lock_acquired, waited=waited)

    def announce_released(self, holds_left: int) -> None:
        """Log, and signal once the lock is free, that the owner dropped one hold."""
        logger.debug("Released lock %r (%s holds left).", self.lock.name, holds_left)
        if holds_left == 0 and (lock_released.receivers or observers):
            held_for = time.monotonic() - self.acquired_at
            notify("released", self.lock.using, self.lock.name, held_for)
            if lock_released.receivers:
                self._send(lock_released, held_for=held_for)

    def report_lost(self, loss: Loss) -> None:
        """Mark the hold lost and say so loudly, once: log, signal, ``on_lost`` callback."""
        if self.lost_reason is not None:
            return
        self.lost_reason = reason = loss.sentence
        lock = self.lock
        held_for = time.monotonic() - self.acquired_at
        logger.warning(
            "Lock %r was lost by owner %s after %.1fs: %s.",
            lock.name,
            self.owner,
            held_for,
            reason,
        )
        if observers:
            notify("lost", lock.using, lock.name, held_for, loss.reason)
        self._send(lock_lost, held_for=held_for, reason=reason)
        if self.on_lost is not None:
            self.on_lost()

    def lost_message(self) -> str:
        """Return the message of the LockLostError raised for this lost hold."""
        return (
            f"Lock {self.lock.name!r} was lost before the end of its hold ({self.lost_reason}), "
            "so another owner may have run at the same time."
        )

    def _send(self, signal: Signal, **extra: object) -> None:
        # A receiver that raises must not change what the lock does (leave a hold unreleased,
        # a loss unreported): its error is logged instead.
        lock = self.lock
        arguments = {
            "sender": type(lock),
            "lock": lock,
            "name": lock.name,
            "using": lock.using,
            "owner": self.owner,
            "fencing_token": self.fencing_token,
            **extra,
        }
        send(signal, lock.name, arguments)


def send(signal: Signal, name: str, arguments: dict[str, Any]) -> None:
    """Send ``signal`` with ``arguments`` robustly: a receiver that raises is logged.

    ``name`` is the lock's (or rate limit's), for the log line.
    """
    if _has_async_receivers(signal, arguments["sender"]):
        # Django cannot run async receivers from an event loop's own thread in send():
        # there, a task on the loop sends the signal, just after the event.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            task = keep_until_done(loop.create_task(signal.asend_robust(**arguments)))
            task.add_done_callback(functools.partial(_sent, name))
            return
    _log_failures(name, signal.send_robust(**arguments))


#: Every hold of this process: (backend, lock name, owner) -> Hold.
held: dict[tuple[BaseLockBackend, str, str], Hold] = {}


def known_holds(backend: BaseLockBackend, name: str, owner: str) -> int:
    """Return how many holds of ``name`` this process knows ``owner`` has on ``backend``."""
    hold = held.get((backend, name, owner))
    return 0 if hold is None else hold.count


# A forked child holds nothing of its parent's.
os.register_at_fork(after_in_child=held.clear)


def _has_async_receivers(signal: Signal, sender: type) -> bool:
    if not signal.receivers:
        return False
    # Django >= 5.0 tells its sync and async receivers apart.
    return bool(signal._live_receivers(sender)[1])


def _sent(name: str, task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        _log_failures(name, task.result())


def _log_failures(name: str, replies: Sequence[tuple[object, object]]) -> None:
    for receiver, reply in replies:
        if isinstance(reply, Exception):
            logger.error(
                "A receiver of a lock signal failed for %r: %r",
                name,
                receiver,
                exc_info=reply,
            )
