"""System checks for the ``LOCKS`` setting (ids ``django_redis_lock.E001`` and up).

The configuration checks never contact a server. The shape of ``LOCKS`` is checked in
:mod:`~django_redis_lock.conf`; the OPTIONS of an alias by its backend's ``option_problems``,
the code its constructor runs too. ``manage.py check --deploy`` also pings
every backend (``--deploy --tag django_redis_lock_connection`` runs that check alone).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from .conf import get_locks_setting, problems
from .exceptions import InvalidLockBackendError, LockError
from .handler import LocksHandler

__all__ = ["check_connection", "check_settings", "check_trusted_proxies"]


@register("django_redis_lock")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report every problem of the ``LOCKS`` setting."""
    return [Error(p.msg, hint=p.hint, id=p.id) for p in problems(get_locks_setting())]


@register("django_redis_lock")
def check_trusted_proxies(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Report a ``LOCKS_TRUSTED_PROXIES`` setting that is not a list of addresses or networks."""
    value = getattr(settings, "LOCKS_TRUSTED_PROXIES", ())
    hint = 'Use a list such as ["10.0.0.0/8", "127.0.0.1"]: the proxies whose X-Forwarded-For '
    hint += "header the 'ip' view lock key may believe."
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        message = (
            f"LOCKS_TRUSTED_PROXIES must be a list of IP addresses or networks, got {value!r}."
        )
        return [Error(message, hint=hint, id="django_redis_lock.E013")]
    errors: list[CheckMessage] = []
    for proxy in value:
        try:
            if not isinstance(proxy, str):
                raise TypeError(proxy)  # ip_network() would read an int as an address
            ipaddress.ip_network(proxy, strict=False)
        except (TypeError, ValueError):
            message = (
                f"LOCKS_TRUSTED_PROXIES holds {proxy!r}, which is not an IP address or network."
            )
            errors.append(Error(message, hint=hint, id="django_redis_lock.E013"))
    return errors


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
