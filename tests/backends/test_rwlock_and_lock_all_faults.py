"""Read-write locks and lock_all in one script under faults: the states that once broke it.

Two holders never run at once unless one of them is told its lease was lost. Each test here
reaches, on a real redis-server (and with real processes and signals where it is a fault), a
state the scripts once mishandled, and checks from outside what was granted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, alock_all, lock_all, locks, rwlock
from django_redis_lock.backends.base import SHARED, AcquireRequest, ReleaseRequest
from django_redis_lock.testing import RedisServer
from tests.support.helpers import aeventually, eventually, in_thread, own_locks

spawn = multiprocessing.get_context("spawn")

NAME = "faults:doc"


def holders(using: str, name: str) -> list[str]:
    return sorted(info.owner for info in locks[using].lock_info(name))


def queued(raw_redis: redis_py.Redis, prefix: str, name: str) -> int:
    return int(raw_redis.zcard(f"{prefix}:{{={name}}}:q"))


# Worker processes (spawned: this module is imported afresh in the child) -------------------


def wait_to_read(url: str, prefix: str, name: str, owner: str, ready: Any, go: Any) -> None:
    """Set Django up and say ``ready``; once ``go`` is set, wait, fair, for the read side of
    ``name`` as the named ``owner`` (killed meanwhile)."""
    from tests.support.workers import setup_django

    setup_django(url, prefix)
    from django_redis_lock import rwlock as rw

    reading = rw(name, owner=owner, fair=True, ttl=30).read()
    ready.set()
    go.wait(60)
    reading.acquire(timeout=60)
    time.sleep(60)


# 1. A registration left under another limit is handed to a request that did not make it -----


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_a_readers_registration_is_never_handed_to_the_same_owners_writer(using: str) -> None:
    """A registration of an owner as a reader (left by an attempt that died, or whose reply
    was lost) heads the queue; the same owner now asks, fair and without waiting, to write.
    The handoff once gave it the read registration's slot, beside the reader holding, and the
    acquire reported it held for writing: a registration under another limit is dropped."""
    backend = locks[using]
    reader = AcquireRequest(ttl=30, limit=SHARED)
    assert backend.acquire(NAME, "reader", reader).acquired
    # A writer waits, then the owner "job" waits to read behind it (fair order).
    waiting_writer = AcquireRequest(ttl=30, limit=1, wait=30, attempt="w.1")
    assert not backend.acquire(NAME, "writer", waiting_writer).acquired
    job_reads = AcquireRequest(ttl=30, limit=SHARED, fair=True, wait=30, holds=0, attempt="j.1")
    assert not backend.acquire(NAME, "job", job_reads).acquired
    # The writer's last try (no wait) gives up and leaves the queue; job's registration,
    # a reader's, now heads it (job's process died, or its reply was lost).
    last_try = AcquireRequest(ttl=30, limit=1, wait=0, holds=0, attempt="w.1")
    assert not backend.acquire(NAME, "writer", last_try).acquired
    # The same owner asks to write, fair, without waiting: the lock is read-held.
    job_writes = AcquireRequest(ttl=30, limit=1, fair=True, wait=0, holds=0, attempt="j.2")
    result = backend.acquire(NAME, "job", job_writes)
    try:
        assert not result.acquired, (
            f"a writer was granted beside a reader: holders {holders(using, NAME)}"
        )
    finally:
        backend.force_release(NAME)
        backend.withdraw(NAME, "job")


@pytest.mark.slow
def test_a_killed_readers_registration_never_lets_its_named_owner_write_beside_a_reader(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    """The same, end to end: a process waiting to read as ``owner="job-42"`` is SIGKILLed;
    the job, run again under its owner, tries to write without waiting while a reader reads."""
    reading = rwlock(NAME, ttl=30).read()
    assert reading.acquire()
    # The child starts (a spawned interpreter, Django set up: seconds on a busy machine)
    # before the writer's wait does, so that it queues behind the writer within that wait.
    ready, go = spawn.Event(), spawn.Event()
    child = spawn.Process(target=wait_to_read, args=(redis_url, prefix, NAME, "job-42", ready, go))
    child.start()
    try:
        assert ready.wait(60), "the reader's process did not start"
        writer_outcome: list[bool] = []

        def writer_waits() -> None:
            writer_outcome.append(rwlock(NAME, fair=True, ttl=30).write().acquire(timeout=5))

        waiting_writer = threading.Thread(target=writer_waits)
        waiting_writer.start()
        eventually(lambda: queued(raw_redis, prefix, NAME) == 1)
        go.set()
        eventually(lambda: queued(raw_redis, prefix, NAME) == 2, timeout=4)
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        waiting_writer.join(30)
        assert writer_outcome == [False]  # gave up; the dead reader's registration remains
        assert queued(raw_redis, prefix, NAME) == 1

        def job_writes() -> bool:
            return rwlock(NAME, owner="job-42", fair=True, ttl=30).write().acquire(blocking=False)

        took = in_thread(job_writes)
        owners = holders("default", NAME)
        assert not took, f"job-42 writes while a reader reads: holders {owners}"
    finally:
        if child.is_alive():
            child.kill()
        locks["default"].force_release(NAME)
        reading._forget(reading._owner_token())


# 2. LocMem: a hand-over taken at once keeps the registration's attempt --------------------


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_a_late_undo_of_a_registration_never_frees_the_hold_taken_on_it_since(
    using: str,
) -> None:
    """An owner's registration (attempt j.1, its reply lost) is handed to the owner's next,
    fair, attempt (j.2), which reports the lock held. The late undo of j.1 must not touch it:
    the hold records j.2 (LocMem once kept j.1, and the undo freed a hold in use)."""
    backend = locks[using]
    assert backend.acquire(NAME, "holder", AcquireRequest(ttl=0.3)).acquired
    registered = AcquireRequest(ttl=30, fair=True, wait=30, holds=0, attempt="j.1")
    assert not backend.acquire(NAME, "job", registered).acquired
    eventually(lambda: holders(using, NAME) == [])  # the holder's lease ends: no handoff
    again = AcquireRequest(ttl=30, fair=True, wait=0, holds=0, attempt="j.2")
    try:
        assert backend.acquire(NAME, "job", again).acquired
        backend.withdraw(NAME, "job", 0, "j.1")  # the undo of j.1, arriving late
        assert holders(using, NAME) == ["job"], "the late undo of j.1 freed j.2's hold"
    finally:
        backend.force_release(NAME)


# 3. asyncio: a cancellation the client library swallowed, in lock_all's one script --------


@pytest.mark.slow
async def test_cancelled_alock_all__always_ends_cancelled() -> None:
    """Cancel alock_all's one-script acquire at every point of its round trip; none may go on
    as if uncancelled. redis-py may hand the reply to a task cancelled meanwhile, as if the
    cancellation never came; AsyncLock re-raises it, and so must the one-script path, which
    once took the reply as it came: the cancelled task went on holding every name."""
    from django_redis_lock import alock

    went_on: list[int] = []
    rounds = 28
    for round_ in range(rounds):
        names = [f"faults:cancel:{round_}:a", f"faults:cancel:{round_}:b"]
        multi = alock_all(names, ttl=10)

        async def take(multi: Any = multi) -> None:
            assert await multi.acquire()
            try:
                await asyncio.sleep(3600)
            finally:
                await multi.release()

        task = asyncio.create_task(take())
        for _ in range(round_ % 7):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        if not done:
            went_on.append(round_)
            task.cancel()
            await asyncio.wait({task}, timeout=5)
    assert went_on == [], f"cancelled lock_all acquires went on holding: rounds {went_on}"

    async def all_free() -> bool:
        for round_ in range(rounds):
            for side in "ab":
                if await alock(f"faults:cancel:{round_}:{side}").locked():
                    return False
        return True

    await aeventually(all_free)


# 4. A hold dropped for another limit must not leave the key outliving the leases left -----


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_a_release_after_the_lease_ended_is_refused_after_a_hold_was_dropped(
    using: str,
) -> None:
    """acquire.lua drops a hold the owner does not know of, taken under another limit. It once
    did so without settle(): when the owner then waited, the holders key kept the dropped
    hold's expiry, the lone holder left was taken for live after its lease ended (release.lua:
    "a lone holder's key lives exactly as long as its lease"), and its late release passed
    where it must say the lease ended."""
    backend = locks[using]
    assert backend.acquire(NAME, "r", AcquireRequest(ttl=0.5, limit=SHARED)).acquired
    # A read hold of "o" that "o" never saw (its reply was lost): 30 s.
    assert backend.acquire(NAME, "o", AcquireRequest(ttl=30, limit=SHARED, holds=0)).acquired
    # "o" now asks to write, knowing no hold: its phantom read hold is dropped; "r" reads on.
    asks = AcquireRequest(ttl=30, limit=1, holds=0, wait=0, attempt="o.2")
    assert not backend.acquire(NAME, "o", asks).acquired
    time.sleep(0.7)  # the lease of "r" ends
    try:
        late = backend.release(NAME, "r", ReleaseRequest(holds=1))
        assert late is None, "a release after the lease ended passed"
    finally:
        backend.force_release(NAME)


# Paths where the attempt ids keep holds straight ------------------------------------------

NAMES = ["faults:a", "faults:b", "faults:c"]


def counts(name: str) -> list[int]:
    return [info.holds for info in locks["default"].lock_info(name)]


@pytest.mark.slow
@pytest.mark.parametrize("undo_queued", [False, True])
def test_lock_all__a_retry_right_after_a_lost_reply_keeps_its_holds(
    own_server: RedisServer, undo_queued: bool
) -> None:
    """The one script's reply is lost (server frozen); the same owner retries as soon as the
    server answers, racing the renewal thread's undo of the first attempt: the undo (by
    attempt id) never touches the retry's holds, and the counts agree."""
    with override_settings(LOCKS=own_locks(own_server)):
        with lock_all(["faults:w1", "faults:w2"]):  # the server loads the scripts
            pass
        multi = lock_all(NAMES, ttl=30)
        own_server.pause()
        try:
            with pytest.raises(BackendUnavailableError):
                multi.acquire()
            if undo_queued:
                time.sleep(0.7)  # the undo is sent (and queued) before the retry
        finally:
            own_server.resume()
        assert multi.acquire()
        time.sleep(1.5)
        assert [count for name in NAMES for count in counts(name)] == [1, 1, 1]
        assert not multi.lost
        multi.release()
        assert all(counts(name) == [] for name in NAMES)


@pytest.mark.slow
async def test_alock_all__a_task_cancelled_in_the_one_script_leaves_its_owner_nothing(
    own_server: RedisServer,
) -> None:
    """A task (named owner) is cancelled while the one script is in flight on a frozen
    server; a new task of the same owner acquires at once: it inherits no hold, and the late
    undo of the cancelled attempt does not free what it took."""
    with override_settings(LOCKS=own_locks(own_server)):
        async with alock_all(["faults:w1", "faults:w2"]):
            pass
        own_server.pause()
        try:
            task = asyncio.create_task(alock_all(NAMES, ttl=30, owner="job-7").acquire())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            own_server.resume()

        async def again() -> None:
            multi = alock_all(NAMES, ttl=30, owner="job-7")
            assert await multi.acquire()
            await asyncio.sleep(1.5)
            assert [count for name in NAMES for count in counts(name)] == [1, 1, 1]
            assert not multi.lost
            await multi.release()

        await asyncio.create_task(again())
        assert all(counts(name) == [] for name in NAMES)


@pytest.mark.slow
def test_rwlock__a_lost_read_reply_then_a_write_by_the_same_owner(own_server: RedisServer) -> None:
    """A read acquire's reply is lost (server frozen); the owner then writes: the phantom read
    hold (another limit) is dropped, the write is taken, and the late undo leaves it alone."""
    with override_settings(LOCKS=own_locks(own_server)):
        rw = rwlock("faults:rw", ttl=30)
        with rw.read():
            pass
        own_server.pause()
        try:
            with pytest.raises(BackendUnavailableError):
                rw.read().acquire()
        finally:
            own_server.resume()
        assert rw.write().acquire(timeout=5)
        time.sleep(1.0)
        assert counts("faults:rw") == [1]
        assert not rw.write().lost
        rw.write().release()
        assert counts("faults:rw") == []
