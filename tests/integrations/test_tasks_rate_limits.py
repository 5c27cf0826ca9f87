"""``@rate_limit`` for ``django.tasks``: on real django-tasks-db workers, and in process.

Each run logs when its hit was admitted, by the Redis server's clock, so the sliding windows
are checked on one clock. A refused run is enqueued again as a new task result: a test counts
the admitted runs of its key, whatever their result ids.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from django_redis_lock import InvalidLockArgumentError, RateLimitExceededError, locks, rate_limit
from django_redis_lock.tasks import rate_limit as task_rate_limit
from tests.support import tasks
from tests.support.helpers import most_in_a_window
from tests.support.tasks_worker import Pool, call, poll

# On real workers -------------------------------------------------------------------------------


def admitted(workers: Pool, key: str, count: int, timeout: float = 30) -> list[float]:
    """Wait until ``count`` runs of ``key`` were admitted; return their server times."""

    def probe() -> list[float] | None:
        times = [line.at for line in workers.lines(key) if line.event == "admitted"]
        return times if len(times) >= count else None

    return poll(probe, f"{count} admitted runs of {key}", timeout)


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["limited", "alimited"], ids=["sync", "async"])
def test_workers__20_runs_of_5_per_s_all_run_within_the_limit(
    workers: Pool, task_name: str
) -> None:
    key = f"k{secrets.token_hex(4)}"
    outcomes = workers.enqueue(*[call(task_name, key=key) for _ in range(20)])
    assert all("id" in outcome for outcome in outcomes)
    times = admitted(workers, key, 20)
    time.sleep(0.5)  # a run admitted twice would show here
    times = [line.at for line in workers.lines(key) if line.event == "admitted"]
    assert len(times) == 20
    assert most_in_a_window(times, 1.0) <= 5
    assert 2.5 <= max(times) - min(times) <= 8
    # The runs refused at first were enqueued again, later, as new results.
    rows = [row for row in workers.rows() if row.args == [] and row.task == task_name]
    assert any(row.run_after is not None for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["limit_then_lock", "lock_then_limit"])
def test_workers__composes_with_single_instance_in_either_order(
    workers: Pool, task_name: str
) -> None:
    key = f"k{secrets.token_hex(4)}"
    workers.enqueue(*[call(task_name, key=key) for _ in range(6)])
    times = admitted(workers, key, 6)
    assert most_in_a_window(times, 1.0) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["limited_claimed", "claimed_limited"])
def test_workers__a_retry_claims_anew_with_enqueue_in_either_order(
    workers: Pool, task_name: str
) -> None:
    # The run's own enqueue= claim is freed before it enqueues itself again: else the retry
    # would meet it, be refused as a duplicate, and the run would be lost.
    key = f"k{secrets.token_hex(4)}"
    name = f"task:tests.support.tasks.{task_name}:{key}"
    assert rate_limit(name, "1/2s").acquire(blocking=False)  # the slot is spent
    (outcome,) = workers.enqueue(call(task_name, key=key))
    assert "id" in outcome, outcome
    (at,) = admitted(workers, key, 1)

    def both_final() -> list[Any] | None:
        rows = [row for row in workers.rows() if row.task == task_name and row.final]
        return rows if len(rows) == 2 else None

    rows = poll(both_final, "the refused run, and its retry, final")
    assert any(row.run_after is not None for row in rows)
    assert at > 0


# In process (ImmediateBackend): the policies and the shapes ------------------------------------


@pytest.mark.parametrize("on_limit", ["skip", "raise"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_immediate__the_third_run_meets_on_limit(on_limit: str, asynchronous: bool) -> None:
    name = (
        f"{'a' if asynchronous else ''}billed_or_{'skipped' if on_limit == 'skip' else 'raised'}"
    )
    job = getattr(tasks, name)
    assert [job.enqueue(7).return_value for _ in range(2)] == ["7-monthly"] * 2
    if on_limit == "skip":
        assert job.enqueue(7).return_value is None
    else:
        failed = job.enqueue(7)  # ImmediateBackend records what the run raised
        assert failed.status.name == "FAILED"
        assert failed.errors[-1].exception_class is RateLimitExceededError
    assert job.enqueue(customer_id=8, kind="yearly").return_value == "8-yearly"
    names = sorted(info.name for info in locks["default"].iter_rate_limits("task:*"))
    assert names == [f"task:tests.support.tasks.{name}:{n}" for n in (7, 8)]


def test_immediate__retry_waits_for_the_slot_where_nothing_can_be_deferred() -> None:
    assert tasks.waits_for_its_slot.enqueue(1).return_value == 1
    started = time.monotonic()
    assert tasks.waits_for_its_slot.enqueue(2).return_value == 2
    assert 1.5 <= time.monotonic() - started <= 5


def test_immediate__a_wait_longer_than_max_wait_fails_the_run() -> None:
    assert tasks.waits_in_vain.enqueue(1).return_value == 1
    started = time.monotonic()
    failed = tasks.waits_in_vain.enqueue(2)
    assert time.monotonic() - started < 0.5, "a slot 5 s away is not waited for"
    assert failed.status.name == "FAILED"
    assert failed.errors[-1].exception_class is RateLimitExceededError


def test_immediate__composes_with_single_instance_under_task() -> None:
    assert tasks.limited_single.enqueue(3).return_value == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate": "0/s"}, "must admit from 1"),
        ({"rate": "5/s", "on_limit": "wait"}, "on_limit must be"),
        ({"rate": "5/s", "key": "{nope}"}, "are not arguments"),
        ({"rate": "5/s", "cost": 9}, "cost must be from 1"),
        ({"rate": "5/s", "max_wait": 0}, "max_wait must be"),
    ],
)
def test_decoration__bad_arguments_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match=message):

        @task_rate_limit(**options)
        def job(customer_id: int) -> None:
            """A task function."""
