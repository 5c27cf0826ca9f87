"""Module-level django.tasks tasks for the tests (a worker imports them by their path)."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.settings import _TASKS

if _TASKS == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task

from django_redis_lock.tasks import single_instance

#: Where each run writes "start|end <key> <pid> <result id> <time.monotonic()>" lines.
LOG = os.environ.get("DRL_TASKS_LOG", "")


def note(event: str, key: object, run_id: object) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(f"{event} {key} {os.getpid()} {run_id} {time.monotonic():.6f}\n")


calls: list[Any] = []


@task()
@single_instance(key="{customer_id}", ttl=5)
def bill(customer_id: int, cents: int = 0) -> int:
    calls.append(("bill", customer_id, cents))
    return customer_id
