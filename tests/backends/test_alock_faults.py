"""alock under faults: cancellation, races, a busy or closed event loop, other processes, and
a Redis that is gone.

Every test runs against a real redis-server (and on LocMemBackend too where the fault makes
sense there). A few tests wrap one backend method, or connect a signal receiver, only to land
an interrupt at an exact point; Redis itself is never faked.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import multiprocessing
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, alock, lock, locks
from django_redis_lock._core.owner import current_owner, current_task_owner
from django_redis_lock._core.renewal import renewer
from django_redis_lock.backends.base import (
    AcquireRequest,
    AcquireResult,
    BaseLockBackend,
    ReleaseRequest,
)
from django_redis_lock.backends.locmem import LocMemBackend
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.signals import lock_acquired
from django_redis_lock.testing import RedisServer
from tests.support import workers
from tests.support.helpers import aeventually as eventually
from tests.support.helpers import eventually as eventually_sync
from tests.support.helpers import in_thread

spawn = multiprocessing.get_context("spawn")


# Helpers -------------------------------------------------------------------------------------


def traces(backend: BaseLockBackend, raw_redis: redis_py.Redis, name: str, owner: str) -> set[str]:
    """Return what the backend still keeps of ``owner`` on lock ``name``.

    On Redis: its entry in the queue (``:q``), its registration (``:w``), its wake-up list
    (``:s:<owner>``) and a hold (``:h``), read with a plain client. On LocMem: the same
    records in the backend's memory.
    """
    found = set()
    if isinstance(backend, RedisBackend):
        if raw_redis.zscore(backend.key(name, "q"), owner) is not None:
            found.add("queue")
        if raw_redis.hexists(backend.key(name, "w"), owner):
            found.add("registration")
        if raw_redis.exists(backend.key(name, f"s:{owner}")):
            found.add("wake-up list")
        if raw_redis.hexists(backend.key(name), owner):
            found.add("hold")
        return found
    assert isinstance(backend, LocMemBackend)
    entry = backend._locks.get(name)
    if entry is not None:
        found |= {"queue"} if owner in entry.queue else set()
        found |= {"wake-up list"} if owner in entry.grants else set()
        found |= {"hold"} if owner in entry.holders else set()
    if (name, owner) in backend._async_waiters:
        found.add("async waiter")
    return found


def waiting(backend: BaseLockBackend, raw_redis: redis_py.Redis, name: str, owner: str) -> bool:
    """Return whether ``owner`` is registered as a waiter for ``name``."""
    return "queue" in traces(backend, raw_redis, name, owner)


def queue_keys(raw_redis: redis_py.Redis, prefix: str) -> list[bytes]:
    """Return every queue, registration or wake-up key of this test's locks on Redis."""
    return sorted(
        key
        for key in raw_redis.scan_iter(match=f"{prefix}:*")
        if key.endswith((b":q", b":w")) or b":s:" in key
    )


async def heartbeat(stop: asyncio.Event, period: float = 0.01) -> float:
    """Tick every ``period`` seconds until ``stop`` is set; return the longest gap seen."""
    longest, last = 0.0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(period)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    return longest


class Waiter:
    """A task that waits for a lock; records its owner token and whether it acquired.

    Once acquired it holds until cancelled, and releases on its way out.
    """

    def __init__(self, name: str, using: str, **options: Any) -> None:
        self.handle = alock(name, using=using, **options)
        self.owner = ""
        self.acquired = False
        self.registered = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        self.owner = current_task_owner()
        self.registered.set()
        assert await self.handle.acquire(timeout=30)
        self.acquired = True
        try:
            await asyncio.sleep(3600)
        finally:
            await self.handle.release()

    async def cancelled(self) -> None:
        """Cancel the task; wait for it and check that it ended cancelled."""
        self.task.cancel()
        await ends_cancelled(self.task)


async def ends_cancelled(task: asyncio.Task[Any]) -> None:
    """Wait for the cancelled ``task`` to end, and check that it ended cancelled.

    A task that swallowed its cancellation runs on: that fails here, rather than hanging.
    """
    done, _ = await asyncio.wait({task}, timeout=10)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=10)
        raise AssertionError("the task ran on after it was cancelled: the cancellation was lost")
    assert task.cancelled(), f"the cancelled task ended otherwise: {task!r}"


async def free_for_another_owner(name: str, using: str, other: str) -> int:
    """Take ``name`` at once as the owner ``other``, release it; return its fencing token."""
    taker = alock(name, using=using, owner=other, blocking=False)
    assert await taker.acquire(), "another owner must be able to take the lock at once"
    token = taker.fencing_token
    assert token is not None
    await taker.release()
    return token


# 1. A waiting task cancelled leaves no trace ---------------------------------------------------


async def test_cancel_while_waiting__leaves_no_queue_entry_and_the_release_frees_the_lock(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, prefix: str
) -> None:
    name = "faults:cancel-waiting"
    holder = alock(name, using=using)
    assert await holder.acquire()
    held_token = holder.fencing_token
    assert held_token is not None
    waiter = Waiter(name, using, auto_renew=True)
    await waiter.registered.wait()
    await eventually(lambda: waiting(backend, raw_redis, name, waiter.owner))
    baseline = len(renewer)

    await waiter.cancelled()

    assert not waiter.acquired
    assert traces(backend, raw_redis, name, waiter.owner) == set()
    if using == "default":
        assert queue_keys(raw_redis, prefix) == [], "no queue, registration or wake-up key"
    await holder.release()
    assert not await holder.locked(), "the release must not hand the lock to a cancelled task"
    assert backend.lock_info(name) == []
    assert await free_for_another_owner(name, using, "next") > held_token
    assert len(renewer) == baseline


async def test_cancel_while_waiting__the_next_waiter_gets_the_lock_at_the_release(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis
) -> None:
    name = "faults:cancel-first-of-two"
    holder = alock(name, using=using)
    assert await holder.acquire()
    first = Waiter(name, using)
    await first.registered.wait()
    await eventually(lambda: waiting(backend, raw_redis, name, first.owner))
    second = Waiter(name, using)
    await second.registered.wait()
    await eventually(lambda: waiting(backend, raw_redis, name, second.owner))

    await first.cancelled()
    await holder.release()

    await eventually(lambda: second.acquired, timeout=2)
    assert [info.owner for info in backend.lock_info(name)] == [second.owner]
    assert traces(backend, raw_redis, name, first.owner) == set()
    await second.cancelled()  # it releases on its way out
    assert not await holder.locked()


# 2. The race: cancelled as the lock is handed over ---------------------------------------------


RACE_ROUNDS = 24


async def test_race__cancel_as_the_release_hands_over_never_leaves_the_lock_held(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, prefix: str
) -> None:
    """Release and cancel in one loop iteration, in several orders, many times.

    Whether a round's waiter saw the grant before its cancellation or not, the lock ends free
    (a waiter that did acquire releases when cancelled), with no queue or wake-up entry left.
    """
    name = "faults:race"
    outcomes: list[str] = []
    baseline = len(renewer)
    last_token = 0
    for round_ in range(RACE_ROUNDS):
        variant = round_ % 4
        if variant == 3:
            # A blocking holder in another thread (an explicit owner: any thread may release).
            sync_holder = lock(name, using=using, owner=f"thread-holder-{round_}")
            assert await asyncio.to_thread(sync_holder.acquire)
        else:
            holder = alock(name, using=using)
            assert await holder.acquire()
        waiter = Waiter(name, using, auto_renew=True)
        await waiter.registered.wait()
        await eventually(lambda w=waiter: waiting(backend, raw_redis, name, w.owner))

        if variant == 0:  # cancelled right after the awaited release returns
            await holder.release()
            waiter.task.cancel()
        elif variant == 1:  # cancelled a loop iteration or two after the release
            await holder.release()
            for _ in range(round_ % 3):
                await asyncio.sleep(0)
            waiter.task.cancel()
        elif variant == 2:  # cancelled first: its withdraw races the release's handoff
            waiter.task.cancel()
            await holder.release()
        else:  # released from another thread, cancelled as that returns
            await asyncio.to_thread(sync_holder.release)
            waiter.task.cancel()
        await ends_cancelled(waiter.task)
        outcomes.append("acquired, then released" if waiter.acquired else "never acquired")

        assert backend.lock_info(name) == [], f"round {round_}: the lock was left held"
        assert traces(backend, raw_redis, name, waiter.owner) == set()
        if using == "default":
            assert queue_keys(raw_redis, prefix) == []
        token = await free_for_another_owner(name, using, f"next-{round_}")
        assert token > last_token
        last_token = token
        assert len(renewer) == baseline, "a cancelled acquire must not leave a lease renewed"
    print(f"race outcomes on {using}: {sorted(set(outcomes))}")


async def test_race__cancelled_after_the_grant_arrived_drops_the_handed_lock(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, monkeypatch: Any
) -> None:
    """The exact window, made certain: the grant is read, then the task is cancelled."""
    name = "faults:race-exact"
    holder = alock(name, using=using, owner="holder")
    assert await holder.acquire()
    held_token = holder.fencing_token
    assert held_token is not None
    real_claim = backend.await_and_claim
    claims: list[AcquireResult] = []

    async def claimed_then_cancelled(
        name_: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        await holder.release()  # hands the lock to this waiter, on the backend
        claims.append(await real_claim(name_, owner, timeout, request))
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)  # the cancellation lands here: the claim is never returned
        raise AssertionError("not reached")

    monkeypatch.setattr(backend, "await_and_claim", claimed_then_cancelled)
    waiter = Waiter(name, using, auto_renew=True)
    await ends_cancelled(waiter.task)
    monkeypatch.undo()

    [claim] = claims
    assert claim.acquired, "the lock was handed to the waiter before it was cancelled"
    assert claim.fencing_token is not None
    assert claim.fencing_token > held_token
    assert not waiter.acquired
    assert backend.lock_info(name) == [], "the handed lock must be given up"
    assert traces(backend, raw_redis, name, waiter.owner) == set()
    assert await free_for_another_owner(name, using, "next") > claim.fencing_token


# 3. Cancelled holding, cancelled releasing, cancelled by a timeout ------------------------------


async def test_cancel_while_holding__async_with_releases_on_exit(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, prefix: str
) -> None:
    name = "faults:cancel-holding"
    baseline = len(renewer)
    entered = asyncio.Event()
    tokens: list[int | None] = []

    async def work() -> None:
        async with alock(name, using=using, ttl=5) as held:
            tokens.append(held.fencing_token)
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(work())
    await entered.wait()
    assert len(renewer) == baseline + 1, "the with block renews its lease"
    task.cancel()
    await ends_cancelled(task)

    assert backend.lock_info(name) == []
    assert len(renewer) == baseline
    [held_token] = tokens
    assert held_token is not None
    token = await free_for_another_owner(name, using, "next")
    assert token > held_token
    assert backend.lock_info(name) == [], "nothing took the lock after the next owner"


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
async def test_cancel_while_releasing__the_exit_still_frees_the_lock(
    using: str, backend: BaseLockBackend, turns: int
) -> None:
    """Cancelled in the block, then cancelled again while its exit's release is under way."""
    name = "faults:cancel-releasing"
    entered = asyncio.Event()

    async def work() -> None:
        async with alock(name, using=using, ttl=5):
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.create_task(work())
    await entered.wait()
    task.cancel()
    for _ in range(turns):
        await asyncio.sleep(0)
    task.cancel()
    await ends_cancelled(task)
    assert backend.lock_info(name) == []
    await free_for_another_owner(name, using, "next")


async def test_cancel_before_the_release_is_sent__the_lock_is_still_released(
    using: str, backend: BaseLockBackend, monkeypatch: Any
) -> None:
    """The exact window of a cancelled release: before its command reached the backend."""
    name = "faults:cancel-release-unsent"
    real_arelease = backend.arelease

    async def cancelled_first(
        name_: str, owner: str, request: ReleaseRequest = ReleaseRequest()
    ) -> int | None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
        return await real_arelease(name_, owner, request)

    handle = alock(name, using=using, ttl=30)
    assert await handle.acquire()
    monkeypatch.setattr(backend, "arelease", cancelled_first)
    with pytest.raises(asyncio.CancelledError):
        await handle.release()
    monkeypatch.undo()
    assert backend.lock_info(name) == [], "a cancelled release must still free the lock"
    assert handle.fencing_token is None
    await free_for_another_owner(name, using, "next")


async def test_wait_for_timeout__a_timed_out_acquire_leaves_no_trace(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, prefix: str
) -> None:
    name = "faults:wait-for"
    holder = alock(name, using=using, owner="holder")
    assert await holder.acquire()
    waiter = alock(name, using=using)
    owners: list[str] = []

    async def acquire() -> bool:
        owners.append(current_task_owner())
        return await waiter.acquire()  # waits for ever: only wait_for ends it

    for _ in range(3):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(acquire(), 0.05)
    assert len(owners) == 3
    for owner in set(owners):
        assert traces(backend, raw_redis, name, owner) == set()
    if using == "default":
        assert queue_keys(raw_redis, prefix) == []
    await holder.release()
    assert not await holder.locked()
    await free_for_another_owner(name, using, "next")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in Python 3.11")
async def test_asyncio_timeout__a_timed_out_acquire_leaves_no_trace(
    using: str, backend: BaseLockBackend, raw_redis: redis_py.Redis, prefix: str
) -> None:
    name = "faults:asyncio-timeout"
    holder = alock(name, using=using, owner="holder")
    assert await holder.acquire()
    waiter = alock(name, using=using, auto_renew=True)
    baseline = len(renewer)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await waiter.acquire()
    # The test's own task was the waiter: it holds nothing, and is queued nowhere.
    assert waiter.fencing_token is None
    assert not await waiter.owned()
    assert traces(backend, raw_redis, name, current_task_owner()) == set()
    if using == "default":
        assert queue_keys(raw_redis, prefix) == []
    assert len(renewer) == baseline
    await holder.release()
    assert not await holder.locked()
    assert await waiter.acquire(blocking=False), "the same task may acquire afterwards"
    await waiter.release()


# 4. The event loop is never blocked ------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.slow
async def test_loop_not_blocked__while_a_task_waits_for_a_lock_held_by_a_thread(
    raw_redis: redis_py.Redis,
) -> None:
    name = "faults:heartbeat-wait"
    backend = locks["default"]
    held, may_release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock(name, ttl=30):
            held.set()
            may_release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert await asyncio.to_thread(held.wait, 30)
        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(stop))
        waiter = Waiter(name, "default")
        await waiter.registered.wait()
        await eventually(lambda: waiting(backend, raw_redis, name, waiter.owner))
        started = time.monotonic()
        await asyncio.sleep(1.0)  # the scenario itself: a second of waiting, beats ticking
        assert not waiter.acquired
        may_release.set()
        await eventually(lambda: waiter.acquired, timeout=2)
        waited = time.monotonic() - started
        stop.set()
        longest = await beat
    finally:
        may_release.set()
        await asyncio.to_thread(thread.join, 30)
    await waiter.cancelled()
    assert waited >= 1.0
    assert longest < 0.25, f"the event loop stalled for {longest:.3f}s"
    assert not backend.locked(name)


@pytest.mark.serial
@pytest.mark.slow
async def test_loop_not_blocked__while_a_task_holds_with_renewal_for_several_leases() -> None:
    name = "faults:heartbeat-hold"
    stop = asyncio.Event()
    beat = asyncio.create_task(heartbeat(stop))
    async with alock(name, ttl=0.3, auto_renew=True) as held:
        token = held.fencing_token
        await asyncio.sleep(1.5)  # five lease lengths, held by renewal alone
        assert await held.owned()
        await held.check()
        assert held.fencing_token == token
        assert not held.lost
    stop.set()
    longest = await beat
    assert longest < 0.25, f"the event loop stalled for {longest:.3f}s"
    assert not await held.locked()


# 5. Blocking and asyncio holders across processes ----------------------------------------------


@pytest.mark.serial
@pytest.mark.slow
async def test_processes__an_async_waiter_acquires_when_a_process_releases(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name = "faults:cross-sync-holds"
    backend = locks["default"]
    child = spawn.Process(target=workers.hold_until_told, args=(redis_url, prefix, name))
    child.start()
    try:
        reply = await asyncio.to_thread(raw_redis.blpop, [f"{prefix}:holding"], 60)
        assert reply is not None, "the process never acquired the lock"
        child_token = int(reply[1])
        [info] = backend.lock_info(name)
        assert info.pid == child.pid

        stop = asyncio.Event()
        beat = asyncio.create_task(heartbeat(stop))
        waiter = Waiter(name, "default")
        await waiter.registered.wait()
        await eventually(lambda: waiting(backend, raw_redis, name, waiter.owner))
        await asyncio.sleep(1.0)  # the scenario: a second of waiting for another process
        assert not waiter.acquired
        raw_redis.rpush(f"{prefix}:may-release", "1")
        await eventually(lambda: waiter.acquired, timeout=5)
        acquired_at = time.monotonic_ns()
        stop.set()
        longest = await beat

        releasing = raw_redis.lpop(f"{prefix}:releasing")
        assert releasing is not None
        assert acquired_at >= int(releasing), "acquired before the process released"
        assert (acquired_at - int(releasing)) / 1e9 < 2.0, "handed over, not polled for"
        [info] = backend.lock_info(name)
        assert info.owner == waiter.owner
        assert info.fencing_token > child_token
        assert longest < 0.25, f"the event loop stalled for {longest:.3f}s"
        await waiter.cancelled()
        assert backend.lock_info(name) == []
    finally:
        raw_redis.rpush(f"{prefix}:may-release", "1")
        await asyncio.to_thread(child.join, 60)
    assert child.exitcode == 0


@pytest.mark.slow
async def test_processes__a_blocking_process_waits_for_an_async_holder(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name = "faults:cross-async-holds"
    backend = locks["default"]
    held = alock(name, ttl=30)
    assert await held.acquire()
    token = held.fencing_token
    assert token is not None
    child = spawn.Process(target=workers.try_then_wait, args=(redis_url, prefix, name))
    child.start()
    try:
        tried = await asyncio.to_thread(raw_redis.blpop, [f"{prefix}:tried"], 60)
        assert tried is not None
        assert tried[1] == b"0", "a non-blocking acquire must fail while the task holds"
        await eventually(lambda: raw_redis.zcard(backend.key(name, "q")) == 1, 60)
        released_at = time.monotonic_ns()
        await held.release()
        taken = await asyncio.to_thread(raw_redis.blpop, [f"{prefix}:taken"], 60)
        assert taken is not None, "the process never acquired the lock"
        child_token, child_acquired_at = (int(x) for x in taken[1].split())
        assert child_token > token
        assert child_acquired_at >= released_at
        assert (child_acquired_at - released_at) / 1e9 < 2.0, "handed over, not polled for"
    finally:
        await asyncio.to_thread(child.join, 60)
    assert child.exitcode == 0
    assert not await held.locked()


@pytest.mark.slow
def test_processes__alock_and_lock_exclude_each_other_with_no_lost_update(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    sync_rounds, tasks, async_rounds = 20, 3, 8
    children = [
        spawn.Process(target=workers.count_under_lock, args=(redis_url, prefix, n, sync_rounds))
        for n in range(2)
    ] + [
        spawn.Process(
            target=workers.acount_under_lock,
            args=(redis_url, prefix, f"a{n}", tasks, async_rounds),
        )
        for n in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0] * 4
    total = 2 * sync_rounds + 2 * tasks * async_rounds
    assert int(raw_redis.get(f"{prefix}:counter") or 0) == total, "an update was lost"
    entries = [entry.decode().split() for entry in raw_redis.lrange(f"{prefix}:holds", 0, -1)]
    assert len(entries) == total
    holds = sorted((int(start), int(end)) for _, start, end in entries)
    for (_, end), (start, _) in itertools.pairwise(holds):
        assert end <= start, "two holds overlapped"
    holders = {who for who, _, _ in entries}
    assert holders == {"0", "1"} | {f"a{n}.{t}" for n in range(2) for t in range(tasks)}


# 6. Renewal stops when nobody can release ------------------------------------------------------


def test_renewal__stops_when_the_holders_event_loop_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = "faults:loop-closed"
    backend = locks["default"]
    caplog.set_level(logging.WARNING, logger="django_redis_lock")
    baseline = len(renewer)

    async def main() -> int:
        held = alock(name, ttl=0.5, auto_renew=True)
        assert await held.acquire()
        assert held.fencing_token is not None
        return held.fencing_token  # returns holding it: nobody will ever release it

    token = in_thread(lambda: asyncio.run(main()))
    closed_at = time.monotonic()
    eventually_sync(lambda: "Stopped renewing lock" in caplog.text, timeout=10)
    assert repr(name) in caplog.text
    eventually_sync(lambda: not backend.locked(name), timeout=10)
    freed_after = time.monotonic() - closed_at
    # Renewed on, the lease would never end: ten leases is room for a busy machine.
    assert freed_after < 5.0, f"the lease ran on for {freed_after:.2f}s"
    assert len(renewer) == baseline, "the orphaned lease must leave the renewal registry"
    with lock(name, blocking=False) as taker:
        assert taker.fencing_token is not None
        assert taker.fencing_token > token


async def test_renewal__stops_when_the_holding_task_ends_without_releasing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = "faults:task-ended"
    backend = locks["default"]
    caplog.set_level(logging.WARNING, logger="django_redis_lock")
    baseline = len(renewer)

    async def leak() -> None:
        assert await alock(name, ttl=0.5, auto_renew=True).acquire()

    await asyncio.create_task(leak())
    ended_at = time.monotonic()
    assert len(renewer) == baseline + 1
    await eventually(lambda: "Stopped renewing lock" in caplog.text, timeout=10)
    assert "the task holding it ended without releasing it" in caplog.text
    await eventually(lambda: not backend.locked(name), timeout=10)
    # Renewed on, the lease would never end: ten leases is room for a busy machine.
    assert time.monotonic() - ended_at < 5.0
    assert len(renewer) == baseline


# 7. Each event loop's client is closed with its loop -------------------------------------------


def test_per_loop_clients__closed_after_each_asyncio_run(raw_redis: redis_py.Redis) -> None:
    name = "faults:per-loop"
    backend = locks["default"]
    assert isinstance(backend, RedisBackend)
    assert not backend.locked(name)  # the blocking client's connection is open from now on
    connections_before = {c["id"] for c in raw_redis.client_list()}

    async def wait_then_release() -> int:
        handle = alock(name, timeout=5)
        assert await handle.acquire()
        token = handle.fencing_token
        assert token is not None
        await handle.release()
        return token

    async def main() -> int:
        async with alock(name, ttl=5) as held:
            assert held.fencing_token is not None
            # A second task waits meanwhile, in BLPOP on a connection of its own.
            waiter = asyncio.create_task(wait_then_release())
            await eventually(lambda: backend.client.zcard(backend.key(name, "q")) == 1)
            token = held.fencing_token
        assert await waiter > token
        assert len(backend._async_clients) == 1
        return token

    tokens = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(4):
            tokens.append(in_thread(lambda: asyncio.run(main())))
            assert len(backend._async_clients) == 0, "a closed loop's client was kept"
            eventually_sync(lambda: not backend.locked(name))
        gc.collect()
    assert tokens == sorted(set(tokens))
    resource_warnings = [str(w.message) for w in caught if w.category is ResourceWarning]
    assert resource_warnings == []

    def connections_opened() -> list[dict[str, Any]]:
        return [c for c in raw_redis.client_list() if c["id"] not in connections_before]

    try:
        eventually_sync(lambda: connections_opened() == [], timeout=3)
    except AssertionError:
        raise AssertionError(f"connections left open: {connections_opened()}") from None


# 8. Redis gone --------------------------------------------------------------------------------


def own_server_setting(server: RedisServer) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {
                "url": server.url,
                "socket_timeout": 0.5,
                "socket_connect_timeout": 0.5,
            },
        }
    }


def stop_or_pause(server: RedisServer, fault: str) -> None:
    if fault == "stopped":
        server.stop()  # connections refused
    else:
        server.pause()  # connections accepted, never answered


@pytest.mark.parametrize("fault", ["stopped", "paused"])
async def test_redis_down__acquire_raises_unavailable_within_the_socket_timeout(
    own_server: RedisServer, fault: str
) -> None:
    with override_settings(LOCKS=own_server_setting(own_server)):
        handle = alock("faults:down", ttl=5)
        assert await handle.acquire()  # a connection now sits in the loop's pool
        await handle.release()
        stop_or_pause(own_server, fault)
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="Redis at"):
            await asyncio.wait_for(handle.acquire(timeout=30), 10)
        elapsed = time.monotonic() - started
        assert elapsed < 1.5, f"took {elapsed:.2f}s with a socket timeout of 0.5s"
        assert handle.fencing_token is None


@pytest.mark.parametrize("fault", ["stopped", "paused"])
async def test_redis_down__a_waiting_task_learns_it_within_the_socket_timeout(
    own_server: RedisServer, fault: str
) -> None:
    with override_settings(LOCKS=own_server_setting(own_server)):
        name = "faults:down-waiting"
        backend = locks["default"]
        assert backend.acquire(name, "holder", AcquireRequest(ttl=30, metadata=b"{}")).acquired
        waiter = alock(name)
        task = asyncio.create_task(waiter.acquire(timeout=30))
        await eventually(lambda: backend.client.zcard(backend.key(name, "q")) == 1)
        stop_or_pause(own_server, fault)
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(task, 10)
        elapsed = time.monotonic() - started
        assert elapsed < 1.5, f"took {elapsed:.2f}s with a socket timeout of 0.5s"


@pytest.mark.parametrize("fault", ["stopped", "paused"])
async def test_redis_down__a_waiting_task_cancelled_meanwhile_ends_cancelled(
    own_server: RedisServer, fault: str
) -> None:
    with override_settings(LOCKS=own_server_setting(own_server)):
        name = "faults:down-cancelled"
        backend = locks["default"]
        assert backend.acquire(name, "holder", AcquireRequest(ttl=30, metadata=b"{}")).acquired
        task = asyncio.create_task(alock(name).acquire(timeout=30))
        await eventually(lambda: backend.client.zcard(backend.key(name, "q")) == 1)
        stop_or_pause(own_server, fault)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, "a cancelled task must end within the socket timeout"
        assert task.cancelled(), f"the cancellation was lost: {task.exception()!r}"


# 9. A blocking acquire interrupted mid-wait -----------------------------------------------------


@pytest.mark.parametrize("handed_over", [False, True], ids=["waiting", "handed-over"])
def test_keyboard_interrupt__while_waiting_leaves_no_trace(
    using: str,
    backend: BaseLockBackend,
    raw_redis: redis_py.Redis,
    prefix: str,
    monkeypatch: Any,
    handed_over: bool,
) -> None:
    """A KeyboardInterrupt in the blocking wait (before or after the lock was handed over)."""
    name = "faults:interrupted"
    holder = lock(name, using=using, owner="holder")
    assert holder.acquire()
    owner = current_owner()
    seen: list[set[str]] = []

    def interrupted_wait(name_: str, owner_: str, timeout: float, request: AcquireRequest) -> None:
        assert (name_, owner_) == (name, owner)
        if handed_over:
            holder.release()  # the lock is this owner's now, on the backend
        seen.append(traces(backend, raw_redis, name, owner))
        raise KeyboardInterrupt

    monkeypatch.setattr(backend, "wait_and_claim", interrupted_wait)
    waiter = lock(name, using=using, auto_renew=True)
    baseline = len(renewer)
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire(timeout=30)
    monkeypatch.undo()

    if handed_over:
        assert "hold" in seen[0], "the release handed the lock to the waiter"
    else:
        assert seen[0] >= {"queue"}, "the waiter was registered before the interrupt"
    assert traces(backend, raw_redis, name, owner) == set()
    if using == "default":
        assert queue_keys(raw_redis, prefix) == []
    assert waiter.fencing_token is None
    assert len(renewer) == baseline
    if not handed_over:
        holder.release()
    assert not backend.locked(name), "the lock must not stay with the interrupted owner"
    assert waiter.acquire(blocking=False), "the interrupted thread may acquire afterwards"
    waiter.release()


# An interrupt just as the lock is taken ---------------------------------------------------------


class Interrupt(BaseException):
    """An interrupt (as KeyboardInterrupt is) that asyncio passes on like any exception."""


@contextmanager
def interrupted_on_acquiring(lock_name: str, error: type[BaseException]) -> Iterator[None]:
    """Raise ``error`` from a lock_acquired receiver: right after the backend counted the
    hold, before the acquire returns (signal receivers' Exceptions are only logged, but an
    interrupt is not an Exception)."""

    def receiver(*, name: str, **kwargs: Any) -> None:
        if name == lock_name:
            raise error

    lock_acquired.connect(receiver, weak=False)
    try:
        yield
    finally:
        lock_acquired.disconnect(receiver)


async def test_interrupt_on_acquiring__alock_undoes_the_hold(
    using: str, backend: BaseLockBackend
) -> None:
    name = "faults:interrupted-on-acquiring"
    handle = alock(name, using=using, auto_renew=True)
    baseline = len(renewer)
    with interrupted_on_acquiring(name, Interrupt), pytest.raises(Interrupt):
        await handle.acquire()
    assert handle.fencing_token is None, "the interrupted hold must be forgotten"
    assert len(renewer) == baseline, "and its lease not renewed"
    assert backend.lock_info(name) == [], "and the lock freed"
    assert await handle.acquire(blocking=False)
    await handle.release()


def test_interrupt_on_acquiring__lock_undoes_the_hold(
    using: str, backend: BaseLockBackend
) -> None:
    name = "faults:interrupted-on-acquiring"
    handle = lock(name, using=using, auto_renew=True)
    baseline = len(renewer)
    with interrupted_on_acquiring(name, KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
        handle.acquire()
    assert handle.fencing_token is None, "the interrupted hold must be forgotten"
    assert len(renewer) == baseline, "and its lease not renewed"
    assert backend.lock_info(name) == [], "and the lock freed"
    assert handle.acquire(blocking=False)
    handle.release()
