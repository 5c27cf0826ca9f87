"""Checks for django-health-check (4 or later): each lock backend answers, renewal keeps up.

Install the ``health-check`` extra, keep ``health_check`` in ``INSTALLED_APPS``, and list the
checks in the view's ``checks``, one :class:`LockBackend` per alias of ``LOCKS``::

    HealthCheckView.as_view(checks=[
        ("django_redis_lock.contrib.health_check.LockBackend", {"alias": "default"}),
        "django_redis_lock.contrib.health_check.LockRenewal",
    ])

Each check names its alias in its ``repr`` and labels, and no message quotes a password.
Listing ``"django_redis_lock.contrib.health_check"`` in ``INSTALLED_APPS`` is not needed; it
is harmless (the app's label is ``django_redis_lock_health_check``), and makes
:class:`LockRenewal` watch for lost leases from start-up rather than from its first run.
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
from collections.abc import Collection
from typing import Any

from ..._core.extras import missing_extra

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

from ..._core.renewal import renewer
from ...backends.base import BaseLockBackend
from ...conf import DEFAULT_ALIAS
from ...exceptions import InvalidLockBackendError, LockError
from ...handler import locks
from ...signals import lock_lost

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
    leases are held and the renewal thread is not running. With no lease held, it passes,
    except that after a lease of this process was lost (its server did not answer its
    renewal, say), the check fails until that alias's backend answers a ping: the lease
    ending takes nothing away from the server's silence.
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
        problems = []
        if behind:
            where = "; ".join(
                f"{_described(backend)} by {delay:.1f} s" for backend, delay in behind.items()
            )
            problems.append(
                f"Lease renewal is behind schedule by more than {margin:g} s: {where}."
            )
        problems += _silent_since_a_loss(skip=behind)
        if problems:
            raise ServiceUnavailable(" ".join(problems))


#: The aliases on which a lease of this process was lost: their backend, and when.
_losses: dict[str, tuple[BaseLockBackend, float]] = {}
_losses_lock = threading.Lock()


def _note_loss(sender: object, using: str, **kwargs: Any) -> None:
    """Remember that a lease on alias ``using`` was lost (a ``lock_lost`` receiver)."""
    try:
        backend = locks[using]
    except InvalidLockBackendError:
        return
    with _losses_lock:
        recorded = _losses.get(using)
        if recorded is None or recorded[0] is not backend:  # the first loss says since when
            _losses[using] = (backend, time.monotonic())


lock_lost.connect(_note_loss, dispatch_uid=f"{__name__}._note_loss")


def _silent_since_a_loss(skip: Collection[BaseLockBackend]) -> list[str]:
    """Ping each alias that lost a lease; forget those that answer, describe the others."""
    with _losses_lock:
        losses = dict(_losses)
    problems = []
    for alias, (backend, since) in losses.items():
        try:
            current = locks[alias]
        except InvalidLockBackendError:
            current = None
        if current is backend:
            if backend in skip:
                continue  # said to be behind schedule already; kept until it answers
            try:
                backend.ping()
            except LockError as exc:
                problems.append(
                    f"LOCKS alias {alias!r} has not answered since a lease on it was lost "
                    f"{time.monotonic() - since:.1f} s ago: {exc}"
                )
                continue
        # It answered, or LOCKS changed since: nothing of that server's silence is left.
        with _losses_lock:
            if _losses.get(alias) == (backend, since):  # not lost again meanwhile
                del _losses[alias]
    return problems


def _described(backend: BaseLockBackend) -> str:
    """Return the alias of ``backend`` if ``LOCKS`` has it, else its location (no password)."""
    for alias in locks:
        try:
            if locks[alias] is backend:
                return f"LOCKS alias {alias!r}"
        except InvalidLockBackendError:
            continue
    return backend.location
