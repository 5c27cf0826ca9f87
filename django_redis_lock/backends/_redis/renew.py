"""Renewal on Redis: every lease a process holds on one server, in one pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...exceptions import LockError
from .keys import RedisKeyspace
from .protocol import extend_args, seconds
from .scripts import Scripts

__all__ = ["PipelinedRenewal"]


class PipelinedRenewal(RedisKeyspace):
    """Renew leases with the extend script, all of one server's in one round trip."""

    _scripts: Scripts

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        # Every lease in one pipeline: one round trip, however many locks are held.
        if not leases:
            return []
        with self._errors(None):
            self._scripts.load(self.client, "extend")
            return [seconds(reply) for reply in self._renew_on(self.client, leases)]

    def _renew_on(
        self,
        client: Any,
        leases: Sequence[tuple[str, str, float]],
        keep: tuple[type[Exception], ...] = (),
    ) -> list[Any]:
        """Renew ``leases`` in one pipeline on ``client``; raise the first error of any.

        Errors of the ``keep`` types stand in the list instead, in the place of their lease.
        """
        calls = [(self.key(name), extend_args(owner, ttl, True)) for name, owner, ttl in leases]
        replies = self._scripts.run_many(client, "extend", calls)
        for reply in replies:
            if isinstance(reply, self.family.error) and not isinstance(reply, keep):
                raise reply
        return replies
