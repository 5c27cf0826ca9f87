"""Mutual exclusion across processes, on a real redis-server."""

from __future__ import annotations

import itertools
import multiprocessing

import pytest
import redis as redis_py

from django_redis_lock import LockNotOwnedError, lock, locks

from . import workers

pytestmark = pytest.mark.slow

spawn = multiprocessing.get_context("spawn")


def test_exclusion__no_lost_update_and_no_overlapping_holds(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    processes, rounds = 4, 25
    children = [
        spawn.Process(target=workers.count_under_lock, args=(redis_url, prefix, n, rounds))
        for n in range(processes)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
        assert child.exitcode == 0
    assert int(raw_redis.get(f"{prefix}:counter") or 0) == processes * rounds
    holds = sorted(
        tuple(int(x) for x in entry.split()[1:])
        for entry in raw_redis.lrange(f"{prefix}:holds", 0, -1)
    )
    assert len(holds) == processes * rounds
    for (_, end), (start, _) in itertools.pairwise(holds):
        assert end <= start, "two holds overlapped"
    workers_seen = {entry.split()[0] for entry in raw_redis.lrange(f"{prefix}:holds", 0, -1)}
    assert len(workers_seen) == processes


def test_expiry__another_process_takes_over_and_the_late_release_fails(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    stale = lock("taken-over", ttl=0.5)
    assert stale.acquire()
    stale_token = stale.fencing_token
    child = spawn.Process(
        target=workers.take_over_after_expiry, args=(redis_url, prefix, "taken-over")
    )
    child.start()
    try:
        reply = raw_redis.blpop([f"{prefix}:taken"], timeout=30)
        assert reply is not None, "the other process never acquired the lock"
        new_token = int(reply[1])
        assert stale_token is not None
        assert new_token > stale_token
        with pytest.raises(LockNotOwnedError):
            stale.release()
        [holder] = locks["default"].lock_info("taken-over")
        assert holder.fencing_token == new_token
        assert holder.pid == child.pid
        raw_redis.rpush(f"{prefix}:may-release", "1")
        assert raw_redis.blpop([f"{prefix}:released"], timeout=30) is not None
    finally:
        child.join(30)
    assert child.exitcode == 0
    assert not stale.locked()
