"""A ``django.tasks`` task of the shop, kept from running twice at once by ``@single_instance``.

Django 6.0 has ``django.tasks``; on Django 5.2 the ``django-tasks`` backport stands in for it
(``example/settings.py`` installs it and names the backend in ``TASKS``). The example runs
its tasks on ``ImmediateBackend``, which runs a task at once, inside ``enqueue()``; a project
would name a worker backend there, such as django-tasks-db's ``DatabaseBackend``.
"""

from __future__ import annotations

import os
from typing import Any

try:
    from django.tasks import TaskResult, task  # Django 6.0 and later
except ImportError:  # Django 5.2, with the django-tasks backport
    from django_tasks import TaskResult, task

from django_redis_lock import locks
from django_redis_lock.listing import describe_holder
from django_redis_lock.tasks import single_instance


@task()
@single_instance(key="{supplier}", on_conflict="skip", ttl=10)
def refresh_catalog(supplier: str, notify: bool = False) -> dict[str, Any]:
    """Refresh one supplier's catalog; a refresh that finds one running for it returns None.

    The lock is ``task:shop.jobs.refresh_catalog:<supplier>``, so other suppliers are
    refreshed at the same time. With ``notify``, the refresh tells the supplier, whose webhook
    asks at once for another refresh: an ``enqueue()`` of the same supplier made while this
    run holds the lock, from its own body.
    """
    holders = [describe_holder(info) for info in locks["default"].lock_info(lock_of(supplier))]
    again = refresh_catalog.enqueue(supplier) if notify else None
    return {
        "supplier": supplier,
        "worker_pid": os.getpid(),
        "holders": holders,
        "again": None if again is None else {"id": again.id, "outcome": outcome(again)},
    }


def lock_of(supplier: str) -> str:
    """Return the name of the lock ``@single_instance`` takes to refresh ``supplier``."""
    return f"task:{refresh_catalog.module_path}:{supplier}"


def outcome(result: TaskResult) -> str:
    """Return what became of the run of ``result``: queued, failed, skipped or ran."""
    if not result.is_finished:
        return "queued"
    if result.errors:
        return "failed"
    return "skipped" if result.return_value is None else "ran"
