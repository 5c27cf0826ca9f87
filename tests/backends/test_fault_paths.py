"""The lock's promise under faults, on real redis-server processes and real signals.

Two holders never run at once unless one of them is told its lease was lost. Each test here
pauses (SIGSTOP), resumes (SIGCONT) or kills (SIGKILL) a process or a server at the moment
that once broke the promise, and checks from outside what ran when.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    LockLostError,
    alock,
    lock,
    locks,
)
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.signals import lock_lost
from django_redis_lock.testing import RedisServer
from tests.support import fault_workers
from tests.support.helpers import SlowLink, blocked_clients, eventually, own_locks

pytestmark = pytest.mark.slow

spawn = multiprocessing.get_context("spawn")


def start(target: Any, *args: Any) -> multiprocessing.process.BaseProcess:
    child = spawn.Process(target=target, args=args, daemon=True)
    child.start()
    return child


def pop(raw_redis: redis_py.Redis, key: str, timeout: float = 30) -> bytes:
    reply = raw_redis.blpop([key], timeout=timeout)
    assert reply is not None, f"nothing arrived on {key} within {timeout}s"
    return bytes(reply[1])


def queued(raw_redis: redis_py.Redis, prefix: str, name: str) -> int:
    return int(raw_redis.zcard(f"{prefix}:{{={name}}}:q"))


@pytest.fixture
def losses() -> Iterator[list[dict[str, Any]]]:
    """Every lock_lost signal sent while the test runs."""
    seen: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> None:
        seen.append(kwargs)

    lock_lost.connect(record, weak=False)
    yield seen
    lock_lost.disconnect(record)


# 1. A nested acquire after the outer lease ended -------------------------------------------


def test_nested_acquire__after_the_outer_lease_ended_and_another_held__raises_lost(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, losses: list[dict[str, Any]]
) -> None:
    name = "fault:nested"
    told: list[object] = []
    outer = lock(name, ttl=0.3, auto_renew=False, on_lost=told.append)
    with pytest.raises(LockLostError), outer:
        time.sleep(0.5)  # the lease ends; another process takes the lock and frees it
        child = start(fault_workers.take_and_release, redis_url, prefix, name, 0.0)
        pop(raw_redis, f"{prefix}:released")
        child.join(30)
        with outer:  # must not silently take a new hold in place of the lost one
            pytest.fail("the nested block ran as if the outer hold were still held")
    assert outer.lost
    assert told == [outer]
    assert [signal["reason"] for signal in losses] == ["its lease ended before a nested acquire"]
    assert not outer.locked(), "the refused nested acquire left a hold behind"


def test_nested_acquire__while_another_process_holds__never_frees_its_hold(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name = "fault:nested-held"
    outer = lock(name, ttl=0.3, auto_renew=False)
    with pytest.raises(LockLostError), outer:
        time.sleep(0.5)
        child = start(fault_workers.take_and_release, redis_url, prefix, name, 3.0)
        taken = int(pop(raw_redis, f"{prefix}:taken"))
        with outer:
            pytest.fail("the nested block ran beside another holder")
    [holder] = locks["default"].lock_info(name)
    assert holder.fencing_token == taken, "the other process's hold was freed"
    pop(raw_redis, f"{prefix}:released")
    child.join(30)


async def test_nested_acquire__asyncio__after_the_outer_lease_ended__raises_lost(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name = "fault:nested-async"
    outer = alock(name, ttl=0.3, auto_renew=False)
    with pytest.raises(LockLostError):
        async with outer:
            await asyncio.sleep(0.5)
            child = start(fault_workers.take_and_release, redis_url, prefix, name, 0.0)
            await asyncio.to_thread(pop, raw_redis, f"{prefix}:released")
            child.join(30)
            async with outer:
                pytest.fail("the nested block ran as if the outer hold were still held")
    assert outer.lost
    assert not await outer.locked()


def test_nested_acquire__of_a_live_hold_through_another_handle_counts_one_hold() -> None:
    name = "fault:nested-two-handles"
    with lock(name, ttl=5) as outer:
        with lock(name, ttl=5) as inner:
            assert inner.fencing_token == outer.fencing_token
            [holder] = locks["default"].lock_info(name)
            assert holder.holds == 2
        [holder] = locks["default"].lock_info(name)
        assert holder.holds == 1, "the inner release must leave the outer hold"
        assert not outer.lost
    assert not outer.locked()


# 2. A waiter paused while blocked ----------------------------------------------------------


def held_with_a_waiter(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, name: str, ttl: float
) -> tuple[Any, Any]:
    """Hold ``name`` here, with a process queued for it (asking for ``ttl``); return both."""
    holder = lock(name, ttl=30, owner="first")
    assert holder.acquire()
    waiter = start(fault_workers.hold_and_log, redis_url, prefix, name, ttl, 0.2)
    pop(raw_redis, f"{prefix}:ready")
    eventually(lambda: queued(raw_redis, prefix, name) == 1)
    assert waiter.pid is not None
    return holder, waiter


def test_handoff__a_waiter_paused_past_its_lease_waits_again_instead_of_overlapping(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    """Handed the lock while stopped, the waiter resumes after its lease went to another."""
    name = "fault:paused-waiter"
    holder, waiter = held_with_a_waiter(redis_url, prefix, raw_redis, name, 1.0)
    os.kill(waiter.pid, signal.SIGSTOP)
    try:
        holder.release()  # handed to the stopped waiter, with the 1s lease it asked for
        second = lock(name, ttl=30, owner="second")
        assert second.acquire(timeout=5), "the stopped waiter's lease must end"
        os.kill(waiter.pid, signal.SIGCONT)
        time.sleep(1.0)  # the waiter's wake-up arrives late: it must not enter now
        assert raw_redis.llen(f"{prefix}:entered") == 0, "the paused waiter ran beside us"
        entered_before, second_token = time.monotonic_ns(), second.fencing_token
        second.release()
    finally:
        os.kill(waiter.pid, signal.SIGCONT)
    token, at = pop(raw_redis, f"{prefix}:entered").split()
    assert int(at) > entered_before
    assert second_token is not None
    assert int(token) > second_token, "the waiter entered with a stale fencing token"
    lease = float(pop(raw_redis, f"{prefix}:lease"))
    assert lease > 0.5, f"a handed-over lock came with a {lease}s lease, not the 1s asked"
    waiter.join(30)
    assert waiter.exitcode == 0
    assert raw_redis.llen(f"{prefix}:lost") == 0


def test_handoff__a_waiter_killed_while_queued_holds_others_back_briefly(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    name = "fault:killed-waiter"
    holder, doomed = held_with_a_waiter(redis_url, prefix, raw_redis, name, 30.0)
    acquired_at: list[float] = []

    def wait_behind() -> None:
        handle = lock(name, ttl=30, owner="next")
        if handle.acquire(timeout=20):
            acquired_at.append(time.monotonic())
            handle.release()

    thread = threading.Thread(target=wait_behind)
    thread.start()
    eventually(lambda: queued(raw_redis, prefix, name) == 2)
    os.kill(doomed.pid, signal.SIGKILL)  # first in line, and gone: its registration stays
    doomed.join(30)
    released_at = time.monotonic()
    holder.release()  # handed to the first in line, who never claims it
    thread.join(30)
    assert acquired_at, "the next waiter never got the lock"
    delay = acquired_at[0] - released_at
    assert delay < 3.0, f"a dead waiter held the lock back {delay:.2f}s after the release"


def test_handoff__the_holder_gets_the_lease_it_asked_for() -> None:
    name = "fault:handoff-lease"
    holder = lock(name, ttl=30, owner="first")
    assert holder.acquire()
    leases: list[float | None] = []

    def wait() -> None:
        with lock(name, ttl=20, timeout=10, auto_renew=False) as taken:
            leases.append(taken.ttl())

    thread = threading.Thread(target=wait)
    thread.start()
    eventually(lambda: bool(locks["default"].lock_info(name)) and queued_any(name))
    holder.release()
    thread.join(30)
    assert leases
    assert leases[0] is not None
    assert leases[0] > 19


def queued_any(name: str) -> bool:
    backend: Any = locks["default"]
    return int(backend.client.zcard(backend.key(name, "q"))) > 0


# 3. An acquire that timed out on a frozen server -------------------------------------------


def warm_up() -> None:
    """Have the server load the scripts, so that a call queued while it is frozen runs."""
    with lock("fault:warm-up", ttl=1):
        pass


def fail_while_frozen(server: RedisServer, handle: Any) -> None:
    """Acquire while ``server`` is frozen (the call times out), then let the server run."""
    warm_up()
    server.pause()
    try:
        with pytest.raises(BackendUnavailableError):
            handle.acquire()
    finally:
        server.resume()


def held_count(server: RedisServer, name: str) -> list[tuple[str, int]]:
    return [(info.owner, info.holds) for info in locks["default"].lock_info(name)]


def test_timed_out_acquire__its_late_hold_is_withdrawn_when_the_server_answers(
    own_server: RedisServer,
) -> None:
    name = "fault:phantom"
    with override_settings(LOCKS=own_locks(own_server)):
        handle = lock(name, ttl=30)
        fail_while_frozen(own_server, handle)  # the queued acquire now runs: a hold unknown
        started = time.monotonic()
        eventually(lambda: held_count(own_server, name) == [], timeout=5)
        assert time.monotonic() - started < 3, "the late hold was left to its 30s lease"
        assert not handle.lost


def test_timed_out_acquire__a_retry_never_inherits_the_late_hold(
    own_server: RedisServer,
) -> None:
    name = "fault:phantom-retry"
    with override_settings(LOCKS=own_locks(own_server)):
        handle = lock(name, ttl=30)
        fail_while_frozen(own_server, handle)
        assert handle.acquire(), "the retry failed"
        assert [holds for _, holds in held_count(own_server, name)] == [1], (
            "server and client disagree on the hold count"
        )
        handle.release()
        assert held_count(own_server, name) == [], "the lock stayed held after the release"
        time.sleep(1.5)  # the withdrawal of the failed attempt must not touch a later hold
        assert handle.acquire()
        time.sleep(1.5)
        assert handle.owned()
        handle.release()


@pytest.mark.serial
def test_timed_out_wait__its_registration_never_swallows_a_grant(
    own_server: RedisServer,
) -> None:
    name = "fault:phantom-wait"
    # Waits of 1.5s: the registration outlives the time-out of the wait that made it.
    with override_settings(LOCKS=own_locks(own_server, socket_timeout=2)):
        holder = lock(name, ttl=30, owner="holder")
        assert holder.acquire()
        failed: list[BaseException] = []

        def wait() -> None:
            try:
                lock(name, ttl=30, timeout=20).acquire()
            except BackendUnavailableError as exc:
                failed.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        eventually(lambda: queued_any(name))
        own_server.pause()
        thread.join(10)
        time.sleep(0.2)  # the withdrawal is sent, and waits for the server too
        own_server.resume()
        assert failed, "the wait did not fail while the server was frozen"
        holder.release()  # the withdrawn waiter must not be handed the lock
        started = time.monotonic()
        third = lock(name, ttl=30, owner="third")
        assert third.acquire(timeout=5)
        assert time.monotonic() - started < 0.5, "a grant went to the waiter that gave up"
        third.release()
        eventually(lambda: not queued_any(name), timeout=5)


async def test_timed_out_acquire__asyncio__its_late_hold_is_withdrawn(
    own_server: RedisServer,
) -> None:
    name = "fault:phantom-async"
    with override_settings(LOCKS=own_locks(own_server)):
        handle = alock(name, ttl=30)
        async with alock("fault:warm-up"):
            pass
        own_server.pause()
        try:
            with pytest.raises(BackendUnavailableError):
                await handle.acquire()
        finally:
            own_server.resume()
        assert await handle.acquire()
        assert [holds for _, holds in held_count(own_server, name)] == [1]
        await handle.release()
        assert held_count(own_server, name) == []


# 4. One frozen server never costs another its leases ---------------------------------------


def test_renewal__a_frozen_alias_never_delays_a_healthy_one(redis_url: str) -> None:
    with RedisServer() as frozen:
        setting = {
            "default": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"url": redis_url, "key_prefix": "healthy"},
            },
            "frozen": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"url": frozen.url, "socket_timeout": 5},
            },
        }
        with override_settings(LOCKS=setting):
            on_frozen = lock("fault:frozen", ttl=1.5, using="frozen", raise_on_lost=False)
            healthy = lock("fault:healthy", ttl=1.5)
            with on_frozen, healthy:
                frozen.pause()
                try:
                    time.sleep(4.5)  # three leases of the healthy lock
                    assert not healthy.lost, "a frozen server cost another its lease"
                    assert healthy.owned()
                finally:
                    frozen.resume()


# asyncio: a cancellation the client library swallowed ---------------------------------------


async def test_cancelled_acquire__always_ends_cancelled_and_leaves_the_lock_free() -> None:
    """Cancel acquires at every point of their round trips; none may go on as if uncancelled.

    redis-py's asyncio client can hand a reply to a task cancelled meanwhile as if the
    cancellation never came; the lock raises it again.
    """
    name = "fault:cancelled-acquire"
    went_on = 0
    for round_ in range(120):
        handle = alock(name, ttl=10)

        async def take(handle: Any = handle) -> None:
            assert await handle.acquire()
            try:
                await asyncio.sleep(3600)
            finally:
                await handle.release()

        task = asyncio.create_task(take())
        for _ in range(round_ % 7):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        if not done:
            went_on += 1
            task.cancel()
            await asyncio.wait({task}, timeout=5)
        assert task.cancelled() or not done
    assert went_on == 0, f"{went_on} cancelled acquires went on holding the lock"
    assert not await alock(name).locked()


# A lease shorter than the round trip -------------------------------------------------------


@pytest.mark.parametrize("blocking", [False, True])
def test_lease_shorter_than_the_round_trip__refused_instead_of_retried_forever(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, blocking: bool
) -> None:
    # Each answer comes 20 ms after its request: a 5 ms lease always ends on the way. Such an
    # acquire used to claim again and again at once, forever.
    parts = urllib.parse.urlsplit(redis_url)
    assert parts.hostname is not None
    assert parts.port is not None
    link = SlowLink(parts.hostname, parts.port, delay=0.01)
    far = {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": f"redis://127.0.0.1:{link.port}/0", "key_prefix": prefix},
    }
    try:
        with override_settings(LOCKS={"default": far}):
            handle = lock("short", ttl=0.005)
            errors: list[BaseException] = []

            def acquire() -> None:
                try:
                    handle.acquire(blocking=blocking)
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=acquire, daemon=True)
            thread.start()
            thread.join(10)
            assert not thread.is_alive(), "the acquire never returned"
    finally:
        link.close()
    assert len(errors) == 1, errors
    assert isinstance(errors[0], InvalidLockArgumentError)
    assert "round trip" in str(errors[0])
    assert not handle.owned()
    eventually(lambda: not raw_redis.exists(f"{prefix}:{{=short}}:h"))


# 5. A wake-up call taken by a waiter that dies before passing it on ----------------------------


def test_a_lost_wake_up_call_costs_the_waiter_time_never_a_second_holder(
    raw_redis: redis_py.Redis,
) -> None:
    """The release hands the lock to the waiting owner and pushes its wake-up call; the server
    gives the call to another waiter, blocked longer, that dies before passing it on. The grant
    ends unclaimed, another owner takes the lock, and the waiter, whose wait ends unwoken,
    takes it only at that release."""
    name = "faults:unwoken"
    backend = locks["default"]
    assert isinstance(backend, RedisBackend)
    assert backend.acquire(name, "holder", AcquireRequest(ttl=30)).acquired
    inside: list[list[str]] = []
    taken: list[bool] = []
    # The waiter that dies with the call: blocked on the wake-up list before the owner is.
    thief, before = raw_redis.connection_pool.get_connection(), blocked_clients(raw_redis)
    try:
        thief.send_command("BLPOP", backend.key(name, "s"), 30)
        eventually(lambda: blocked_clients(raw_redis) == before + 1)

        def wait() -> None:
            with lock(name, timeout=30) as waiter:
                taken.append(waiter.fencing_token is not None)
                inside.append(holders_of(backend, name))

        waiter = threading.Thread(target=wait)
        waiter.start()
        eventually(lambda: blocked_clients(raw_redis) == before + 2)
        backend.release(name, "holder")
        call = thief.read_response()
    finally:
        thief.disconnect()
    assert call is not None, "the thief was given a call"
    assert not call[1].endswith(b" holder"), "the waiter's call, taken"
    eventually(lambda: holders_of(backend, name) == [], timeout=5)  # the grant ended unclaimed
    assert backend.acquire(name, "other", AcquireRequest(ttl=30)).acquired
    time.sleep(backend.max_wait + 0.5)  # the waiter's wait ended, unwoken: it claims, and waits
    assert taken == []
    assert holders_of(backend, name) == ["other"]
    backend.release(name, "other")
    waiter.join(10)
    assert taken == [True]
    [alone] = inside
    assert len(alone) == 1
    assert alone != ["other"], "the waiter held the lock beside the other owner"


def holders_of(backend: Any, name: str) -> list[str]:
    return sorted(info.owner for info in backend.lock_info(name))
