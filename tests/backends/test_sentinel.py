"""RedisBackend behind Redis Sentinel: ``sentinels`` + ``service_name`` OPTIONS.

The backend asks the sentinels where the primary is (redis-py's ``Sentinel.master_for``), so
it follows a failover without any settings change: once the sentinels have promoted a
replica, the same backend object acquires and releases on it.

What a failover can lose: Redis replicates asynchronously. A lock acquired on the primary
just before it dies may not have reached the replica that is promoted; the new primary then
knows nothing of it, and a second owner can acquire the "same" lock while the first still
believes it holds it. The tests below make the lock they keep across the failover durable
first (a ``WAIT`` for the replica, as ``wait_replicas`` does), so they test what Sentinel
promises, not a race.

The non-destructive tests share one module-scoped topology; each failover test starts a
topology of its own, so killing a primary never affects another test.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis as redis_py
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, alock, lock, lock_all, locks, rwlock
from django_redis_lock._core.owner import current_owner, current_task_owner
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing.topologies import SentinelRedis
from tests.support.helpers import in_thread

pytestmark = pytest.mark.slow

#: Every backend call ends within this (socket_timeout of the alias), even mid-failover.
SOCKET_TIMEOUT = 1.0
#: How long after the failover the backend may take to find the new primary.
RECOVERY = 10.0
DB = 2


def backend_of(alias: str) -> RedisBackend:
    """Return the RedisBackend of ``alias`` (typed as such, for its ``key()``)."""
    backend = locks[alias]
    assert isinstance(backend, RedisBackend)
    return backend


@pytest.fixture(scope="module")
def topology() -> Iterator[SentinelRedis]:
    """A primary, one replica and three sentinels, shared by the tests that kill nothing."""
    with SentinelRedis(replicas=1, sentinels=3) as sentinel:
        yield sentinel


@pytest.fixture
def own_topology() -> Iterator[SentinelRedis]:
    """A topology of this test alone, for a test that kills its primary."""
    with SentinelRedis(replicas=1, sentinels=3) as sentinel:
        yield sentinel


def sentinel_alias(topology: SentinelRedis, prefix: str, *, pairs: bool = False) -> dict[str, Any]:
    sentinels: list[Any] = (
        [[host, port] for host, port in topology.sentinels]
        if pairs
        else [f"{host}:{port}" for host, port in topology.sentinels]
    )
    return {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {
            # With sentinels the URL only says which database (and credentials, TLS): the
            # host in it is never connected to.
            "url": f"redis://unused.invalid:1/{DB}",
            "sentinels": sentinels,
            "service_name": topology.service_name,
            "key_prefix": prefix,
            "socket_timeout": SOCKET_TIMEOUT,
            "socket_connect_timeout": SOCKET_TIMEOUT,
        },
    }


def sentinel_settings(topology: SentinelRedis, prefix: str) -> override_settings:
    return override_settings(
        LOCKS={
            **settings.LOCKS,
            "sentinel": sentinel_alias(topology, prefix),
            "pairs": sentinel_alias(topology, prefix, pairs=True),
        }
    )


def primary_client(topology: SentinelRedis) -> redis_py.Redis:
    """A plain client of the server the sentinels name as the primary now, in database DB."""
    host, port = topology.current_primary()
    return redis_py.Redis(host=host, port=port, db=DB, socket_timeout=2)


def holders(topology: SentinelRedis, name: str) -> list[bytes]:
    conn = primary_client(topology)
    try:
        found: Any = conn.hkeys(backend_of("sentinel").key(name))
        return list(found)
    finally:
        conn.close()


def make_durable(topology: SentinelRedis) -> None:
    """Wait until the replica has every write the primary has taken so far.

    A write of our own, then WAIT on its connection: replication is in order, so the
    replica acknowledging it has everything before it too.
    """
    conn = primary_client(topology)
    try:
        conn.set("durable-marker", "1")
        assert conn.wait(1, 2000) == 1
    finally:
        conn.close()


def until_it_works(attempt: Callable[[], Any]) -> tuple[Any, list[BaseException]]:
    """Call ``attempt`` until it returns, for at most RECOVERY seconds; return its result.

    Every failure on the way must be BackendUnavailableError, each raised within the
    socket timeout (never a hang).
    """
    errors: list[BaseException] = []
    deadline = time.monotonic() + RECOVERY
    while True:
        started = time.monotonic()
        try:
            return attempt(), errors
        except BackendUnavailableError as exc:
            errors.append(exc)
        finally:
            assert time.monotonic() - started < 2 * SOCKET_TIMEOUT + 0.5
        assert time.monotonic() < deadline, f"not working again within {RECOVERY}s: {errors}"
        time.sleep(0.05)


async def until_it_works_async(
    attempt: Callable[[], Awaitable[Any]],
) -> tuple[Any, list[BaseException]]:
    """:func:`until_it_works` for coroutines."""
    errors: list[BaseException] = []
    deadline = time.monotonic() + RECOVERY
    while True:
        started = time.monotonic()
        try:
            return await attempt(), errors
        except BackendUnavailableError as exc:
            errors.append(exc)
        finally:
            assert time.monotonic() - started < 2 * SOCKET_TIMEOUT + 0.5
        assert time.monotonic() < deadline, f"not working again within {RECOVERY}s: {errors}"
        await asyncio.sleep(0.05)


# Through Sentinel ---------------------------------------------------------------------------


def test_lock__is_taken_on_the_primary_sentinel_names(
    topology: SentinelRedis, prefix: str
) -> None:
    with sentinel_settings(topology, prefix):
        backend = locks["sentinel"]
        assert "service='mymaster'" in repr(backend)
        with lock("sentinel:one", using="sentinel") as held:
            assert held.owned()
            assert holders(topology, "sentinel:one") == [current_owner().encode()]
        assert holders(topology, "sentinel:one") == []
        # [host, port] pairs name the sentinels as well as "host:port" strings.
        with lock("sentinel:one", using="pairs"):
            assert lock("sentinel:one", using="sentinel").locked()
        backend.ping()


def at_once(side: Any) -> bool:
    """Return whether another thread (another owner) takes ``side`` at once, and frees it."""

    def attempt() -> bool:
        taken = bool(side.acquire(blocking=False))
        if taken:
            side.release()
        return taken

    return in_thread(attempt)


def test_rwlock__readers_share_and_a_writer_is_alone_on_the_primary(
    topology: SentinelRedis, prefix: str
) -> None:
    with sentinel_settings(topology, prefix):
        rw = rwlock("sentinel:report", using="sentinel")
        with rw.read():
            assert holders(topology, "sentinel:report") == [current_owner().encode()]
            assert at_once(rw.read())
            assert not at_once(rw.write())
        with rw.write():
            assert not at_once(rw.read())
        assert holders(topology, "sentinel:report") == []


def test_lock_all__takes_every_name_in_one_script_on_the_primary(
    topology: SentinelRedis, prefix: str
) -> None:
    names = ["sentinel:acct:1", "sentinel:acct:2"]
    with sentinel_settings(topology, prefix):
        with lock_all(names, using="sentinel"):  # the primary loads the script
            pass
        conn = primary_client(topology)
        try:
            conn.config_resetstat()
            with lock_all(names, using="sentinel") as multi:
                assert conn.info("commandstats")["cmdstat_evalsha"]["calls"] == 1
                assert sorted(multi.fencing_tokens) == names
                assert all(holders(topology, name) for name in names)
        finally:
            conn.close()
        assert not any(holders(topology, name) for name in names)


def test_listing__iter_locks_and_the_locks_command(topology: SentinelRedis, prefix: str) -> None:
    with sentinel_settings(topology, prefix), lock("sentinel:listed", using="sentinel") as held:
        [info] = list(locks["sentinel"].iter_locks())
        assert (info.name, info.owner) == ("sentinel:listed", current_owner())
        assert info.fencing_token == held.fencing_token

        out = io.StringIO()
        call_command("locks", "list", "--json", "--using", "sentinel", stdout=out)
        listing = json.loads(out.getvalue())
        assert listing["errors"] == []
        assert [(one["alias"], one["name"]) for one in listing["locks"]] == [
            ("sentinel", "sentinel:listed")
        ]
        out = io.StringIO()
        call_command("locks", "list", "--using", "sentinel", stdout=out)
        assert "sentinel:listed" in out.getvalue()


async def test_alock__through_sentinel(topology: SentinelRedis, prefix: str) -> None:
    with sentinel_settings(topology, prefix):
        async with alock("sentinel:async", using="sentinel") as held:
            assert await held.owned()
            assert holders(topology, "sentinel:async") == [current_task_owner().encode()]
        assert holders(topology, "sentinel:async") == []
        await locks["sentinel"].aclose()


def test_valkey_client__finds_the_primary_through_valkeys_sentinel(
    topology: SentinelRedis, prefix: str
) -> None:
    alias = sentinel_alias(topology, prefix)
    alias["OPTIONS"]["client"] = "valkey"
    with override_settings(LOCKS={**settings.LOCKS, "sentinel": alias}):
        backend = backend_of("sentinel")
        assert type(backend.client).__module__.startswith("valkey.")
        with lock("sentinel:valkey", using="sentinel") as held:
            assert held.owned()
            assert holders(topology, "sentinel:valkey") == [current_owner().encode()]
        assert holders(topology, "sentinel:valkey") == []


async def test_valkey_client__alock_through_valkeys_sentinel(
    topology: SentinelRedis, prefix: str
) -> None:
    alias = sentinel_alias(topology, prefix)
    alias["OPTIONS"]["client"] = "valkey"
    with override_settings(LOCKS={**settings.LOCKS, "sentinel": alias}):
        async with alock("sentinel:valkey-async", using="sentinel") as held:
            assert await held.owned()
        assert holders(topology, "sentinel:valkey-async") == []
        await locks["sentinel"].aclose()


# Failover -------------------------------------------------------------------------------------


def test_failover__the_same_backend_follows_the_new_primary(
    own_topology: SentinelRedis, prefix: str
) -> None:
    """Kill the primary: calls fail fast (BackendUnavailableError), then work on the new one.

    The lock held across the failover was replicated before the kill (see make_durable), so
    it survives it. Without that, asynchronous replication could lose it: a lock acquired
    an instant before the primary dies may be missing on the promoted replica, and a second
    owner could then take it while the first still believes it holds it.
    """
    topology = own_topology
    with sentinel_settings(topology, prefix):
        backend = locks["sentinel"]
        kept = lock("failover:kept", using="sentinel", ttl=60, auto_renew=False)
        assert kept.acquire()
        token_before = kept.fencing_token
        assert token_before is not None
        make_durable(topology)

        old = topology.kill_primary()
        # While the sentinels have not promoted the replica yet, every call fails fast.
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError):
            lock("failover:during", using="sentinel").acquire(blocking=False)
        assert time.monotonic() - started < 2 * SOCKET_TIMEOUT
        new = topology.wait_for_failover()
        assert new != old

        def acquire_and_release() -> int | None:
            with lock("failover:after", using="sentinel", blocking=False) as held:
                return held.fencing_token

        token, errors = until_it_works(acquire_and_release)
        assert token is not None
        assert all(isinstance(e, BackendUnavailableError) for e in errors)
        assert locks["sentinel"] is backend  # no settings reset, the same backend object

        # The new primary is where the backend works now.
        assert topology.current_primary() == new
        with lock("failover:after", using="sentinel", blocking=False):
            assert holders(topology, "failover:after") == [current_owner().encode()]

        # The replicated lock survived: still held, by its owner, with its fencing token;
        # nobody else gets it, and a token issued for it later is higher.
        assert kept.owned()
        assert not lock("failover:kept", using="sentinel", owner="other").acquire(blocking=False)
        kept.release()
        with lock("failover:kept", using="sentinel", blocking=False) as again:
            assert again.fencing_token is not None
            assert again.fencing_token > token_before


async def test_failover__alock_works_after_it(own_topology: SentinelRedis, prefix: str) -> None:
    """The asyncio client follows the failover too (its connections made before the kill)."""
    topology = own_topology
    with sentinel_settings(topology, prefix):
        backend = locks["sentinel"]
        async with alock("failover:async", using="sentinel"):
            pass
        old = topology.kill_primary()
        new = topology.wait_for_failover()
        assert new != old

        async def acquire_and_release() -> int | None:
            async with alock("failover:async", using="sentinel", blocking=False) as held:
                assert holders(topology, "failover:async") == [current_task_owner().encode()]
                return held.fencing_token

        token, errors = await until_it_works_async(acquire_and_release)
        assert token is not None
        assert all(isinstance(e, BackendUnavailableError) for e in errors)
        assert locks["sentinel"] is backend
        await backend.aclose()
