"""``@rate_limit`` for Celery: on a real worker (prefork, two children) and in eager runs.

The worker tests time each run by the Redis server's clock: the task records the time its hit
was admitted (``last_admission().at``), so the sliding windows are checked on one clock.
"""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from django_redis_lock import (
    InvalidLockArgumentError,
    LockArgumentTypeError,
    RateLimitExceededError,
    locks,
    rate_limit,
)
from django_redis_lock.celery import rate_limit as task_rate_limit
from tests.support import celery_harness
from tests.support.helpers import most_in_a_window

# On a real worker ------------------------------------------------------------------------------


@pytest.fixture
def tasks(celery_pair: dict[str, Any]) -> Iterator[Any]:
    """The test tasks, with an empty event log and no lock or rate limit left over."""
    with celery_harness.fresh(celery_pair):
        yield celery_pair["app"]


def starts(worker: dict[str, Any], task: str) -> list[dict[str, Any]]:
    found = celery_harness.events(worker["client"], worker["prefix"], "start")
    return [event for event in found if event["task"] == task]


@pytest.mark.slow
def test_worker__30_sends_of_5_per_s_all_run_within_the_limit_in_about_6_s(
    tasks: Any, celery_pair: dict[str, Any]
) -> None:
    sent = time.monotonic()
    results = [tasks.limited.delay(n) for n in range(30)]
    assert sorted(r.get(timeout=60) for r in results) == list(range(30))
    took = time.monotonic() - sent
    runs = starts(celery_pair, "limited")
    times = [run["admitted_at"] for run in runs]
    summary = f"{len(runs)} runs in {took:.2f} s, spanning {max(times) - min(times):.2f} s"
    print(summary)
    assert sorted(run["run"] for run in runs) == list(range(30)), summary
    assert most_in_a_window(times, 1.0) <= 5, summary
    assert 4.5 <= max(times) - min(times) <= 8, summary
    assert took < 12, summary
    # A resend is no retry of the task's: max_retries=0, and every run saw retries 0.
    assert {run["retries"] for run in runs} == {0}


@pytest.mark.slow
def test_worker__raise_reaches_the_caller_as_the_packages_error(tasks: Any) -> None:
    assert tasks.limited_or_raised.delay(1).get(timeout=30) == 1
    with pytest.raises(RateLimitExceededError, match="has no room"):
        tasks.limited_or_raised.delay(2).get(timeout=30)


@pytest.mark.slow
def test_worker__a_killed_childs_run_is_redelivered_within_the_limit(
    tasks: Any, celery_pair: dict[str, Any]
) -> None:
    first = tasks.limited_redelivered.delay(0)
    deadline = time.monotonic() + 30
    while not starts(celery_pair, "limited_redelivered"):
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.02)
    others = [tasks.limited_redelivered.delay(n) for n in range(1, 6)]
    (killed,) = [run for run in starts(celery_pair, "limited_redelivered") if run["run"] == 0]
    os.kill(killed["pid"], signal.SIGKILL)
    assert first.get(timeout=30) == 2  # delivered again, and run
    assert [r.get(timeout=30) for r in others] == [1] * 5
    runs = starts(celery_pair, "limited_redelivered")
    assert sorted((run["run"], run["delivery"]) for run in runs) == [
        (0, 1),
        (0, 2),
        *((n, 1) for n in range(1, 6)),
    ]
    assert most_in_a_window([run["admitted_at"] for run in runs], 1.0) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("task", ["lock_then_limit", "limit_then_lock"])
def test_worker__composes_with_single_instance_in_either_order(
    tasks: Any, celery_pair: dict[str, Any], task: str
) -> None:
    results = [getattr(tasks, task).delay(7, n) for n in range(6)]
    assert sorted(r.get(timeout=60) for r in results) == list(range(6))
    runs = starts(celery_pair, task)
    assert sorted(run["run"] for run in runs) == list(range(6))
    assert most_in_a_window([run["admitted_at"] for run in runs], 1.0) <= 2
    gc.collect()


# Without a worker: the shapes users write ------------------------------------------------------


@pytest.fixture
def app() -> Celery:
    """An eager Celery app: tasks run in this process, as in users' tests."""
    eager = Celery("eager-rate", set_as_current=False)
    eager.conf.update(task_always_eager=True, task_eager_propagates=True)
    return eager


def define(app: Celery, bound: bool, key: Any, on_limit: str, name: str) -> Any:
    """Define a task ``(customer_id, kind="monthly", *, dry_run=False)`` limited to 2/5s."""
    limit = task_rate_limit("2/5s", key=key, on_limit=on_limit)  # type: ignore[arg-type]
    if bound:

        @app.task(bind=True, name=name, shared=False)
        @limit
        def bound_task(
            self: Any, customer_id: int, kind: str = "monthly", *, dry_run: bool = False
        ) -> str:
            return f"{customer_id}-{kind}"

        return bound_task

    @app.task(name=name, shared=False)
    @limit
    def plain_task(customer_id: int, kind: str = "monthly", *, dry_run: bool = False) -> str:
        return f"{customer_id}-{kind}"

    return plain_task


KEYS = {
    "positional": ("{customer_id}", lambda task, c: task.apply((c,))),
    "keyword": ("{customer_id}", lambda task, c: task.apply(kwargs={"customer_id": c})),
    "default": ("{kind}", lambda task, c: task.apply((c,))),
    "list": (["customer_id", "kind"], lambda task, c: task.apply((c, "yearly"))),
    "callable": (lambda *a, **k: "one", lambda task, c: task.apply((c,))),
    "none": (None, lambda task, c: task.apply((c,))),
}


@pytest.mark.parametrize("on_limit", ["skip", "raise"])
@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
def test_eager__the_third_run_of_a_key_meets_on_limit(
    app: Celery, bound: bool, key: str, on_limit: str
) -> None:
    spec, send = KEYS[key]
    task = define(app, bound, spec, on_limit, f"eager.rl.{key}.{bound}.{on_limit}")
    ran = "42-yearly" if key == "list" else "42-monthly"
    assert [send(task, 42).get() for _ in range(2)] == [ran, ran]
    if on_limit == "skip":
        assert send(task, 42).get() is None
    else:
        with pytest.raises(RateLimitExceededError, match="has no room"):
            send(task, 42).get()
    names = {info.name for info in locks["default"].iter_rate_limits("celery:*")}
    assert len(names) == 1
    (name,) = names
    expected = {
        "positional": ":42",
        "keyword": ":42",
        "default": ":monthly",
        "list": ":42:yearly",
        "callable": ":one",
        "none": "",
    }[key]
    assert name == f"celery:eager.rl.{key}.{bound}.{on_limit}{expected}"


def test_eager__keys_do_not_share_a_limit(app: Celery) -> None:
    task = define(app, True, "{customer_id}", "skip", "eager.rl.keys")
    assert [task.apply((1,)).get() for _ in range(3)] == ["1-monthly", "1-monthly", None]
    assert task.apply((2,)).get() == "2-monthly"


def test_eager__retry_waits_for_the_slot_in_process(app: Celery) -> None:
    task = define(app, False, None, "retry", "eager.rl.retry")
    task.apply((1,)).get()
    task.apply((1,)).get()
    started = time.monotonic()
    assert task.apply((1,)).get() == "1-monthly"
    assert 4 <= time.monotonic() - started <= 8


def test_eager__shares_the_limit_with_rate_limit_by_name(app: Celery) -> None:
    task = define(app, False, None, "skip", "eager.rl.shared")
    assert rate_limit("celery:eager.rl.shared", "2/5s").acquire(blocking=False)
    assert [task.apply((1,)).get() for _ in range(2)] == ["1-monthly", None]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate": "0/s"}, InvalidLockArgumentError, "must admit from 1"),
        ({"rate": "5/s", "on_limit": "wait"}, InvalidLockArgumentError, "on_limit must be"),
        ({"rate": "5/s", "cost": 6}, InvalidLockArgumentError, "cost must be from 1"),
        ({"rate": "5/s", "key": 5}, LockArgumentTypeError, "key must be None"),
        ({"rate": "5/s", "key": "{nope}"}, InvalidLockArgumentError, "are not arguments"),
        ({"rate": ["5/s", 3]}, LockArgumentTypeError, "a rate must be a str"),
    ],
)
def test_decoration__bad_arguments_are_refused(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):

        @task_rate_limit(**options)
        def job(customer_id: int) -> None:
            """A task function."""
