"""lock_all in one step: every name taken by one atomic script, or none (Redis and LocMem).

Where nothing stands in its way, a multi-lock takes every name with one script
(``acquire_all.lua``): one round trip, and never some names held without the others. A name
held by another owner makes the script take nothing; the names are then taken one by one,
in order, waiting (tests/contract/test_lock_all_contract.py). Cluster: test_cluster.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import (
    BackendUnavailableError,
    LockLostError,
    LockNotOwnedError,
    alock_all,
    lock,
    lock_all,
    locks,
)
from django_redis_lock._core.owner import new_attempt
from django_redis_lock.backends.base import AcquireRequest, ReleaseRequest, holder_metadata
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually, in_thread, own_locks

NAMES = ["once:a", "once:b", "once:c"]


def holders(using: str, name: str) -> list[tuple[str, int]]:
    return [(info.owner, info.holds) for info in locks[using].lock_info(name)]


def scripts_run(raw_redis: redis_py.Redis) -> int:
    """Return how many scripts clients ran since the last reset (EVALSHA and EVAL)."""
    stats = raw_redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def test_lock_all__takes_every_free_name_with_one_script(raw_redis: redis_py.Redis) -> None:
    multi = lock_all(NAMES, ttl=30)
    with multi:  # the server loads the script
        pass
    raw_redis.config_resetstat()
    assert multi.acquire()
    try:
        assert scripts_run(raw_redis) == 1
        assert all(holders("default", name) != [] for name in NAMES)
        tokens = multi.fencing_tokens
        assert sorted(tokens) == NAMES
        assert [member.fencing_token for member in multi.locks] == [tokens[n] for n in NAMES]
        assert in_thread(lambda: lock("once:b").acquire(blocking=False)) is False
    finally:
        multi.release()
    assert all(holders("default", name) == [] for name in NAMES)


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_acquire_all__a_name_held_by_another_owner_takes_nothing(using: str) -> None:
    backend = locks[using]
    request = AcquireRequest(ttl=30, attempt="x1")
    assert backend.acquire("once:c", "other", AcquireRequest(ttl=30)).acquired
    result = backend.acquire_all(NAMES, "me", request, [0, 0, 0])
    assert result is not None
    assert not result.acquired
    assert result.refused == "once:c"
    assert result.retry_after is not None
    assert 29 < result.retry_after <= 30
    assert [holders(using, name) for name in NAMES] == [[], [], [("other", 1)]]
    backend.force_release("once:c")


def test_acquire_all__an_earlier_attempt_run_late_takes_nothing_from_a_later_one() -> None:
    # As for acquire (test_redis_backend.py): a lock_all that timed out may reach the server
    # after its owner's next one took the names; the withdrawals owed for it come after it,
    # and must leave the later holds alone.
    backend = locks["default"]
    earlier, later = new_attempt(), new_attempt()
    request = AcquireRequest(
        ttl=30, metadata=holder_metadata(host="h", pid=1, thread="t"), attempt=later
    )
    taken = backend.acquire_all(NAMES, "owner", request, [0, 0, 0])
    assert taken is not None
    assert taken.acquired
    late = backend.acquire_all(
        NAMES, "owner", dataclasses.replace(request, attempt=earlier), [0, 0, 0]
    )
    assert late is not None
    assert not late.acquired
    for name in NAMES:
        backend.withdraw(name, "owner", 0, earlier)
    assert [backend.release(name, "owner", ReleaseRequest(holds=1)) for name in NAMES] == [0, 0, 0]


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_acquire_all__reentrant_names_count_one_more_hold(using: str) -> None:
    backend = locks[using]
    assert backend.acquire("once:b", "me", AcquireRequest(ttl=5, holds=0)).acquired
    result = backend.acquire_all(NAMES, "me", AcquireRequest(ttl=30, attempt="x2"), [0, 1, 0])
    assert result is not None
    assert [taken.holds for taken in result.results] == [1, 2, 1]
    assert all(29 < (taken.lease or 0) <= 30 for taken in result.results)
    for name, count in zip(NAMES, [1, 2, 1], strict=True):
        assert backend.release(name, "me", ReleaseRequest(holds=count)) == count - 1


@pytest.mark.parametrize("using", ["default", "locmem"])
def test_acquire_all__leaves_lost_leases_and_fair_queues_to_each_names_acquire(
    using: str,
) -> None:
    backend = locks[using]
    # The caller knows of a hold of once:a that has no lease any more: a loss, reported by
    # that name's own acquire.
    result = backend.acquire_all(NAMES, "me", AcquireRequest(ttl=30), [1, 0, 0])
    assert result is not None
    assert (result.acquired, result.refused) == (False, None)
    # Fair order with an owner queued for a free once:b (its holder's lease ended, so nobody
    # handed it over): the queue decides, in once:b's own acquire.
    assert backend.acquire("once:b", "holder", AcquireRequest(ttl=0.2)).acquired
    assert not backend.acquire("once:b", "waiter", AcquireRequest(ttl=30, wait=30)).acquired
    eventually(lambda: not backend.locked("once:b"))
    result = backend.acquire_all(NAMES, "me", AcquireRequest(ttl=30, fair=True), [0, 0, 0])
    assert result is not None
    assert (result.acquired, result.refused) == (False, None)
    assert all(holders(using, name) == [] for name in NAMES)
    backend.withdraw("once:b", "waiter")


def test_lock_all__a_refusal_without_waiting_takes_no_name_even_for_a_moment(
    raw_redis: redis_py.Redis,
) -> None:
    with lock_all(NAMES):  # the server loads the script
        pass
    other = lock("once:c", ttl=30)
    assert in_thread(other.acquire)
    raw_redis.config_resetstat()
    assert lock_all(NAMES).acquire(blocking=False) is False
    # One script, and no acquire and release of once:a and once:b around it.
    assert scripts_run(raw_redis) == 1
    locks["default"].force_release("once:c")


def test_lock_all__a_lost_name_is_reported_by_its_own_acquire() -> None:
    multi = lock_all(NAMES, ttl=0.3)
    assert multi.acquire()
    eventually(lambda: not lock("once:b").locked())  # every lease ended: not renewed
    with pytest.raises(LockLostError):
        multi.acquire()  # reentrant, but the holds it knows of are gone
    assert multi.lost


# Faults -----------------------------------------------------------------------------------


def test_timed_out_lock_all__its_late_holds_are_withdrawn_and_a_retry_inherits_none(
    own_server: RedisServer,
) -> None:
    with override_settings(LOCKS=own_locks(own_server)):
        with lock_all(["once:warm-up", "once:up"]):  # the server has the script now
            pass
        multi = lock_all(NAMES, ttl=30)
        own_server.pause()
        try:
            with pytest.raises(BackendUnavailableError):
                multi.acquire()
        finally:
            own_server.resume()  # the queued script runs now: three holds nobody knows of
        started = time.monotonic()
        eventually(lambda: all(holders("default", n) == [] for n in NAMES), timeout=5)
        assert time.monotonic() - started < 3, "the late holds were left to their 30s lease"
        assert multi.acquire()
        assert [count for name in NAMES for _, count in holders("default", name)] == [1, 1, 1]
        multi.release()
        assert all(holders("default", name) == [] for name in NAMES)
        assert not multi.lost


# Release: every name in one round trip ------------------------------------------------------


def reads(client: redis_py.Redis) -> int:
    """Return how many reads of client requests the server has made (``INFO stats``)."""
    return int(client.info("stats")["total_reads_processed"])


@pytest.mark.parametrize("leave", ["release", "with"])
def test_release__every_name_in_one_round_trip(own_server: RedisServer, leave: str) -> None:
    # The server reads one request for the three releases: the pipeline. (Reading INFO's own
    # request is the one more; three releases one by one were three.)
    with override_settings(LOCKS=own_locks(own_server, socket_timeout=5)):
        with lock_all(["once:warm-up", "once:up"]):  # the server has the scripts now
            pass
        multi = lock_all(NAMES, ttl=30, auto_renew=False)
        multi.__enter__()
        stats = redis_py.Redis.from_url(own_server.url)
        before = reads(stats)
        if leave == "release":
            multi.release()
        else:
            multi.__exit__(None, None, None)
        assert reads(stats) - before == 2
        stats.close()
        assert all(holders("default", name) == [] for name in NAMES)
        assert [member.fencing_token for member in multi.locks] == [None, None, None]


def test_release__a_name_not_held_is_named_and_the_others_are_released(
    own_server: RedisServer,
) -> None:
    with override_settings(LOCKS=own_locks(own_server, socket_timeout=5)):
        multi = lock_all(NAMES, ttl=30)
        assert multi.acquire()
        locks["default"].force_release("once:b")
        with pytest.raises(LockNotOwnedError, match=r"\['once:b'\]"):
            multi.release()
        assert all(holders("default", name) == [] for name in NAMES)
        assert multi.lost


def test_release__a_frozen_server_raises_and_every_name_is_freed_when_it_answers(
    own_server: RedisServer,
) -> None:
    # The pipeline's replies never come: each name counts as released on this side, the
    # error is raised, and the releases the server runs late (or their withdrawal) free
    # every name; nobody is told it still holds one.
    with override_settings(LOCKS=own_locks(own_server)):
        with lock_all(["once:warm-up", "once:up"]):
            pass
        multi = lock_all(NAMES, ttl=30)
        assert multi.acquire()
        own_server.pause()
        try:
            with pytest.raises(BackendUnavailableError):
                multi.release()
        finally:
            own_server.resume()
        eventually(lambda: all(holders("default", n) == [] for n in NAMES), timeout=5)
        assert all(member.fencing_token is None for member in multi.locks)
        assert in_thread(lambda: lock_all(NAMES).acquire(blocking=False)) is True


@pytest.mark.parametrize("leave", ["release", "with"])
async def test_arelease__every_name_in_one_round_trip(own_server: RedisServer, leave: str) -> None:
    with override_settings(LOCKS=own_locks(own_server, socket_timeout=5)):
        async with alock_all(["once:warm-up", "once:up"]):  # the server has the scripts now
            pass
        multi = alock_all(NAMES, ttl=30, auto_renew=False)
        await multi.__aenter__()
        stats = redis_py.Redis.from_url(own_server.url)
        before = reads(stats)
        if leave == "release":
            await multi.release()
        else:
            await multi.__aexit__(None, None, None)
        assert reads(stats) - before == 2
        stats.close()
        assert all(holders("default", name) == [] for name in NAMES)
        assert [member.fencing_token for member in multi.locks] == [None, None, None]


async def test_arelease__cancelled_on_a_frozen_server_still_frees_every_name(
    own_server: RedisServer,
) -> None:
    # The task is cancelled while the pipeline's replies are awaited: every name's release
    # is finished all the same once the server answers (as an alock's is), and the task
    # ends cancelled.
    with override_settings(LOCKS=own_locks(own_server, socket_timeout=5)):
        async with alock_all(["once:warm-up", "once:up"]):
            pass
        multi = alock_all(NAMES, ttl=30)
        acquired, go = asyncio.Event(), asyncio.Event()

        async def hold_then_release() -> None:  # the owner is this task
            assert await multi.acquire()
            acquired.set()
            await go.wait()
            await multi.release()

        task = asyncio.create_task(hold_then_release())
        await acquired.wait()
        own_server.pause()
        try:
            go.set()
            await asyncio.sleep(0.3)  # the releases are sent; their replies wait
            task.cancel()
            await asyncio.sleep(0.1)
        finally:
            own_server.resume()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert all(holders("default", name) == [] for name in NAMES)
        assert not multi.lost
