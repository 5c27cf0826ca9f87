"""How a lock handle learns that its caller's hold is lost, and tells the caller.

A hold is lost when its lease ended, another owner took the lock, or nobody is left to
release it (the thread or asyncio task holding it ended): the renewal thread, a release, or a
nested acquire finds out, and calls what :meth:`LossReports._lost_by` returns, from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .holds import Hold, held
from .lock_arguments import LockArguments
from .observe import Loss, LossReason
from .renewal import renewer

__all__ = ["LossReports"]

logger = logging.getLogger("django_redis_lock")


class LossReports(LockArguments):
    """The loss reporting of a lock handle; subclasses say how their holders can be orphaned."""

    def _orphan_check(self) -> Callable[[], Loss | None] | None:
        """Return how the renewal thread learns that the holder can no longer release."""
        ended = self._owners.orphan_check(own_token=self.owner is not None)
        if ended is None:
            return None

        def orphaned() -> Loss | None:
            why = ended()
            return None if why is None else Loss(LossReason.OWNER_ENDED, why)

        return orphaned

    def _on_lost_callback(self) -> Callable[[], None] | None:
        """Return what a hold taken now calls when it is lost (from any thread), if anything."""
        return None if self.on_lost is None else self._run_on_lost

    def _run_on_lost(self) -> None:
        """Call the ``on_lost`` callback; its error is logged, never raised."""
        assert self.on_lost is not None
        try:
            self.on_lost(self)
        except Exception:
            logger.exception("The on_lost callback of lock %r failed.", self.name)

    def _lost_by(self, hold: Hold) -> Callable[[Loss], None]:
        """Return what records ``hold`` as lost, for a reason given (from any thread)."""

        def lost(loss: Loss) -> None:
            lease = hold.lease
            if lease is not None:
                renewer.remove(lease)  # a lost lease is never renewed again
            if lease is None or lease.orphaned is None or not lease.orphaned():
                self._lost[hold.owner] = hold
            else:
                # Nobody is left to release it. Nor to ask about it, unless the owner is a
                # token of the caller's own: the record of a thread's or task's would only
                # grow with each one that ends so.
                key = (hold.backend, self.name, hold.owner)
                if held.get(key) is hold:
                    del held[key]
                if self.owner is not None:
                    self._lost[hold.owner] = hold
            hold.report_lost(loss)

        return lost
