"""Internal hooks for metrics: the observers told of every acquire, release, loss and renewal.

:data:`observers` is empty unless metrics are enabled (``django_redis_lock.contrib.prometheus``
adds one), so with none the cost of a hook is one test of an empty list. An acquire is
observed by wrapping its loop (:func:`observed`) only when an observer is present; releases,
losses and renewal round trips call :func:`notify` behind the same test.

Observers must be cheap and must not raise: they run on the lock's own path.
"""

from __future__ import annotations

import time
from typing import Any

from ._steps import Steps, WaitThenClaim
from .backends.base import AcquireRequest, AcquireResult, BaseLockBackend

__all__ = ["LOSS_REASONS", "Observer", "loss_reason", "notify", "observed", "observers"]

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


def observed(using: str, name: str, blocking: bool, timeout: float | None, steps: Steps) -> Steps:
    """Run the acquire loop ``steps`` unchanged, telling the observers how it ended.

    The owner is queued once a request that asked to wait (``wait`` > 0) was refused.
    """
    started = time.monotonic()
    queued = outcome = False
    result: str = "error"
    try:
        step = next(steps)
        while True:
            request = step.request if isinstance(step, WaitThenClaim) else step
            try:
                reply = yield step
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as error:
                step = steps.throw(error)
                continue
            if (
                not queued
                and isinstance(reply, AcquireResult)
                and not reply.acquired
                and not reply.lost
                and isinstance(request, AcquireRequest)
                and request.wait > 0
            ):
                queued = True
                notify("waiting", using, name, 1)
            step = steps.send(reply)
    except StopIteration as done:
        outcome = bool(done.value)
        result = "acquired" if outcome else "timeout" if blocking and timeout else "refused"
        return outcome
    finally:
        if queued:
            notify("waiting", using, name, -1)
        notify(
            "acquire_ended",
            using,
            name,
            result,
            time.monotonic() - started,
            outcome and queued,
        )
