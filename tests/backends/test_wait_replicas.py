"""``wait_replicas``: every acquire (and every handover) is followed by Redis ``WAIT``.

A primary with one replica (:class:`~django_redis_lock.testing.topologies.ReplicatedRedis`). With
``wait_replicas=N`` an acquire returns only once N replicas have acknowledged the write, so
the lock's keys are already on the replica when ``acquire()`` returns; if fewer acknowledge
within ``wait_replicas_timeout``, the acquire is undone on the primary and
``BackendUnavailableError`` is raised. The replica is stopped and restarted by the tests that
need it down; the ``replicated`` fixture brings it back for the next test.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from django.conf import settings
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, alock, lock, locks
from django_redis_lock._core.owner import current_owner
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing.topologies import ReplicatedRedis
from tests.support.helpers import eventually

pytestmark = pytest.mark.slow

#: Long enough for a replica on a loaded two-CPU machine to acknowledge.
WAIT_TIMEOUT = 1.0


def undone(name: str, acks: int = 0, required: int = 1) -> str:
    """Return (as a regex) the message of an acquire undone for want of replicas."""
    return re.escape(
        f"Lock {name!r} was acquired, but only {acks} of the {required} replicas required "
        f"(wait_replicas) acknowledged it within {WAIT_TIMEOUT}s: the acquire was undone."
    )


def backend_of(alias: str) -> RedisBackend:
    """Return the RedisBackend of ``alias`` (typed as such, for its ``key()``)."""
    backend = locks[alias]
    assert isinstance(backend, RedisBackend)
    return backend


@pytest.fixture(scope="module")
def topology() -> Iterator[ReplicatedRedis]:
    """One primary and one replica for the whole module."""
    with ReplicatedRedis(replicas=1) as replicated:
        yield replicated


@pytest.fixture
def replicated(topology: ReplicatedRedis) -> Iterator[ReplicatedRedis]:
    """The module's topology, its replica running and in sync at the start of each test."""
    if topology.replicas[0].process is None:
        topology.start_replica(0)
    topology.wait_for_replication()
    yield topology
    if topology.replicas[0].process is None:
        topology.start_replica(0)


def client(url: str) -> redis_py.Redis:
    return redis_py.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)


@pytest.fixture
def primary(replicated: ReplicatedRedis) -> Iterator[redis_py.Redis]:
    conn = client(replicated.url)
    yield conn
    conn.close()


@pytest.fixture
def replica(replicated: ReplicatedRedis) -> Iterator[redis_py.Redis]:
    conn = client(replicated.replica_urls[0])
    yield conn
    conn.close()


def alias(url: str, prefix: str, **options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": url, "key_prefix": prefix, "socket_timeout": 2, **options},
    }


@pytest.fixture
def aliases(replicated: ReplicatedRedis, prefix: str) -> Iterator[None]:
    """Aliases on the primary, all with this test's key prefix (so they see one another's locks).

    ``durable``: wait_replicas=1; ``two``: wait_replicas=2 (more than there are);
    ``plain``: no WAIT at all.
    """
    url = replicated.url
    value = {
        **settings.LOCKS,
        "durable": alias(url, prefix, wait_replicas=1, wait_replicas_timeout=WAIT_TIMEOUT),
        "two": alias(url, prefix, wait_replicas=2, wait_replicas_timeout=WAIT_TIMEOUT),
        "plain": alias(url, prefix),
    }
    with override_settings(LOCKS=value):
        yield


def wait_calls(conn: redis_py.Redis) -> int:
    """Return how many WAIT commands the server has run."""
    stats: dict[str, Any] = conn.info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def nothing_left(conn: redis_py.Redis, name: str) -> None:
    """Assert that lock ``name`` is free and has no holder, by every way of looking."""
    assert not lock(name, using="plain").locked()
    assert not lock(name, using="durable").locked()
    assert [info.name for info in locks["plain"].iter_locks()] == []
    assert conn.hlen(backend_of("plain").key(name)) == 0


# Acquiring with enough replicas --------------------------------------------------------------


@pytest.mark.usefixtures("aliases")
def test_acquire__is_on_the_replica_when_it_returns(
    primary: redis_py.Redis, replica: redis_py.Redis
) -> None:
    backend = backend_of("durable")
    before = wait_calls(primary)
    for i in range(20):
        name = f"durable:{i}"
        with lock(name, using="durable", auto_renew=False) as held:
            # Read at once, no waiting: WAIT has already confirmed the replica has it.
            holders = replica.hgetall(backend.key(name))
            assert list(holders) == [current_owner().encode()]
            token = holders[current_owner().encode()].split(b" ")[2]
            assert int(token) == held.fencing_token
    # One WAIT per acquire, none for a release.
    assert wait_calls(primary) - before == 20


@pytest.mark.usefixtures("aliases")
def test_acquire__reentrant_holds_are_kept_and_waited_for(primary: redis_py.Redis) -> None:
    handle = lock("durable:again", using="durable", auto_renew=False)
    before = wait_calls(primary)
    with handle, handle:
        assert handle.locked()
    assert not handle.locked()
    assert wait_calls(primary) - before == 2


@pytest.mark.usefixtures("aliases")
def test_wait_replicas_0__sends_no_wait(primary: redis_py.Redis) -> None:
    before = wait_calls(primary)
    for i in range(5):
        with lock(f"plain:{i}", using="plain"):
            pass
    assert wait_calls(primary) == before


# Too few replicas: the acquire is undone ------------------------------------------------------


@pytest.mark.usefixtures("aliases")
def test_replica_down__acquire_raises_and_leaves_nothing(
    replicated: ReplicatedRedis, primary: redis_py.Redis
) -> None:
    replicated.stop_replica(0)
    handle = lock("durable:down", using="durable")
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=undone("durable:down")) as caught:
        handle.acquire()
    assert time.monotonic() - started < 2 * WAIT_TIMEOUT
    assert caught.value.lock_name == "durable:down"
    assert not handle.owned()
    nothing_left(primary, "durable:down")
    # Not held, not queued: another owner takes it at once, without WAIT.
    with lock("durable:down", using="plain", blocking=False) as other:
        assert other.owned()


@pytest.mark.usefixtures("aliases")
def test_replica_down__non_blocking_and_reentrant_acquires_fail_too(
    replicated: ReplicatedRedis, primary: redis_py.Redis
) -> None:
    handle = lock("durable:reentrant", using="durable", auto_renew=False)
    assert handle.acquire()
    replicated.stop_replica(0)
    # A reentrant acquire is undone to the one hold the owner had.
    with pytest.raises(BackendUnavailableError, match=undone("durable:reentrant")):
        handle.acquire()
    [info] = locks["plain"].lock_info("durable:reentrant")
    assert info.holds == 1
    handle.release()
    nothing_left(primary, "durable:reentrant")
    with pytest.raises(BackendUnavailableError, match=undone("durable:reentrant")):
        handle.acquire(blocking=False)
    nothing_left(primary, "durable:reentrant")


@pytest.mark.usefixtures("aliases")
def test_wait_replicas_more_than_there_are__fails(primary: redis_py.Redis) -> None:
    handle = lock("durable:two", using="two")
    with pytest.raises(BackendUnavailableError, match=undone("durable:two", 1, 2)):
        handle.acquire()
    nothing_left(primary, "durable:two")


@pytest.mark.usefixtures("aliases")
def test_replica_down__a_waiter_handed_the_lock_fails_and_passes_it_on(
    replicated: ReplicatedRedis, primary: redis_py.Redis
) -> None:
    """A release hands the lock to the first waiter; its WAIT fails: it lets the next one in."""
    name = "durable:handover"
    holder = lock(name, using="plain", auto_renew=False)
    assert holder.acquire()
    outcome: dict[str, Any] = {}
    next_got_it = threading.Event()

    def durable_waiter() -> None:
        try:
            outcome["durable"] = lock(name, using="durable", fair=True).acquire(timeout=10)
        except BaseException as exc:
            outcome["durable"] = exc

    def next_waiter() -> None:
        handle = lock(name, using="plain", fair=True, auto_renew=False)
        outcome["next"] = handle.acquire(timeout=10)
        next_got_it.set()
        handle.release()

    first = threading.Thread(target=durable_waiter)
    first.start()
    eventually(lambda: primary.zcard(backend_of("plain").key(name, "q")) == 1, timeout=5)
    second = threading.Thread(target=next_waiter)
    second.start()
    eventually(lambda: primary.zcard(backend_of("plain").key(name, "q")) == 2, timeout=5)
    replicated.stop_replica(0)
    started = time.monotonic()
    holder.release()
    first.join(5)
    second.join(5)
    assert not first.is_alive()
    assert not second.is_alive()
    assert isinstance(outcome["durable"], BackendUnavailableError), outcome
    assert re.fullmatch(undone(name), str(outcome["durable"]))
    assert outcome["next"] is True
    assert next_got_it.wait(0)
    assert time.monotonic() - started < 2 * WAIT_TIMEOUT + 1
    nothing_left(primary, name)


@pytest.mark.usefixtures("aliases")
def test_replica_down__a_lone_waiter_handed_the_lock_leaves_it_free(
    replicated: ReplicatedRedis, primary: redis_py.Redis
) -> None:
    name = "durable:lone"
    holder = lock(name, using="plain", auto_renew=False)
    assert holder.acquire()
    outcome: list[Any] = []

    def durable_waiter() -> None:
        try:
            outcome.append(lock(name, using="durable").acquire(timeout=10))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=durable_waiter)
    thread.start()
    eventually(lambda: primary.zcard(backend_of("plain").key(name, "q")) == 1, timeout=5)
    replicated.stop_replica(0)
    holder.release()
    thread.join(5)
    assert not thread.is_alive()
    [error] = outcome
    assert isinstance(error, BackendUnavailableError)
    assert re.fullmatch(undone(name), str(error))
    nothing_left(primary, name)


# asyncio ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("aliases")
async def test_alock__waits_for_the_replica(
    replicated: ReplicatedRedis, primary: redis_py.Redis, replica: redis_py.Redis
) -> None:
    before = wait_calls(primary)
    async with alock("durable:async", using="durable", auto_renew=False) as held:
        holders = replica.hkeys(backend_of("durable").key("durable:async"))
        assert len(holders) == 1
        assert held.fencing_token is not None
    assert wait_calls(primary) - before == 1

    replicated.stop_replica(0)
    handle = alock("durable:async", using="durable")
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=undone("durable:async")):
        await handle.acquire()
    assert time.monotonic() - started < 2 * WAIT_TIMEOUT
    assert not await handle.owned()
    nothing_left(primary, "durable:async")


# Back to normal ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("aliases")
def test_replica_back__acquiring_works_again(
    replicated: ReplicatedRedis, replica: redis_py.Redis
) -> None:
    replicated.stop_replica(0)
    with pytest.raises(BackendUnavailableError):
        lock("durable:back", using="durable").acquire(blocking=False)
    replicated.start_replica(0)
    with lock("durable:back", using="durable", blocking=False) as held:
        assert held.owned()
        assert replica.hlen(backend_of("durable").key("durable:back")) == 1
