"""A thread that ends holding a renewed lock frees it for other processes, on redis-server.

The process whose thread ended lives on, as a web or Celery worker would: its renewal
thread must not keep the lock held for it until it exits.
"""

from __future__ import annotations

import multiprocessing
import time

import pytest
import redis as redis_py

from django_redis_lock import lock
from tests.support import orphan_workers

pytestmark = pytest.mark.slow

spawn = multiprocessing.get_context("spawn")


def test_thread_ended__another_process_gets_the_lock_within_ttl_and_the_loss_is_reported(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name, ttl = "orphan:process", 2.0
    child = spawn.Process(
        target=orphan_workers.acquire_in_a_thread_that_raises,
        args=(redis_url, prefix, name, ttl),
    )
    child.start()
    try:
        reply = raw_redis.blpop([f"{prefix}:holding"], timeout=30)
        assert reply is not None, "the child's thread did not take the lock"
        ended = time.monotonic()
        taker = lock(name, ttl=30, metadata={"taker": "parent"})
        assert taker.acquire(timeout=ttl + 1), "the ended thread's lock was still renewed"
        assert time.monotonic() - ended < ttl + 1
        assert taker.fencing_token is not None
        assert taker.fencing_token > int(reply[1])
        taker.release()
        reports: list[str] = []
        while not {"signal", "on_lost", "log"} <= {report.split()[0] for report in reports}:
            report = raw_redis.blpop([f"{prefix}:reports"], timeout=10)
            assert report is not None, f"the loss was not reported in full: {reports}"
            reports.append(report[1].decode())
        assert child.is_alive(), "the process must live on: only its thread ended"
    finally:
        raw_redis.rpush(f"{prefix}:may-exit", "1")
        child.join(30)
    assert child.exitcode == 0
    reason = "the thread holding it ended without releasing it"
    assert f"signal {reason}" in reports
    assert any(r.startswith("log Stopped renewing lock") and reason in r for r in reports)
    assert any(r.startswith(f"log Lock {name!r} was lost by owner") for r in reports)
