"""The handoff's wake-up calls on Redis.

A release that hands the lock to a lone waiter pushes its call to the lock's wake-up list in
the same script, so the releaser's one round trip is all the handoff costs it; a waiter given
another owner's call there passes it on to that owner's own list. Handed to one waiter among
several, the call goes to that owner's own list, pushed by the releasing client, whatever
order the waiters blocked in. (A call lost on the way: test_fault_paths.py.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_py

from django_redis_lock.backends.base import AcquireRequest, Grant, holder_metadata
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing import RedisServer
from tests.support.helpers import blocked_clients, eventually

META = holder_metadata(host="h", pid=1, thread="t")
HOLD = AcquireRequest(ttl=30, metadata=META)
WAITING = AcquireRequest(ttl=30, metadata=META, wait=10)


@pytest.fixture
def backend(own_server: RedisServer) -> Iterator[RedisBackend]:
    backend = RedisBackend(url=own_server.url)
    yield backend
    backend.close()


@pytest.fixture
def stats(own_server: RedisServer) -> Iterator[redis_py.Redis]:
    client = redis_py.Redis.from_url(own_server.url)
    yield client
    client.close()


def reads(client: redis_py.Redis) -> int:
    """Return how many reads of client requests the server has made (``INFO stats``)."""
    return int(client.info("stats")["total_reads_processed"])


def test_release__wakes_a_lone_waiter_it_hands_the_lock_to_in_its_one_round_trip(
    backend: RedisBackend, stats: redis_py.Redis
) -> None:
    name = "wake:one-trip"
    assert backend.acquire("wake:warm-up", "holder", HOLD).acquired
    assert backend.release("wake:warm-up", "holder") == 0  # the server has the script now
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    waiter = stats.connection_pool.get_connection()
    try:
        waiter.send_command("BLPOP", *backend.wait_keys(name, "waiter"), 10)
        eventually(lambda: blocked_clients(stats) == 1)
        before = reads(stats)
        assert backend.release(name, "holder") == 0
        # The release, and this INFO: no wake-up sent by the releasing client after its reply.
        assert reads(stats) - before == 2
        _, call = waiter.read_response()
    finally:
        waiter.disconnect()
    assert call.endswith(b" waiter")
    [info] = backend.lock_info(name)
    assert info.owner == "waiter"
    assert call.startswith(b"%d " % info.fencing_token)


def test_a_call_given_to_another_waiter_is_passed_on_to_its_owner(
    backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # "newcomer" blocked on the wake-up list before "first", the lone waiter in the queue, so
    # the server gives it the call, which it passes on.
    name = "wake:passed-on"
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, "first", WAITING).acquired
    with ThreadPoolExecutor(2) as pool:
        newcomer = pool.submit(backend.wait, name, "newcomer", 1.5)
        eventually(lambda: blocked_clients(stats) == 1)
        first = pool.submit(backend.wait, name, "first", 8)
        eventually(lambda: blocked_clients(stats) == 2)
        released = time.monotonic()
        assert backend.release(name, "holder") == 0
        grant = first.result(timeout=10)
        woken = time.monotonic() - released
        [info] = backend.lock_info(name)  # within the grant's second
        assert newcomer.result(timeout=10) is None, "not handed to the newcomer"
    assert isinstance(grant, Grant)
    assert woken < 1, "woken by the call passed on, not at the end of its wait"
    assert (info.owner, info.fencing_token) == ("first", grant.fencing_token)
    assert stats.llen(backend.key(name, "s")) == 0
    assert stats.llen(backend.key(name, "s:first")) == 0


def test_among_several_waiters__the_call_goes_to_its_owners_own_list(
    backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # "second" blocked first; "first" is first in the queue, and is handed the lock.
    name = "wake:several"
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, "first", WAITING).acquired
    assert not backend.acquire(name, "second", WAITING).acquired
    with ThreadPoolExecutor(2) as pool:
        second = pool.submit(backend.wait, name, "second", 1.5)
        eventually(lambda: blocked_clients(stats) == 1)
        first = pool.submit(backend.wait, name, "first", 8)
        eventually(lambda: blocked_clients(stats) == 2)
        released = time.monotonic()
        assert backend.release(name, "holder") == 0
        grant = first.result(timeout=10)
        woken = time.monotonic() - released
        [info] = backend.lock_info(name)
        assert second.result(timeout=10) is None, "the second waiter was given nothing"
    assert isinstance(grant, Grant)
    assert woken < 1
    assert (info.owner, info.fencing_token) == ("first", grant.fencing_token)
    assert stats.exists(backend.key(name, "s")) == 0, "nothing pushed to the wake-up list"


def test_withdraw__drops_the_wake_up_call_of_a_lock_handed_to_the_owner(
    backend: RedisBackend, stats: redis_py.Redis
) -> None:
    name = "wake:withdrawn"
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    assert backend.release(name, "holder") == 0
    assert stats.lrange(backend.key(name, "s"), 0, -1) != []
    assert backend.withdraw(name, "waiter") == 0
    assert stats.lrange(backend.key(name, "s"), 0, -1) == [], "no call for a withdrawn owner"
    assert not backend.locked(name)


def test_the_wake_up_list_lives_as_long_as_a_grant(
    backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # A call nobody takes (its owner died) is gone with the grant it announced.
    name = "wake:expires"
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, "ghost", WAITING).acquired
    assert backend.release(name, "holder") == 0
    assert 0 < stats.pttl(backend.key(name, "s")) <= 1000
    eventually(lambda: stats.exists(backend.key(name, "s")) == 0, timeout=3)
    assert not backend.locked(name)
