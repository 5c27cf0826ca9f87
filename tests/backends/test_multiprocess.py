"""Mutual exclusion across processes, on a real redis-server."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import time
import warnings

import pytest
import redis as redis_py

from django_redis_lock import LockNotOwnedError, lock, locks
from tests.support import workers
from tests.support.helpers import eventually

# Many processes at once, their pace asserted: one such module runs at a time under xdist.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]

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


def test_fair__processes_acquire_in_arrival_order(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    holder = lock("fifo", fair=True)
    holder.acquire()
    children = []
    try:
        for number in range(6):
            child = spawn.Process(
                target=workers.wait_in_line, args=(redis_url, prefix, "fifo", number)
            )
            child.start()
            children.append(child)
            # Each process is queued before the next one starts.
            eventually(lambda n=number: raw_redis.zcard(f"{prefix}:{{=fifo}}:q") == n + 1, 60)
        holder.release()
    finally:
        for child in children:
            child.join(60)
    assert [c.exitcode for c in children] == [0] * 6
    assert [int(x) for x in raw_redis.lrange(f"{prefix}:order", 0, -1)] == list(range(6))


def test_semaphore__never_more_than_limit_holders_across_processes(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    processes, rounds = 6, 8
    children = [
        spawn.Process(target=workers.hold_a_slot, args=(redis_url, prefix, "pool", n, rounds))
        for n in range(processes)
    ]
    for child in children:
        child.start()
    eventually(lambda: raw_redis.llen(f"{prefix}:ready") == processes, 60)
    for n in range(processes):  # start together, so they really contend
        raw_redis.rpush(f"{prefix}:go:{n}", "1")
    for child in children:
        child.join(120)
    assert [c.exitcode for c in children] == [0] * processes
    events = []
    for entry in raw_redis.lrange(f"{prefix}:slots", 0, -1):
        start, end = (int(x) for x in entry.split())
        events += [(start, 1), (end, -1)]
    assert len(events) == 2 * processes * rounds
    concurrent = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):
        concurrent += step
        peak = max(peak, concurrent)
    assert peak == 3, f"at most 3 holders at once (and 3 reached); saw {peak}"


def test_stalled_holder__learns_its_lease_was_lost_and_the_new_holder_keeps_it(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    child = spawn.Process(target=workers.hold_then_stall, args=(redis_url, prefix, "stall"))
    child.start()
    try:
        reply = raw_redis.blpop([f"{prefix}:holding"], timeout=60)
        assert reply is not None
        old_token = int(reply[1])
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)  # frozen: its renewal thread stops too
        taker = lock("stall", ttl=30)
        assert taker.acquire(timeout=10), "the lease must end while its holder is frozen"
        assert taker.fencing_token is not None
        assert taker.fencing_token > old_token
        os.kill(child.pid, signal.SIGCONT)
        raw_redis.rpush(f"{prefix}:resumed", "1")
        outcome = raw_redis.blpop([f"{prefix}:outcome"], timeout=60)
        assert outcome is not None
        assert outcome[1].decode().startswith("lost: Lock 'stall' was lost")
        assert taker.owned(), "the stalled holder's exit must not touch the new holder's lock"
        taker.release()
    finally:
        os.kill(child.pid, signal.SIGCONT)  # type: ignore[arg-type]
        child.join(30)
    assert child.exitcode == 0


def test_fork__a_child_cannot_release_the_parents_lock(raw_redis: redis_py.Redis) -> None:
    with lock("forked", ttl=0.4) as held:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            pid = os.fork()
        if pid == 0:  # the child: a new owner, with no renewal thread of its own
            code = 1
            try:
                held.release()
            except LockNotOwnedError:
                code = 0 if not held.owned() and held.fencing_token is None else 2
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        time.sleep(1.0)  # two and a half leases: the parent keeps renewing
        assert held.owned()
        assert not held.lost
