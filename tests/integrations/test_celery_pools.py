"""Two deliveries of one task id never run at once, whatever the pool or the topology.

A message can be delivered twice (``acks_late`` redelivery, a visibility timeout shorter than
the task, the same id published twice). Here one task id is sent twice with different
arguments: to one worker of the threads pool, where both deliveries run in one process, and
to two prefork workers in PID namespaces of their own, whose children have the same process
id. The second delivery must meet the task's policy: skip, or wait for the first to end.
"""

from __future__ import annotations

import gc
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis as redis_py

from tests.support import celery_harness

pytestmark = pytest.mark.slow

#: Runs a worker as PID 1 of a PID namespace of its own, with its own /proc.
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"]

#: (task, how many of the two deliveries run): "exclusive" skips, "patient" waits.
POLICIES = [("exclusive", 1), ("patient", 2)]


def unshare_refused() -> str | None:
    """Return why a PID namespace cannot be made here, or None if it can."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    tried = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, check=False)
    if tried.returncode != 0:
        return f"unshare is not permitted here (it needs root): {tried.stderr.strip()}"
    return None


@pytest.fixture(scope="module")
def threads(redis_url: str) -> Iterator[dict[str, Any]]:
    """One worker of the threads pool: every run in one process."""
    prefix = f"threads-{secrets.token_hex(4)}"
    queue = f"{prefix}-queue"
    with celery_harness.celery_worker(
        redis_url, prefix, name="threads", pool="threads", concurrency=4
    ):
        yield {"prefix": prefix, "url": redis_url, "queues": [queue, queue]}


@pytest.fixture(scope="module")
def namespaces(redis_url: str) -> Iterator[dict[str, Any]]:
    """Two prefork workers of one child each, each in a PID namespace of its own."""
    reason = unshare_refused()
    if reason:
        pytest.skip(reason)
    prefix = f"pidns-{secrets.token_hex(4)}"
    queues = [f"{prefix}-a", f"{prefix}-b"]
    with ExitStack() as workers:
        for queue in queues:
            workers.enter_context(
                celery_harness.celery_worker(
                    redis_url, prefix, name=queue, concurrency=1, queue=queue, wrapper=UNSHARE
                )
            )
        yield {"prefix": prefix, "url": redis_url, "queues": queues}


def deliver_twice(topology: dict[str, Any], task_name: str) -> list[dict[str, Any]]:
    """Send one task id twice (one to each queue); return the events once both have ended."""
    client = redis_py.Redis.from_url(topology["url"])
    prefix = topology["prefix"]
    try:
        celery_harness.clear(client, prefix)
        task = getattr(celery_harness.celery_app(topology["url"], prefix), task_name)
        task_id = f"twice-{secrets.token_hex(4)}"
        for run, queue in enumerate(topology["queues"], start=1):
            task.apply_async((run, 1.0), task_id=task_id, queue=queue)
        celery_harness.wait_for_events(client, prefix, "done", 2, id=task_id)
        return celery_harness.events(client, prefix)
    finally:
        client.close()
        gc.collect()  # let the results unsubscribe while the server runs


def assert_one_at_a_time(found: list[dict[str, Any]], runs: int) -> None:
    starts = [e for e in found if e["event"] == "start"]
    assert len(starts) == runs, f"{runs} of the two deliveries should run: {starts}"
    celery_harness.assert_no_overlap(celery_harness.spans(found))


@pytest.mark.parametrize(("task_name", "runs"), POLICIES)
def test_threads_pool__one_task_id_delivered_twice_never_overlaps(
    threads: dict[str, Any], task_name: str, runs: int
) -> None:
    found = deliver_twice(threads, task_name)
    assert_one_at_a_time(found, runs)


@pytest.mark.parametrize(("task_name", "runs"), POLICIES)
def test_pid_namespaces__one_task_id_on_two_workers_never_overlaps(
    namespaces: dict[str, Any], task_name: str, runs: int
) -> None:
    found = deliver_twice(namespaces, task_name)
    pids = {e["pid"] for e in found if e["event"] == "done"}
    assert len(pids) == 1, f"both deliveries ran in a child of the same process id: {pids}"
    assert_one_at_a_time(found, runs)
