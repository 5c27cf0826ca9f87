"""Tasks and a task backend that tests/integrations/test_tasks_faults.py runs in processes."""

from __future__ import annotations

import time
from typing import Any

from django_redis_lock.tasks import single_instance
from tests.settings import _TASKS

if _TASKS == "django.tasks":
    from django.tasks import task
    from django.tasks.backends.dummy import DummyBackend
else:
    from django_tasks import task
    from django_tasks.backends.dummy import DummyBackend

from .workers import setup_django


class StoppingBackend(DummyBackend):
    """A DummyBackend whose enqueue, once done, reports the result id and never returns.

    OPTIONS: ``url``, the Redis to report on, and ``report``, the list to push the id to.
    """

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        import redis

        result = super().enqueue(task, args, kwargs)
        redis.Redis.from_url(self.options["url"]).rpush(self.options["report"], str(result.id))
        time.sleep(120)  # the test kills this process now
        return result


@task(backend="dummy")
@single_instance("{n}", enqueue="raise", ttl=5)
def claimed(n: int) -> int:
    return n


def enqueue_and_stop(url: str, prefix: str, naming_lease: float) -> None:
    """Enqueue ``claimed(3)`` on a backend that stops once it enqueued, before it returns."""
    setup_django(url, prefix)
    from django.conf import settings
    from django.test import override_settings

    from django_redis_lock.tasks import claims

    stopping = {
        "BACKEND": f"{__name__}.StoppingBackend",
        "OPTIONS": {"url": url, "report": f"{prefix}:enqueued"},
    }
    override_settings(TASKS={**settings.TASKS, "dummy": stopping}).enable()
    claims.NAMING_LEASE = naming_lease  # type: ignore[attr-defined]
    claimed.enqueue(3)


@task(backend="dummy")
@single_instance("{n}", enqueue="raise", on_conflict="wait", timeout=60, ttl=1)
def patient(n: int) -> int:
    return n


def enqueue_then_run(url: str, prefix: str) -> None:
    """Enqueue ``patient(4)``, then run it here as a worker does; live on (to be killed).

    An interruption of the run (SIGINT) is reported to "<prefix>:interrupted".
    """
    setup_django(url, prefix)
    import redis

    from django_redis_lock.tasks._compat import task_started

    client = redis.Redis.from_url(url)
    result = patient.enqueue(4)
    try:
        task_started.send(sender=type(patient.get_backend()), task_result=result)
        patient.call(4)
    except KeyboardInterrupt:
        client.rpush(f"{prefix}:interrupted", "1")
    time.sleep(120)
