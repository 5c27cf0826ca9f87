"""``django_redis_lock.tasks.single_instance`` in one process, against a real redis-server.

ImmediateBackend runs a task inside ``enqueue()``; django-tasks-db's ``DatabaseBackend`` is
run by its own worker command, here in this process (``db_worker --batch``), on the test
database. tests/integrations/test_tasks_worker.py runs it in worker processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils.module_loading import import_string

from django_redis_lock import (
    DuplicateTaskError,
    InvalidLockArgumentError,
    LockNotAcquiredError,
    lock,
    locks,
)
from django_redis_lock._core.lock_arguments import HOST
from django_redis_lock._single_instance.enqueue_claim import claim_metadata
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.listing import describe_holder
from django_redis_lock.tasks import single_instance
from django_redis_lock.tasks._compat import Task
from tests.settings import _TASKS
from tests.support import task_shapes

if _TASKS == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task

MODULE = "tests.support.task_shapes"

#: The key part each key kind gives for customer 7, kind "yearly" (and the default kind).
KEY_PARTS = {
    "none": ("", ""),
    "template": (":7:yearly", ":7:monthly"),
    "list": (":7:yearly", ":7:monthly"),
    "callable": (":c7-yearly", ":c7-monthly"),
}

CALLS = {
    "args": ((7, "yearly"), {}),
    "kwargs": ((), {"customer_id": 7, "kind": "yearly"}),
    "defaults": ((7,), {}),
}


@pytest.fixture(autouse=True)
def _fresh_seen() -> None:
    task_shapes.seen.clear()


@pytest.mark.parametrize("shape", task_shapes.SHAPES)
@pytest.mark.parametrize("call", list(CALLS))
def test_shapes__a_run_holds_its_key_with_its_result_id_and_frees_it(
    shape: str, call: str
) -> None:
    kind = shape.split("_")[1]
    args, kwargs = CALLS[call]
    part = KEY_PARTS[kind][1 if call == "defaults" else 0]
    name = f"task:{MODULE}.{shape}{part}"
    the_task = getattr(task_shapes, shape)

    result = the_task.enqueue(*args, **kwargs)

    assert result.status == "SUCCESSFUL", result.errors
    assert result.return_value == ("7/monthly" if call == "defaults" else "7/yearly")
    assert task_shapes.seen == [{name: result.id}]
    assert not locks["default"].locked(name)


@pytest.mark.parametrize("shape", task_shapes.SHAPES)
def test_shapes__a_worker_imports_the_task_by_its_path(shape: str) -> None:
    the_task = getattr(task_shapes, shape)
    assert the_task.module_path == f"{MODULE}.{shape}"
    assert import_string(the_task.module_path) is the_task


@pytest.mark.parametrize("shape", task_shapes.SHAPES)
def test_shapes__a_held_key_skips_the_run(shape: str, caplog: pytest.LogCaptureFixture) -> None:
    kind = shape.split("_")[1]
    name = f"task:{MODULE}.{shape}{KEY_PARTS[kind][0]}"
    with lock(name, ttl=10), caplog.at_level(logging.WARNING, "django_redis_lock"):
        result = getattr(task_shapes, shape).enqueue(7, "yearly")
    assert result.status == "SUCCESSFUL"
    assert result.return_value is None
    assert task_shapes.seen == []
    assert f"Skipped a run of {name}" in caplog.text


# The policies, on tasks defined here (module level, as django.tasks requires).


@task()
@single_instance("{n}", on_conflict="raise", ttl=5)
def raising(n: int) -> int:
    return n


@task()
@single_instance("{n}", on_conflict="wait", timeout=5, ttl=5)
def waiting(n: int) -> int:
    return n


@task()
@single_instance("{n}", on_conflict="wait", timeout=0.2, then="raise", ttl=5)
def waiting_briefly(n: int) -> int:
    return n


@task()
@single_instance("{n}", ttl=5)
def nesting(n: int, inner: int) -> list[Any]:
    # Enqueues the same task from its own body: ImmediateBackend runs that one at once,
    # in this thread, while this run holds its lock.
    task_shapes.seen.append({"outer": n})
    if inner < 0:
        return []
    again = nesting.enqueue(inner, -1)
    return [again.status, again.return_value]


def test_raise__fails_the_run_with_lock_not_acquired_naming_the_holder() -> None:
    with lock(f"task:{__name__}.raising:4", ttl=10):
        result = raising.enqueue(4)
    assert result.status == "FAILED"
    assert result.errors[0].exception_class is LockNotAcquiredError
    assert "is held by" in result.errors[0].traceback


def test_wait__runs_once_the_holder_releases() -> None:
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock(f"task:{__name__}.waiting:5", ttl=10):
            taken.set()
            time.sleep(0.3)
        done.set()

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(5)
    result = waiting.enqueue(5)
    holder.join()
    assert done.is_set()
    assert result.status == "SUCCESSFUL"
    assert result.return_value == 5


def test_wait__then_raise_after_its_timeout() -> None:
    with lock(f"task:{__name__}.waiting_briefly:6", ttl=10):
        result = waiting_briefly.enqueue(6)
    assert result.status == "FAILED"
    assert result.errors[0].exception_class is LockNotAcquiredError


def test_nested__the_same_key_enqueued_from_its_own_body_is_skipped() -> None:
    result = nesting.enqueue(1, 1)
    assert result.return_value == ["SUCCESSFUL", None]
    assert task_shapes.seen == [{"outer": 1}]  # the inner body never ran


def test_nested__another_key_runs_inside_the_body() -> None:
    result = nesting.enqueue(1, 2)
    assert result.return_value == ["SUCCESSFUL", []]
    assert task_shapes.seen == [{"outer": 1}, {"outer": 2}]


@task()
@single_instance(ttl=5)
def describing() -> list[str]:
    return [describe_holder(info) for info in locks["default"].iter_locks("task:*")]


def test_holder__is_described_as_the_django_task_with_its_result_id() -> None:
    result = describing.enqueue()
    assert result.return_value == [
        f"Django task {__name__}.describing [{result.id}] on {HOST}, pid {os.getpid()}"
    ]


def test_call__outside_a_worker_runs_with_no_result_id() -> None:
    value = task_shapes.shape_template_plain_sync.call(7, "yearly")
    assert value == "7/yearly"
    assert task_shapes.seen == [{f"task:{MODULE}.shape_template_plain_sync:7:yearly": None}]


async def test_async__aenqueue_runs_and_frees_the_lock() -> None:
    result = await task_shapes.shape_list_plain_async.aenqueue(7, kind="yearly")
    assert result.return_value == "7/yearly"
    assert not await asyncio.to_thread(
        locks["default"].locked, f"task:{MODULE}.shape_list_plain_async:7:yearly"
    )


# Checked when the task is defined.


def test_definition__retry_needs_a_backend_that_defers() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"on_conflict='retry'.*supports_defer"):
        task()(single_instance(on_conflict="retry")(_module_level))


def test_definition__enqueue_skip_needs_a_backend_that_reads_results() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"enqueue='skip'.*supports_get_result"):
        task(backend="dummy")(single_instance(enqueue="skip")(_module_level))


def test_definition__enqueue_skip_on_immediate_backend_is_accepted() -> None:
    defined = task()(single_instance(enqueue="skip")(_module_level))
    assert isinstance(defined, Task)


def test_definition__on_a_backend_with_djangos_task_class__nothing_is_checked_or_claimed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # "plain" supplies Django's own Task: enqueue= needs SingleInstanceTask, and says so once.
    # (Module-level, as Django 6.1's DummyBackend copies a result's task by its import path.)
    defined = _plain_enqueued
    assert type(defined) is Task
    with caplog.at_level(logging.ERROR, "django_redis_lock"):
        first, again = defined.enqueue(5), defined.enqueue(5)
    assert first.id != again.id, "both enqueued"
    assert (
        locks["default"].lock_info("queued:task:tests.integrations.test_tasks._plain_enqueued:5")
        == []
    )
    reports = [r.getMessage() for r in caplog.records if "_plain_enqueued" in r.getMessage()]
    assert reports == [
        "Enqueued tests.integrations.test_tasks._plain_enqueued without its enqueue='raise' "
        "claim, so its duplicates are not refused: the task_class of its backend 'plain' is "
        "not django_redis_lock.tasks.SingleInstanceTask."
    ]
    # Retrying needs a backend that defers: refused only where SingleInstanceTask checks.
    assert task(backend="plain")(single_instance(on_conflict="retry")(_module_level))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_conflict": "ignore"}, "on_conflict must be 'skip', 'raise', 'retry' or 'wait'"),
        ({"enqueue": "drop"}, "enqueue must be 'allow', 'skip' or 'raise'"),
        ({"timeout": 5}, "timeout only applies to on_conflict='wait'"),
        ({"key": 42}, "key must be None, a template, a list of argument names or a callable"),
        ({"limit": 2, "min_hold": 5}, "min_hold cannot be given with limit=2"),
    ],
)
def test_definition__bad_values_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match=message):
        single_instance(**kwargs)


def test_definition__keeps_the_name_module_and_signature() -> None:
    import inspect

    decorated = single_instance("{n}")(_module_level)
    assert decorated.__qualname__ == "_module_level"
    assert decorated.__module__ == __name__
    assert inspect.signature(decorated) == inspect.signature(_module_level)
    assert inspect.iscoroutinefunction(single_instance()(_amodule_level))


def _module_level(n: int = 0) -> int:
    return n


@task(backend="plain")
@single_instance("{n}", enqueue="raise")
def _plain_enqueued(n: int = 0) -> int:
    return n


async def _amodule_level(n: int = 0) -> int:
    return n


# django-tasks-db's DatabaseBackend, run by its worker command in this process.


@task(backend="db")
@single_instance("{n}", on_conflict="retry", countdown=30, ttl=5)
def retrying(n: int) -> int:
    return n


@task(backend="db")
@single_instance("{n}", enqueue="skip", ttl=5)
def queued_once(n: int) -> int:
    return n


@task(backend="db")
@single_instance("{n}", enqueue="raise", ttl=5)
def queued_or_raise(n: int) -> int:
    return n


@task(backend="db")
@single_instance("{n}", enqueue="skip", ttl=5)
async def queued_once_async(n: int) -> int:
    return n


@task(backend="db")
@single_instance("{n}", on_conflict="retry", enqueue="skip", countdown=30, ttl=5)
def retrying_once(n: int) -> int:
    return n


def run_queued() -> None:
    # Given on the command line: the option's default ("default", ImmediateBackend here) is
    # checked only when the option is not.
    call_command(
        "db_worker",
        "--backend=db",
        "--batch",
        "--no-reload",
        "--no-startup-delay",
        "--interval=0",
        verbosity=0,
    )


@pytest.mark.django_db(transaction=True)
def test_db_retry__enqueues_the_task_again_to_run_later() -> None:
    with lock(f"task:{__name__}.retrying:3", ttl=10):
        first = retrying.enqueue(3)
        run_queued()
    first.refresh()
    assert first.status == "SUCCESSFUL"
    assert first.return_value is None
    from django_tasks_db.models import DBTaskResult

    again = DBTaskResult.objects.exclude(id=first.id).get()
    assert again.status == "READY"
    assert again.args_kwargs == {"args": [3], "kwargs": {}}
    waits = (again.run_after - again.enqueued_at).total_seconds()
    assert 29 <= waits <= 31


@pytest.mark.django_db(transaction=True)
def test_db_enqueue_skip__a_queued_key_returns_its_result_until_it_ran() -> None:
    first = queued_once.enqueue(8)
    assert queued_once.enqueue(8).id == first.id
    assert queued_once.enqueue(9).id != first.id  # another key
    run_queued()
    first.refresh()
    assert first.status == "SUCCESSFUL"
    assert not locks["default"].locked(f"queued:task:{__name__}.queued_once:8")
    assert queued_once.enqueue(8).id != first.id


@pytest.mark.django_db(transaction=True)
def test_db_enqueue_raise__names_the_queued_task() -> None:
    first = queued_or_raise.enqueue(8)
    with pytest.raises(DuplicateTaskError) as raised:
        queued_or_raise.enqueue(8)
    assert raised.value.task_id == first.id
    run_queued()
    assert queued_or_raise.enqueue(8).id != first.id


@pytest.mark.django_db(transaction=True)
async def test_db_enqueue_skip__aenqueue_claims_too() -> None:
    first = await queued_once.aenqueue(8)
    second = await queued_once.aenqueue(8)
    assert second.id == first.id


@pytest.mark.django_db(transaction=True)
def test_db_enqueue_skip__an_async_run_frees_its_claim_when_it_ends() -> None:
    first = queued_once_async.enqueue(8)
    assert queued_once_async.enqueue(8).id == first.id
    run_queued()
    first.refresh()
    assert first.return_value == 8
    assert queued_once_async.enqueue(8).id != first.id


@pytest.mark.django_db(transaction=True)
def test_db_retry__the_retry_holds_the_claim_of_its_key() -> None:
    with lock(f"task:{__name__}.retrying_once:3", ttl=10):
        first = retrying_once.enqueue(3)
        run_queued()
    from django_tasks_db.models import DBTaskResult

    again = DBTaskResult.objects.exclude(id=first.id).get()
    # The refused run freed its claim; the retry it enqueued took one: a duplicate now
    # gets the retry's result.
    assert str(retrying_once.enqueue(3).id) == str(again.id)


def leave_stale_claim(name: str, result_id: str) -> None:
    # What an enqueue paused between enqueuing and naming its claim leaves once it resumes,
    # after the run ended: a claim naming a finished task.
    record = {"task_id": result_id, "task_name": "t", "runner": "django.tasks"}
    taken = locks["default"].acquire(
        name, "task-queued:stale", AcquireRequest(ttl=60, metadata=claim_metadata(record))
    )
    assert taken.acquired


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("the_task", ["queued_once", "queued_or_raise"])
def test_db_enqueue__a_claim_naming_a_finished_task_is_freed(the_task: str) -> None:
    decorated = globals()[the_task]
    first = decorated.enqueue(5)
    run_queued()
    leave_stale_claim(f"queued:task:{__name__}.{the_task}:5", first.id)

    again = decorated.enqueue(5)

    assert again.id != first.id
    assert again.status == "READY"


@task(backend="db")
@single_instance("{n}", enqueue="raise", ttl=0.6)
def slow_claimed(n: int) -> bool:
    time.sleep(1.5)  # the body's own work: longer than two of its leases
    return locks["default"].locked(f"queued:task:{__name__}.slow_claimed:{n}")


@pytest.mark.django_db(transaction=True)
def test_db_enqueue__the_claim_is_renewed_while_the_body_runs() -> None:
    first = slow_claimed.enqueue(1)
    run_queued()
    first.refresh()
    assert first.return_value is True
