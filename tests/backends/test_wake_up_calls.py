"""The handoff's wake-up calls on Redis.

A release that hands the lock to a lone waiter pushes its call to the lock's wake-up list in
the same script, so the releaser's one round trip is all the handoff costs it; a waiter given
another owner's call there passes it on to that owner's own list. Handed to one waiter among
several, the call goes to that owner's own list, pushed by the releasing client, whatever
order the waiters blocked in. (A call lost on the way: test_fault_paths.py.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_py

from django_redis_lock.backends.base import AcquireRequest, Grant, holder_metadata
from django_redis_lock.backends.redis import RedisBackend
from tests.support.helpers import blocked_clients, eventually

META = holder_metadata(host="h", pid=1, thread="t")
HOLD = AcquireRequest(ttl=30, metadata=META)
WAITING = AcquireRequest(ttl=30, metadata=META, wait=10)


def hand_to_a_lone_waiter(backend: RedisBackend, name: str, waiter: str) -> None:
    """Have ``waiter`` queue alone for ``name`` held by "holder", which then releases it."""
    assert backend.acquire(name, "holder", HOLD).acquired
    assert not backend.acquire(name, waiter, WAITING).acquired
    assert backend.release(name, "holder") == 0


def reads(client: redis_py.Redis) -> int:
    """Return how many reads of client requests the server has made (``INFO stats``)."""
    return int(client.info("stats")["total_reads_processed"])


def test_release__wakes_a_lone_waiter_it_hands_the_lock_to_in_its_one_round_trip(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    name = "wake:one-trip"
    assert own_backend.acquire("wake:warm-up", "holder", HOLD).acquired
    assert own_backend.release("wake:warm-up", "holder") == 0  # the server has the script now
    assert own_backend.acquire(name, "holder", HOLD).acquired
    assert not own_backend.acquire(name, "waiter", WAITING).acquired
    waiter = stats.connection_pool.get_connection()
    try:
        waiter.send_command("BLPOP", *own_backend.wait_keys(name, "waiter"), 10)
        eventually(lambda: blocked_clients(stats) == 1)
        before = reads(stats)
        assert own_backend.release(name, "holder") == 0
        # The release, and this INFO: no wake-up sent by the releasing client after its reply.
        assert reads(stats) - before == 2
        _, call = waiter.read_response()
    finally:
        waiter.disconnect()
    assert call.endswith(b" waiter")
    [info] = own_backend.lock_info(name)
    assert info.owner == "waiter"
    assert call.startswith(b"%d " % info.fencing_token)


@pytest.mark.parametrize("other", ["newcomer", "second"])
def test_a_waiter_blocked_before_the_owner_handed_the_lock__is_given_nothing(
    own_backend: RedisBackend, stats: redis_py.Redis, other: str
) -> None:
    # "first" is first in the queue, and is handed the lock; ``other`` blocked before it did.
    # A "newcomer" is not queued: "first", a lone waiter, is woken through the wake-up list,
    # whose call the server gives the newcomer, which passes it on. A "second" waiter is
    # queued: the releasing client pushes the call to the own list of "first".
    name = f"wake:{other}"
    assert own_backend.acquire(name, "holder", HOLD).acquired
    assert not own_backend.acquire(name, "first", WAITING).acquired
    if other == "second":
        assert not own_backend.acquire(name, "second", WAITING).acquired
    with ThreadPoolExecutor(2) as pool:
        given = pool.submit(own_backend.wait, name, other, 1.5)
        eventually(lambda: blocked_clients(stats) == 1)
        first = pool.submit(own_backend.wait, name, "first", 8)
        eventually(lambda: blocked_clients(stats) == 2)
        released = time.monotonic()
        assert own_backend.release(name, "holder") == 0
        grant = first.result(timeout=10)
        woken = time.monotonic() - released
        [info] = own_backend.lock_info(name)  # within the grant's second
        assert given.result(timeout=10) is None, f"nothing handed to {other}"
    assert isinstance(grant, Grant)
    assert woken < 1, "woken by its call, not at the end of its wait"
    assert (info.owner, info.fencing_token) == ("first", grant.fencing_token)
    assert stats.exists(own_backend.key(name, "s"), own_backend.key(name, "s:first")) == 0


def test_withdraw__drops_the_wake_up_call_of_a_lock_handed_to_the_owner(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    name = "wake:withdrawn"
    hand_to_a_lone_waiter(own_backend, name, "waiter")
    assert stats.lrange(own_backend.key(name, "s"), 0, -1) != []
    assert own_backend.withdraw(name, "waiter") == 0
    assert stats.lrange(own_backend.key(name, "s"), 0, -1) == [], "no call for a withdrawn owner"
    assert not own_backend.locked(name)


def test_the_wake_up_list_lives_as_long_as_a_grant(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # A call nobody takes (its owner died) is gone with the grant it announced.
    name = "wake:expires"
    hand_to_a_lone_waiter(own_backend, name, "ghost")
    assert 0 < stats.pttl(own_backend.key(name, "s")) <= 1000
    eventually(lambda: stats.exists(own_backend.key(name, "s")) == 0, timeout=3)
    assert not own_backend.locked(name)
