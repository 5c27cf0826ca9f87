"""Module-level django.tasks tasks for the tests (a worker imports them by their path)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from tests.settings import _TASKS

if _TASKS == "django.tasks":
    from django.tasks import TaskContext, task
else:
    from django_tasks import TaskContext, task

from django_redis_lock.ratelimit import last_admission
from django_redis_lock.tasks import rate_limit, single_instance

#: Where each run writes "start|end <key> <pid> <result id> <time.monotonic()>" lines.
LOG = os.environ.get("DRL_TASKS_LOG", "")


def note(event: str, key: object, run_id: object, at: float | None = None) -> None:
    if LOG:
        moment = time.monotonic() if at is None else at
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(f"{event} {key} {os.getpid()} {run_id} {moment:.6f}\n")


calls: list[Any] = []


@task()
@single_instance(key="{customer_id}", ttl=5)
def bill(customer_id: int, cents: int = 0) -> int:
    calls.append(("bill", customer_id, cents))
    return customer_id


# The worker tests (tests/integrations/test_tasks_worker.py) run these on django-tasks-db's
# db_worker, the alias "db". Each run logs its start and end under its key; one that takes
# its context logs its result id as its run, and returns it.


def _work(key: str, run: object, seconds: float) -> None:
    note("start", key, run)
    time.sleep(seconds)
    note("end", key, run)


@task(backend="db", takes_context=True)
@single_instance(key="{key}", ttl=5)
def exclusive(context: TaskContext, key: str, seconds: float) -> str:
    run = str(context.task_result.id)
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", on_conflict="raise", ttl=5)
def strict(key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=2)
def patient(key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


@task(backend="db", takes_context=True)
@single_instance(key="{key}", on_conflict="retry", ttl=2)
def retrying(context: TaskContext, key: str, seconds: float) -> str:
    run = str(context.task_result.id)
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", ttl=1)
def renewed(key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", ttl=1)
async def arenewed(key: str, run: str, seconds: float) -> str:
    note("start", key, run)
    await asyncio.sleep(seconds)
    note("end", key, run)
    return run


@task(backend="db")
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=2, enqueue="skip")
def claimed(key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=2, enqueue="skip")
async def aclaimed(key: str, run: str, seconds: float) -> str:
    note("start", key, run)
    await asyncio.sleep(seconds)
    note("end", key, run)
    return run


@task(backend="db", takes_context=True)
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=2, enqueue="raise")
def claimed_strictly(context: TaskContext, key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


@task(backend="db")
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=2, enqueue="raise", min_hold=2)
def held_on(key: str, run: str, seconds: float) -> str:
    _work(key, run, seconds)
    return run


# Rate limits: each run logs "admitted", timed by the server's clock when its hit was admitted.


def _admitted(key: str, run: str) -> str:
    admission = last_admission()
    assert admission is not None
    assert admission.at is not None
    note("admitted", key, run, at=admission.at)
    return run


@task(backend="db", takes_context=True)
@rate_limit("5/s", key="{key}")
def limited(context: TaskContext, key: str) -> str:
    return _admitted(key, str(context.task_result.id))


@task(backend="db", takes_context=True)
@rate_limit("5/s", key="{key}")
async def alimited(context: TaskContext, key: str) -> str:
    return _admitted(key, str(context.task_result.id))


@task(backend="db", takes_context=True)
@rate_limit("2/s", key="{key}")
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=5)
def limit_then_lock(context: TaskContext, key: str) -> str:
    return _admitted(key, str(context.task_result.id))


@task(backend="db", takes_context=True)
@single_instance(key="{key}", on_conflict="wait", timeout=10, ttl=5)
@rate_limit("2/s", key="{key}")
def lock_then_limit(context: TaskContext, key: str) -> str:
    return _admitted(key, str(context.task_result.id))


@task(backend="db", takes_context=True)
@rate_limit("1/2s", key="{key}")
@single_instance(key="{key}", enqueue="raise", on_conflict="wait", timeout=10, ttl=5)
def limited_claimed(context: TaskContext, key: str) -> str:
    return _admitted(key, str(context.task_result.id))


@task(backend="db")
@single_instance(key="{key}", enqueue="raise", on_conflict="wait", timeout=10, ttl=5)
@rate_limit("1/2s", key="{key}")
def claimed_limited(key: str) -> str:
    return _admitted(key, "-")


# In process, on ImmediateBackend (the alias "default"): the policies, and a retry that waits.


def _billed(customer_id: int, kind: str) -> str:
    return f"{customer_id}-{kind}"


@task()
@rate_limit("2/5s", key="{customer_id}", on_limit="skip")
def billed_or_skipped(customer_id: int, kind: str = "monthly") -> str:
    return _billed(customer_id, kind)


@task()
@rate_limit("2/5s", key="{customer_id}", on_limit="raise")
def billed_or_raised(customer_id: int, kind: str = "monthly") -> str:
    return _billed(customer_id, kind)


@task()
@rate_limit("2/5s", key="{customer_id}", on_limit="skip")
async def abilled_or_skipped(customer_id: int, kind: str = "monthly") -> str:
    return _billed(customer_id, kind)


@task()
@rate_limit("2/5s", key="{customer_id}", on_limit="raise")
async def abilled_or_raised(customer_id: int, kind: str = "monthly") -> str:
    return _billed(customer_id, kind)


@task()
@rate_limit("1/2s")
def waits_for_its_slot(n: int) -> int:
    return n


@task()
@rate_limit("5/s", key="{customer_id}")
@single_instance(key="{customer_id}")
def limited_single(customer_id: int) -> int:
    return customer_id


@task()
@rate_limit("1/5s", max_wait=1)
def waits_in_vain(n: int) -> int:
    return n
