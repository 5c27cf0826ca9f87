"""``django_redis_lock.tasks`` where runs and claims go wrong: long runs, nested calls, faults.

The DatabaseBackend's tasks run by its worker command in this process (``db_worker --batch``),
on the test database, against the session's redis-server; an enqueue or a run that is
killed or interrupted is a spawned process, sent a real signal.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
import redis as redis_py
from django.db import transaction

from django_redis_lock import DuplicateTaskError, lock, locks
from django_redis_lock.tasks import claims, single_instance
from tests.integrations import test_tasks
from tests.integrations.test_tasks import run_queued
from tests.settings import _TASKS
from tests.support import task_faults
from tests.support.helpers import eventually, queued

if _TASKS == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task


#: The lease of the runs here: short, so that a run outlives several of them.
LEASE = 1.0


@task(backend="db", takes_context=True)
@single_instance("{n}", enqueue="skip", ttl=LEASE)
def running_long(context: object, n: int, probe: bool = True) -> list[str] | None:
    if not probe:
        return None
    started = time.monotonic()
    while time.monotonic() < started + 3 * LEASE:  # three leases: each must be renewed
        time.sleep(0.05)
    again = running_long.enqueue(n, probe=False)
    return [str(context.task_result.id), str(again.id)]  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_claim__is_renewed_while_a_run_outlives_its_lease() -> None:
    first = running_long.enqueue(4)

    run_queued()

    first.refresh()
    assert first.status == "SUCCESSFUL", first.errors
    own, duplicate = first.return_value
    assert duplicate == own, "an enqueue while the task runs returns the running task"
    assert not locks["default"].locked(f"queued:task:{__name__}.running_long:4")


@task(backend="db")
@single_instance("{n}", enqueue="skip", ttl=5)
def calling_itself(n: int, inner: bool = False) -> str | None:
    if inner:
        return None
    # A plain call of the task from its own body is no run of this task's result: refused
    # (the key is held), it must not free the claim of the run that called it.
    calling_itself.call(n, inner=True)
    return str(calling_itself.enqueue(n, inner=True).id)


@pytest.mark.django_db(transaction=True)
def test_claim__a_call_refused_inside_the_body_keeps_the_runs_claim() -> None:
    first = calling_itself.enqueue(6)

    run_queued()

    first.refresh()
    assert first.status == "SUCCESSFUL", first.errors
    assert first.return_value == str(first.id), "the running task still holds its claim"


@pytest.mark.slow
def test_claim__an_enqueue_killed_before_naming_its_task_blocks_enqueues_briefly(
    redis_url: str, prefix: str
) -> None:
    # Killed between handing the task to its backend and naming it in its claim: nobody can
    # tell that claim's task, so nobody frees it; it must end soon, not after enqueue_ttl.
    child = multiprocessing.get_context("spawn").Process(
        target=task_faults.enqueue_and_stop, args=(redis_url, prefix, 1.0), daemon=True
    )
    child.start()
    client = redis_py.Redis.from_url(redis_url, socket_timeout=None)
    try:
        assert client.blpop([f"{prefix}:enqueued"], timeout=60) is not None
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        name = f"queued:task:{task_faults.__name__}.claimed:3"
        assert locks["default"].locked(name)
        with pytest.raises(DuplicateTaskError):
            task_faults.claimed.enqueue(3)

        eventually(lambda: not locks["default"].locked(name), timeout=5)
        assert task_faults.claimed.enqueue(3).status == "READY"
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.parametrize("end", ["SIGKILL", "SIGINT"])
def test_run__ended_while_it_waits_for_its_lock_frees_its_claim(
    end: str, redis_url: str, prefix: str
) -> None:
    # A run that waits for its lock has left the queue: killed, its claim must end with the
    # run's lease (1 s), not enqueue_ttl; interrupted (Ctrl+C), it must be freed at once.
    name = f"task:{task_faults.__name__}.patient:4"
    backend = locks["default"]
    child = multiprocessing.get_context("spawn").Process(
        target=task_faults.enqueue_then_run, args=(redis_url, prefix), daemon=True
    )
    client = redis_py.Redis.from_url(redis_url, socket_timeout=None)
    try:
        with lock(name, ttl=30):
            child.start()
            eventually(lambda: queued(backend, name) == 1, timeout=60)
            assert backend.locked(f"queued:{name}")
            assert child.pid is not None
            os.kill(child.pid, getattr(signal, end))
            if end == "SIGINT":
                assert client.blpop([f"{prefix}:interrupted"], timeout=10) is not None

            eventually(lambda: not backend.locked(f"queued:{name}"), timeout=3)
    finally:
        client.close()
        child.kill()
        child.join(10)


class RolledBack(Exception):
    pass


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("the_task", ["queued_once", "queued_or_raise"])
def test_claim__of_an_enqueue_rolled_back_ends_soon(
    the_task: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DatabaseBackend enqueues in the transaction open around it (ATOMIC_REQUESTS, say): a
    # rollback takes the task away, and its claim must not refuse the key for enqueue_ttl.
    monkeypatch.setattr(claims, "NAMING_LEASE", 1.0)
    decorated = getattr(test_tasks, the_task)
    with pytest.raises(RolledBack), transaction.atomic():
        decorated.enqueue(11)
        raise RolledBack
    name = f"queued:task:{test_tasks.__name__}.{the_task}:11"

    eventually(lambda: not locks["default"].locked(name), timeout=5)
    assert decorated.enqueue(11).status == "READY"


@pytest.mark.django_db(transaction=True)
def test_claim__of_an_enqueue_committed_gets_its_full_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claims, "NAMING_LEASE", 1.0)
    with transaction.atomic():
        first = test_tasks.queued_once.enqueue(12)
    [info] = locks["default"].lock_info(f"queued:task:{test_tasks.__name__}.queued_once:12")
    assert info.ttl > 3000
    assert test_tasks.queued_once.enqueue(12).id == first.id
