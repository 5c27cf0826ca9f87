"""Checks for django-health-check (4 or later): each lock backend answers, renewal keeps up.

Install the ``health-check`` extra, keep ``health_check`` in ``INSTALLED_APPS``, and list the
checks in the view's ``checks``, one :class:`LockBackend` per alias of ``LOCKS``::

    HealthCheckView.as_view(checks=[
        ("django_redis_lock.contrib.health_check.LockBackend", {"alias": "default"}),
        "django_redis_lock.contrib.health_check.LockRenewal",
    ])

Each check names its alias in its ``repr`` and labels, and no message quotes a password.
"""

from __future__ import annotations

import dataclasses
import datetime

from ..._extras import missing_extra

try:
    from health_check.base import HealthCheck
    from health_check.exceptions import ServiceUnavailable
except ImportError as exc:
    raise missing_extra(
        exc,
        feature="django_redis_lock.contrib.health_check",
        package="django-health-check",
        extra="health-check",
    ) from exc

from ...backends.base import BaseLockBackend
from ...conf import DEFAULT_ALIAS
from ...exceptions import InvalidLockBackendError, LockError
from ...handler import locks
from ...renewal import renewer

__all__ = ["LockBackend", "LockRenewal"]


@dataclasses.dataclass
class LockBackend(HealthCheck):
    """Check that the backend of the ``LOCKS`` alias ``alias`` answers a ping.

    A server that is down or frozen fails the check within the backend's socket timeout
    (``socket_timeout`` in the alias's ``OPTIONS``): the ping is the backend's own
    :meth:`~django_redis_lock.backends.base.BaseLockBackend.ping`, with its timeouts.
    """

    alias: str = DEFAULT_ALIAS

    def run(self) -> None:
        """Ping the alias's backend; raise ``ServiceUnavailable`` naming the alias if it fails."""
        try:
            backend = locks[self.alias]
        except InvalidLockBackendError as exc:
            raise ServiceUnavailable(f"LOCKS alias {self.alias!r} is not usable: {exc}") from exc
        try:
            backend.ping()
        except LockError as exc:
            # The backend's messages show its location with any password as ***.
            raise ServiceUnavailable(f"LOCKS alias {self.alias!r}: {exc}") from exc


@dataclasses.dataclass
class LockRenewal(HealthCheck):
    """Check that this process's renewal thread keeps its leases on schedule.

    A held lock with ``auto_renew`` has its lease renewed when a third of it has passed: that
    moment is the lease's *due* time. The check fails when a lease of this process is past
    its due time by more than ``margin`` (a timedelta, one second by default), because its
    renewal waits for a server that does not answer or the thread cannot keep up; or when
    leases are held and the renewal thread is not running. With no lease held, it passes.
    """

    margin: datetime.timedelta = dataclasses.field(
        default=datetime.timedelta(seconds=1), repr=False
    )

    def run(self) -> None:
        """Raise ``ServiceUnavailable`` if renewal is behind schedule."""
        late, running = renewer.lateness()
        if not running:
            raise ServiceUnavailable("Leases are held, but the renewal thread is not running.")
        margin = self.margin.total_seconds()
        behind = {backend: delay for backend, delay in late.items() if delay > margin}
        if behind:
            where = "; ".join(
                f"{_described(backend)} by {delay:.1f} s" for backend, delay in behind.items()
            )
            raise ServiceUnavailable(
                f"Lease renewal is behind schedule by more than {margin:g} s: {where}."
            )


def _described(backend: BaseLockBackend) -> str:
    """Return the alias of ``backend`` if ``LOCKS`` has it, else its location (no password)."""
    for alias in locks:
        try:
            if locks[alias] is backend:
                return f"LOCKS alias {alias!r}"
        except InvalidLockBackendError:
            continue
    return backend.location
