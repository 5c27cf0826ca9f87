"""Internal hooks for metrics: the observers told of every acquire, release, loss and renewal.

:data:`observers` is empty unless metrics are enabled (``django_redis_lock.contrib.prometheus``
adds one), so with none the cost of a hook is one test of an empty list. An acquire is
watched (:class:`Watch`) only when an observer is present; releases, losses and renewal
round trips call :func:`notify` behind the same test.

Observers must be cheap and must not raise: they run on the lock's own path.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any

from ..backends.base import BaseLockBackend

__all__ = [
    "UNWATCHED",
    "Loss",
    "LossReason",
    "Observer",
    "Unwatched",
    "Watch",
    "notify",
    "observers",
]


class LossReason(enum.Enum):
    """Why a hold was lost; the value is the label metrics give it."""

    #: Renewal stopped at the hold's ``max_hold``, and the lease then ended.
    MAX_HOLD = "max_hold"
    #: The lease ended while the server did not answer renewal.
    RENEWAL_FAILED = "renewal_failed"
    #: The server answered renewal that the lease was gone (it ended, or another owner took it).
    RENEWAL_REFUSED = "renewal_refused"
    #: A release or a nested acquire found the lease ended.
    ENDED = "ended"
    #: The thread, task or event loop holding it ended without releasing it.
    OWNER_ENDED = "owner_ended"


@dataclass(frozen=True)
class Loss:
    """A lost hold: why, for metrics, and the sentence that tells people (logs, signals)."""

    reason: LossReason
    sentence: str


class Observer:
    """What an observer is told; each method does nothing here. Times are seconds."""

    def acquire_ended(
        self, using: str, name: str, outcome: str, waited: float, handoff: bool
    ) -> None:
        """An acquire returned or raised: ``acquired``, ``timeout``, ``refused`` or ``error``.

        ``handoff``: the lock came to the owner while it was queued as a waiter.
        """

    def waiting(self, using: str, name: str, change: int) -> None:
        """An owner of this process joined (+1) or left (-1) the queue of waiters."""

    def released(self, using: str, name: str, held_for: float) -> None:
        """An owner dropped its last hold, ``held_for`` seconds after it acquired."""

    def lost(self, using: str, name: str, held_for: float, reason: LossReason) -> None:
        """A hold was lost, for ``reason``."""

    def renewed(self, backend: BaseLockBackend, leases: int, seconds: float, ok: bool) -> None:
        """A renewal round trip for ``leases`` leases took ``seconds`` (``ok``: it answered)."""

    def rate_limited(self, using: str, name: str, admitted: bool) -> None:
        """A rate limit's answer to one hit: admitted, or refused (the caller gave up on it)."""


#: The observers; empty by default.
observers: list[Observer] = []


def notify(event: str, *args: Any) -> None:
    """Tell every observer of ``event`` (an :class:`Observer` method's name)."""
    for observer in observers:
        getattr(observer, event)(*args)


class Unwatched:
    """An acquire nobody observes: what the acquire loop tells it is dropped.

    The acquire loop sets :attr:`acquired` as it returns and calls :meth:`queued` when a
    refusal leaves the owner registered as a waiter, then :meth:`end`.
    """

    __slots__ = ("acquired",)

    #: None while the loop runs, and if it raised.
    acquired: bool | None

    def queued(self) -> None:
        """Note that the owner waits in the queue."""

    def end(self) -> None:
        """Note that the acquire ended."""


#: The one unwatched acquire, shared: nothing reads what is set on it.
UNWATCHED = Unwatched()


class Watch(Unwatched):
    """One acquire, watched for the observers: how it ended, and whether it was queued."""

    __slots__ = ("blocking", "name", "started", "timeout", "using", "waited")

    def __init__(self, using: str, name: str, blocking: bool, timeout: float | None) -> None:
        self.using, self.name, self.blocking, self.timeout = using, name, blocking, timeout
        self.started = time.monotonic()
        self.acquired = None
        self.waited = False

    def queued(self) -> None:
        """Note that the owner waits in the queue (once per acquire)."""
        if not self.waited:
            self.waited = True
            notify("waiting", self.using, self.name, 1)

    def end(self) -> None:
        """Tell the observers how the acquire ended."""
        if self.waited:
            notify("waiting", self.using, self.name, -1)
        if self.acquired:
            outcome = "acquired"
        elif self.acquired is None:
            outcome = "error"
        else:
            outcome = "timeout" if self.blocking and self.timeout else "refused"
        waited = time.monotonic() - self.started
        for observer in observers:
            observer.acquire_ended(
                self.using, self.name, outcome, waited, bool(self.acquired and self.waited)
            )
