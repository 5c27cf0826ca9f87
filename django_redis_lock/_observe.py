"""Internal hooks for metrics: the observers told of every acquire, release, loss and renewal.

:data:`observers` is empty unless metrics are enabled (``django_redis_lock.contrib.prometheus``
adds one), so with none the cost of a hook is one test of an empty list. An acquire is
watched (:class:`Watch`) only when an observer is present; releases, losses and renewal
round trips call :func:`notify` behind the same test.

Observers must be cheap and must not raise: they run on the lock's own path.
"""

from __future__ import annotations

import time
from typing import Any

from .backends.base import BaseLockBackend

__all__ = [
    "LOSS_REASONS",
    "UNWATCHED",
    "Observer",
    "Unwatched",
    "Watch",
    "loss_reason",
    "notify",
    "observers",
]

#: Why a hold was lost, as a short code (a metric label): what each loss sentence starts with.
LOSS_REASONS = (
    ("it reached its max_hold", "max_hold"),
    ("its lease ended while renewal failed", "renewal_failed"),
    ("its lease ended, or another owner took the lock", "renewal_refused"),
    ("its lease ended", "ended"),
)


def loss_reason(sentence: str) -> str:
    """Return the short code of a loss ``sentence`` (``"other"`` if it is none known)."""
    for start, code in LOSS_REASONS:
        if sentence.startswith(start):
            return code
    return "other"


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

    def lost(self, using: str, name: str, held_for: float, reason: str) -> None:
        """A hold was lost; ``reason`` is a code of :data:`LOSS_REASONS` (or ``other``)."""

    def renewed(self, backend: BaseLockBackend, leases: int, seconds: float, ok: bool) -> None:
        """A renewal round trip for ``leases`` leases took ``seconds`` (``ok``: it answered)."""


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
