"""``@single_instance`` on a real Celery worker (prefork, two children) with a Redis broker."""

from __future__ import annotations

import gc
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import celery_harness
from tests.support.celery_harness import assert_no_overlap

pytestmark = pytest.mark.slow


@pytest.fixture
def worker(celery_pair: dict[str, Any]) -> dict[str, Any]:
    """The package's real worker (prefork, two children); the app and the event log's client."""
    return celery_pair


@pytest.fixture
def tasks(worker: dict[str, Any]) -> Iterator[Any]:
    """The test tasks, with an empty event log and no lock left from an earlier test."""
    celery_harness.clear(worker["client"], worker["prefix"])
    yield celery_harness.celery_app(worker["url"], worker["prefix"])
    # The test's results are garbage now: let them unsubscribe (Celery 5.6 does so in
    # __del__) while the server is still running, not at the end of the session.
    gc.collect()


def events(worker: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return celery_harness.events(worker["client"], worker["prefix"], kind)


def intervals(worker: dict[str, Any], task: str) -> list[tuple[int, int]]:
    return celery_harness.spans([e for e in events(worker) if e.get("task") == task])


def wait_for_start(
    worker: dict[str, Any], task: str, run: object, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in events(worker, "start"):
            if event["task"] == task and event["run"] == run:
                return event
        time.sleep(0.02)
    raise AssertionError(f"{task} run {run} did not start within {timeout}s")


def test_duplicates__never_overlap_and_runs_plus_skips_add_up(tasks: Any, worker: Any) -> None:
    results = [tasks.exclusive.delay(n, 0.3) for n in range(20)]
    values = [r.get(timeout=60) for r in results]
    ran = [v for v in values if v is not None]
    skipped = [v for v in values if v is None]
    starts = events(worker, "start")
    assert len(ran) == len(starts) >= 1
    assert len(ran) + len(skipped) == 20
    assert skipped, "with two worker processes, some duplicates met a running instance"
    assert_no_overlap(intervals(worker, "exclusive"))


def test_policy_raise__names_the_holder(tasks: Any, worker: Any) -> None:
    first = tasks.strict.delay(1, 1.0)
    wait_for_start(worker, "strict", 1)
    second = tasks.strict.delay(2, 0.0)
    with pytest.raises(Exception, match=rf"held by Celery task \S+ \[{first.id}\] on ") as caught:
        second.get(timeout=30)
    assert type(caught.value).__name__ == "LockNotAcquiredError"
    assert first.get(timeout=30) == 1


def test_policy_retry__runs_every_duplicate_one_after_the_other(tasks: Any, worker: Any) -> None:
    results = [tasks.retrying.delay(n, 0.3) for n in range(3)]
    assert sorted(r.get(timeout=60) for r in results) == [0, 1, 2]
    spans = intervals(worker, "retrying")
    assert len(spans) == 3
    assert_no_overlap(spans)


def test_policy_wait__runs_every_duplicate_one_after_the_other(tasks: Any, worker: Any) -> None:
    results = [tasks.patient.delay(n, 0.3) for n in range(2)]
    assert sorted(r.get(timeout=60) for r in results) == [0, 1]
    assert_no_overlap(intervals(worker, "patient"))


def test_limit__lets_two_instances_run_at_once(tasks: Any, worker: Any) -> None:
    results = [tasks.pair.delay(n, 1.0) for n in range(2)]
    assert sorted(r.get(timeout=60) for r in results) == [0, 1]
    (_, first_end), (second_start, _) = intervals(worker, "pair")
    assert second_start < first_end, "the two instances ran at the same time"


def test_keys__per_argument_locks(tasks: Any, worker: Any) -> None:
    different = [tasks.bill.delay(1, 1, 1.0), tasks.bill.delay(2, 2, 1.0)]
    assert sorted(r.get(timeout=60) for r in different) == [1, 2]
    [(s1, e1)], [(s2, e2)] = intervals(worker, "bill:1"), intervals(worker, "bill:2")
    assert s2 < e1, "different customers run in parallel"
    assert s1 < e2, "different customers run in parallel"
    same = [tasks.bill.delay(3, 3, 1.0), tasks.bill.delay(3, 4, 1.0)]
    assert sorted(r.get(timeout=60) is None for r in same) == [False, True]


def test_renewal__a_run_three_times_longer_than_its_lease_is_never_doubled(
    tasks: Any, worker: Any
) -> None:
    first = tasks.long_running.delay(1, 3.0)  # ttl=1: only renewal keeps the lock
    wait_for_start(worker, "long_running", 1)
    time.sleep(1.5)
    assert tasks.long_running.delay(2, 0.0).get(timeout=30) is None
    assert first.get(timeout=30) == 1


def test_self_retry__frees_the_lock_for_the_retried_run(tasks: Any, worker: Any) -> None:
    assert tasks.retry_once.delay().get(timeout=60) == 1
    runs = [e["run"] for e in events(worker, "start") if e["task"] == "retry_once"]
    assert runs == [0, 1], "the retried run was not skipped"
    # The first run, still sleeping after asking for the retry, released before the retry was
    # published: the retried run holds the lock alone, not as a second hold of the first.
    [end] = events(worker, "end")
    assert end["holds"] == 1


@pytest.mark.parametrize("task_id", ["report/2024-01", "sync customer 7", "x" * 300])
def test_custom_task_ids__run(tasks: Any, worker: Any, task_id: str) -> None:
    """Celery takes any string as a task id; so does the lock's owner."""
    assert tasks.exclusive.apply_async((1, 0.0), task_id=task_id).get(timeout=30) == 1
    [start] = events(worker, "start")
    assert start["run"] == 1


def test_chain__each_link_takes_the_lock_when_it_runs(tasks: Any, worker: Any) -> None:
    from celery import chain

    result = chain(tasks.exclusive.si(1, 0.1), tasks.exclusive.si(2, 0.1)).apply_async()
    assert result.get(timeout=60) == 2
    assert len(intervals(worker, "exclusive")) == 2


def killed_run_frees_the_lock_at_once(worker: Any, tasks: Any, kill: Any) -> None:
    first = tasks.stuck.delay(1, 60)
    started = wait_for_start(worker, "stuck", 1)
    kill(first, started)
    killed_at = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)WorkerLostError|terminated|revoked|signal 9"):
        first.get(timeout=30)
    # The duplicate waits for the lock (at most 10 s, then skips): it gets it when the worker
    # frees the killed run's hold, long before that hold's 30 s lease would end.
    assert tasks.stuck.delay(2, 0.1).get(timeout=30) == 2
    # The lease is 30 s: the lock was freed by the worker, not by expiry.
    assert time.monotonic() - killed_at < 8


def test_lifecycle__child_killed_frees_the_lock_at_once(tasks: Any, worker: Any) -> None:
    killed_run_frees_the_lock_at_once(
        worker, tasks, lambda result, started: os.kill(started["pid"], signal.SIGKILL)
    )


def test_lifecycle__revoke_with_terminate_frees_the_lock_at_once(tasks: Any, worker: Any) -> None:
    killed_run_frees_the_lock_at_once(
        worker, tasks, lambda result, started: result.revoke(terminate=True, signal="SIGKILL")
    )


def test_lifecycle__hard_time_limit_frees_the_lock_once_the_child_is_gone(
    tasks: Any, worker: Any
) -> None:
    """A child that ignores SIGTERM runs on until SIGKILL: no new run may start before."""
    first = tasks.stubborn.apply_async((1, 60), time_limit=1)
    wait_for_start(worker, "stubborn", 1)
    second = tasks.stubborn.delay(2, 0.1)  # waits for the lock (on_conflict="wait")
    with pytest.raises(Exception, match=r"TimeLimitExceeded|Time limit"):
        first.get(timeout=30)
    assert second.get(timeout=30) == 2
    last_beat = max(e["at"] for e in events(worker, "beat") if e["run"] == 1)
    [second_start] = [e["at"] for e in events(worker, "start") if e["run"] == 2]
    assert last_beat < second_start, "the second run overlapped the dying first one"
    # Freed by the worker when the child died, long before the 30 s lease would have ended.
    assert (second_start - last_beat) / 1e9 < 5


def test_lifecycle__hard_time_limit_frees_the_lock_at_once(tasks: Any, worker: Any) -> None:
    first = tasks.stuck.apply_async((1, 60), time_limit=1)
    wait_for_start(worker, "stuck", 1)
    with pytest.raises(Exception, match=r"TimeLimitExceeded|Time limit"):
        first.get(timeout=30)
    ended_at = time.monotonic()
    assert tasks.stuck.delay(2, 0.1).get(timeout=30) == 2
    assert time.monotonic() - ended_at < 8


def test_lifecycle__a_redelivered_run_finds_the_lock_of_its_killed_delivery_freed(
    tasks: Any, worker: Any
) -> None:
    """acks_late + reject_on_worker_lost: no task_failure is sent, the message comes back."""
    result = tasks.redelivered.delay(1)
    first = wait_for_start(worker, "redelivered", 1)
    os.kill(first["pid"], signal.SIGKILL)
    # The second delivery has the same task id but runs in another process: it is not the
    # killed run's owner, so it runs only because the worker freed that run's hold.
    assert result.get(timeout=30) == 2
    deliveries = [e for e in events(worker, "start") if e["task"] == "redelivered"]
    assert [e["delivery"] for e in deliveries] == [1, 2]
    assert deliveries[1]["pid"] != first["pid"]
