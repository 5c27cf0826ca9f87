"""System checks for the ``LOCKS`` setting (ids ``django_redis_lock.E001`` and up).

The configuration checks never contact a server. ``manage.py check --deploy`` also pings
every backend (``--deploy --tag django_redis_lock_connection`` runs that check alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, register

from .conf import get_locks_setting, problems
from .exceptions import InvalidLockBackendError, LockError
from .handler import LocksHandler

__all__ = ["check_connection", "check_settings"]


@register("django_redis_lock")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report every problem of the ``LOCKS`` setting."""
    return [Error(p.msg, hint=p.hint, id=p.id) for p in problems(get_locks_setting())]


@register("django_redis_lock_connection", deploy=True)
def check_connection(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report every backend that cannot be reached (only on request: it contacts servers)."""
    setting = get_locks_setting()
    if problems(setting):
        return []
    # A private handler, so a check never leaves connections behind in the process's one.
    handler = LocksHandler(setting)
    errors: list[CheckMessage] = []
    try:
        for alias in handler:
            try:
                handler[alias].ping()
            except (LockError, InvalidLockBackendError) as exc:
                errors.append(
                    Error(
                        f"LOCKS[{alias!r}] cannot be reached: {exc}",
                        hint="Check the URL, the credentials, the network and the server; "
                        "lock() would fail too.",
                        id="django_redis_lock.E011",
                    )
                )
    finally:
        handler.close_all()
    return errors
