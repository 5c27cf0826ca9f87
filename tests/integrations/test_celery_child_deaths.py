"""The lock of a run whose pool child dies is freed within a second of the child's death.

A keyed ``@single_instance`` run on a real prefork worker has its child SIGKILLed twenty times,
then is terminated by a revoke or goes past its hard time limit, in turn. Each time the test sees
the child die (a pidfd of its own), then waits for the run's lock as any waiter would, and
measures how long after the death it got it: the worst case must stay under a second, far from
the run's 30 s lease. A run of another key, in a child that lives, keeps its lock all along.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_lock import lock, locks
from tests.support import celery_harness

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the test sees deaths by pidfd"),
]

#: Seconds within which a dead child's lock must be freed.
FREED_WITHIN = 1.0
#: The hard time limit of the timed-out runs.
TIME_LIMIT = 1.0
#: The bystander's customer: its run holds its lock through every test.
BYSTANDER = 0


@pytest.fixture(scope="module")
def worker(redis_url: str) -> Iterator[dict[str, Any]]:
    """A prefork worker of three children: the bystander's, a victim's and a spare."""
    with celery_harness.running_worker(redis_url, "deaths", concurrency=3) as worker:
        yield worker


@pytest.fixture
def deaths(worker: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The worker with a bystander run holding the lock of another key until the test ends."""
    with celery_harness.fresh(worker):
        bystander = worker["app"].bill.apply_async((BYSTANDER, BYSTANDER, 60))
        started = start_of(worker, BYSTANDER)
        [held] = locks["default"].lock_info(lock_name(worker, BYSTANDER))
        yield worker
        [still] = locks["default"].lock_info(lock_name(worker, BYSTANDER))
        bystander.revoke(terminate=True, signal="SIGKILL")
        assert still.owner == held.owner, "another run's lock was freed"
        assert os.path.exists(f"/proc/{started['pid']}"), "the bystander's child died"


def lock_name(worker: dict[str, Any], customer_id: int) -> str:
    return f"celery:{worker['app'].bill.name}:{customer_id}"


def start_of(worker: dict[str, Any], customer_id: int) -> dict[str, Any]:
    client, prefix = worker["client"], worker["prefix"]
    task = f"bill:{customer_id}"
    [started] = celery_harness.wait_for_events(client, prefix, "start", 1, task=task)
    return started


def seconds_from_death_to_free(worker: dict[str, Any], customer_id: int, end: str) -> float:
    """End one run of ``customer_id`` the ``end`` way; return how long its lock outlived it."""
    options = {"time_limit": TIME_LIMIT} if end == "hard time limit" else {}
    result = worker["app"].bill.apply_async((customer_id, customer_id, 60), **options)
    pid = start_of(worker, customer_id)["pid"]
    child = os.pidfd_open(pid)  # while the run holds its lock: this pid is its child's
    try:
        if end == "child SIGKILL":
            os.kill(pid, signal.SIGKILL)
        elif end == "revoke terminate":
            result.revoke(terminate=True, signal="SIGKILL")
        dead, _, _ = select.select([child], [], [], 30)
        assert dead, f"the child of run {customer_id} did not die ({end})"
        died_at = time.monotonic()
    finally:
        os.close(child)
    with lock(lock_name(worker, customer_id), timeout=30):
        return time.monotonic() - died_at


def assert_freed_at_once(worker: dict[str, Any], ends: list[str]) -> None:
    waits = [
        seconds_from_death_to_free(worker, customer_id, end)
        for customer_id, end in enumerate(ends, start=BYSTANDER + 1)
    ]
    worst = max(range(len(ends)), key=waits.__getitem__)
    print(
        f"\nfreed after the child's death: worst {waits[worst]:.3f}s ({ends[worst]}), "
        f"median {sorted(waits)[len(waits) // 2]:.3f}s, over {len(waits)} deaths"
    )
    assert waits[worst] < FREED_WITHIN, f"freed {waits[worst]:.3f}s after the {ends[worst]}"


def test_child_sigkill__frees_the_lock_within_a_second_twenty_times(
    deaths: dict[str, Any],
) -> None:
    assert_freed_at_once(deaths, ["child SIGKILL"] * 20)


def test_terminate_and_time_limit__free_the_lock_within_a_second(
    deaths: dict[str, Any],
) -> None:
    assert_freed_at_once(deaths, ["revoke terminate", "hard time limit"] * 4)
