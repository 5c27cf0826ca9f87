"""RedisClusterBackend on a real 3-primary Redis Cluster: slots, handoff, listing, renewal, faults.

One cluster serves the whole module; the tests that stop or freeze a primary get a cluster of
their own (``degraded``). Each test has its own key prefix (see conftest.py), so the tests never
see each other's locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import socket
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis as redis_py
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from redis.crc import key_slot

from django_redis_lock import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    alock,
    lock,
    lock_all,
    locks,
)
from django_redis_lock.backends.base import AcquireRequest, glob_escape, holder_metadata
from django_redis_lock.backends.cluster import RedisClusterBackend
from django_redis_lock.conf import problems
from django_redis_lock.testing.topologies import RedisClusterServers
from tests.support.helpers import eventually, in_thread

pytestmark = pytest.mark.slow

CLUSTER_BACKEND = "django_redis_lock.backends.cluster.RedisClusterBackend"
META = holder_metadata(host="h", pid=1, thread="t")
#: Every kind of key a lock can have (see lua/_prelude.lua), but the wake-up lists.
KINDS = ("h", "q", "w")
#: A 'default' alias, so that the checks have nothing to say but about the cluster's.
LOCMEM_DEFAULT = {"default": {"BACKEND": "django_redis_lock.backends.locmem.LocMemBackend"}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    """The module's 3-primary cluster; each test keeps to its own key prefix."""
    with RedisClusterServers(primaries=3) as servers:
        yield servers


def node_strings(servers: RedisClusterServers) -> list[str]:
    return [f"{host}:{port}" for host, port in servers.startup_nodes]


def cluster_locks(servers: RedisClusterServers, prefix: str, **options: Any) -> dict[str, Any]:
    """Return a LOCKS value with one alias, 'cluster', on ``servers``."""
    return {
        "cluster": {
            "BACKEND": CLUSTER_BACKEND,
            "OPTIONS": {"startup_nodes": node_strings(servers), "key_prefix": prefix, **options},
        }
    }


@pytest.fixture
def backend(cluster: RedisClusterServers, prefix: str) -> Iterator[RedisClusterBackend]:
    """The 'cluster' alias (the only one of LOCKS in this test) and its backend."""
    with override_settings(LOCKS=cluster_locks(cluster, prefix, socket_timeout=2)):
        found = locks["cluster"]
        assert isinstance(found, RedisClusterBackend)
        yield found


@pytest.fixture
def node_clients(cluster: RedisClusterServers) -> Iterator[dict[int, redis_py.Redis]]:
    """A plain client of each node, by port."""
    clients = {node.port: redis_py.Redis(port=node.port) for node in cluster.nodes}
    yield clients
    for client in clients.values():
        client.close()


def port_of(backend: RedisClusterBackend, name: str) -> int:
    """Return the port of the primary that serves lock ``name`` (as redis-py routes it)."""
    return int(backend.client.get_node_from_key(backend.key(name)).port)


def slot_owners(backend: RedisClusterBackend) -> dict[tuple[int, int], int]:
    """Return CLUSTER SLOTS as {(first slot, last slot): port of its primary}."""
    slots = backend.client.execute_command("CLUSTER SLOTS")
    return {span: int(owner["primary"][1]) for span, owner in slots.items()}


def names_on(backend: RedisClusterBackend, stem: str, per_port: int) -> dict[int, list[str]]:
    """Return ``per_port`` lock names on each primary, by port."""
    ports = {int(node.port) for node in backend.client.get_primaries()}
    found: dict[int, list[str]] = {port: [] for port in ports}
    number = 0
    while any(len(names) < per_port for names in found.values()):
        name = f"{stem}:{number}"
        names = found[port_of(backend, name)]
        if len(names) < per_port:
            names.append(name)
        number += 1
    return found


def queued(backend: RedisClusterBackend, name: str) -> int:
    return int(backend.client.zcard(backend.key(name, "q")))


def lock_keys(backend: RedisClusterBackend) -> list[bytes]:
    """Every key of this test's prefix, on every primary."""
    match = f"{glob_escape(backend.key_prefix)}:*"
    return list(backend.client.scan_iter(match=match))


def within(seconds: float, call: Callable[[], object]) -> BackendUnavailableError:
    """Run ``call``; it must raise BackendUnavailableError within ``seconds``: return it."""
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as caught:
        call()
    assert time.monotonic() - started < seconds
    return caught.value


# Slots ---------------------------------------------------------------------------------------


def test_slots__200_locks_spread_over_every_primary(
    cluster: RedisClusterServers,
    backend: RedisClusterBackend,
    node_clients: dict[int, redis_py.Redis],
) -> None:
    names = [f"spread:{number}" for number in range(200)]
    owners = slot_owners(backend)
    assert sorted(owners.values()) == sorted(node.port for node in cluster.nodes)
    per_port: Counter[int] = Counter()
    for name in names:
        slot = key_slot(backend.key(name).encode())
        [port] = [port for (first, last), port in owners.items() if first <= slot <= last]
        assert port == port_of(backend, name)
        per_port[port] += 1
    assert set(per_port) == set(node_clients)
    assert min(per_port.values()) >= 30, per_port
    tokens = set()
    for name in names:
        with lock(name, using="cluster") as handle:
            assert handle.owned()
            tokens.add(handle.fencing_token)
            # The lock is stored on the primary of its slot, and nowhere else.
            match = glob_escape(backend.key(name))
            holders = [port for port, c in node_clients.items() if list(c.scan_iter(match))]
            assert holders == [port_of(backend, name)]
        assert not handle.locked()
    assert len(tokens) == 200
    assert list(backend.iter_locks()) == []


ODD_NAMES = ["}starts", "}", "}}", "a{b}c", "{x}", "}{", "{", "ünï{cödé}🔒", "plain name"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_slots__every_key_of_a_lock_is_in_one_slot(
    backend: RedisClusterBackend, name: str
) -> None:
    """Holders, queue, waiters and the wake-up list: one slot, for any name."""
    holder = lock(name, using="cluster")
    assert holder.acquire()
    # A waiter that registers and never comes: its queue and waiter records stay, and the
    # release hands the lock to it through the wake-up list, which nobody pops.
    ghost = backend.acquire(
        name, "ghost", AcquireRequest(ttl=5, metadata=META, wait=3.0, fair=True)
    )
    assert not ghost.acquired
    waiting = lock_keys(backend)
    holder.release()
    handed = lock_keys(backend)
    expected = {backend.key(name, kind).encode() for kind in KINDS}
    assert set(waiting) == expected
    assert backend.key(name, "s").encode() in handed
    slot = key_slot(backend.key(name).encode())
    for key in {*waiting, *handed}:
        assert key_slot(key) == slot, key
        assert backend.client.cluster_keyslot(key) == slot, key
    [info] = backend.iter_locks(glob_escape(name))
    assert (info.name, info.owner) == (name, "ghost")
    [info] = backend.lock_info(name)
    assert info.name == name
    assert backend.force_release(name) == 1
    assert in_thread(lambda: lock(name, using="cluster").acquire(blocking=False)) is True
    backend.force_release(name)


# Contention and handoff ----------------------------------------------------------------------


@pytest.mark.serial
def test_valkey_client__spreads_locks_over_the_primaries_as_redis_py_does(
    cluster: RedisClusterServers, prefix: str
) -> None:
    with override_settings(LOCKS=cluster_locks(cluster, prefix, client="valkey")):
        backend = locks["cluster"]
        assert isinstance(backend, RedisClusterBackend)
        assert type(backend.client).__name__ == "ValkeyCluster"
        by_port = names_on(backend, "valkey", 5)
        assert len(by_port) == 3
        names = [name for found in by_port.values() for name in found]
        with lock_all(names, using="cluster"):
            assert {info.name for info in backend.iter_locks("valkey:*")} == set(names)
        assert [info.name for info in backend.iter_locks("valkey:*")] == []
        backend.ping()


async def test_valkey_client__alock_on_the_cluster(
    cluster: RedisClusterServers, prefix: str
) -> None:
    with override_settings(LOCKS=cluster_locks(cluster, prefix, client="valkey")):
        async with alock("valkey:async", using="cluster") as held:
            assert await held.owned()
            assert await alock("valkey:async", using="cluster").locked()
        await locks["cluster"].aclose()


def test_handoff__a_blocked_waiter_is_handed_the_lock_at_release(
    backend: RedisClusterBackend,
) -> None:
    name, rounds = "handoff", 5
    holder = lock(name, using="cluster")
    latencies: list[float] = []
    tokens: list[int] = []
    got: list[float] = []

    def waiter() -> None:
        handle = lock(name, using="cluster", timeout=10)
        assert handle.acquire()
        got.append(time.monotonic())
        tokens.append(handle.fencing_token or 0)
        handle.release()

    for _ in range(rounds):
        assert holder.acquire()
        tokens.append(holder.fencing_token or 0)
        thread = threading.Thread(target=waiter)
        thread.start()
        eventually(lambda: queued(backend, name) == 1)
        released = time.monotonic()
        holder.release()
        thread.join(10)
        latencies.append(got[-1] - released)
    assert max(latencies) < 1.0, latencies
    assert statistics.median(latencies) < 0.1, latencies
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens) == 2 * rounds


def test_fair__four_waiters_are_served_in_arrival_order(backend: RedisClusterBackend) -> None:
    order: list[int] = []
    holder = lock("fifo", using="cluster", fair=True)
    holder.acquire()

    def waiter(number: int) -> None:
        with lock("fifo", using="cluster", fair=True, timeout=20):
            order.append(number)

    threads = []
    for number in range(4):
        threads.append(threading.Thread(target=waiter, args=(number,)))
        threads[-1].start()
        eventually(lambda n=number: queued(backend, "fifo") == n + 1)
    holder.release()
    for thread in threads:
        thread.join(20)
    assert order == [0, 1, 2, 3]


def test_semaphore__two_holders_at_once_and_the_third_is_handed_a_slot(
    backend: RedisClusterBackend,
) -> None:
    first, second, third = (lock("sem", using="cluster", limit=2) for _ in range(3))
    assert first.acquire(blocking=False)
    release_second = threading.Event()

    def hold() -> None:
        assert second.acquire(blocking=False)
        release_second.wait(10)
        second.release()

    thread = threading.Thread(target=hold)
    thread.start()
    eventually(lambda: len(list(backend.iter_locks("sem"))) == 2)
    assert in_thread(lambda: third.acquire(blocking=False)) is False
    got = threading.Event()

    def wait_for_slot() -> None:
        assert third.acquire(timeout=10)
        got.set()
        third.release()

    waiter = threading.Thread(target=wait_for_slot)
    waiter.start()
    eventually(lambda: queued(backend, "sem") == 1)
    release_second.set()
    assert got.wait(5)
    thread.join(10)
    waiter.join(10)
    first.release()
    assert list(backend.iter_locks("sem")) == []


# lock_all --------------------------------------------------------------------------------------


def test_lock_all__names_sharing_a_hash_tag_are_taken_by_one_script(
    backend: RedisClusterBackend, node_clients: dict[int, redis_py.Redis]
) -> None:
    names = ["{acct}:1", "{acct}:2", "{acct}:3"]
    assert len({key_slot(backend.key(name).encode()) for name in names}) == 1
    primary = node_clients[port_of(backend, names[0])]
    with lock_all(names, using="cluster"):  # the primary loads the script
        pass
    primary.config_resetstat()
    with lock_all(names, using="cluster") as multi:
        stats = primary.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] == 1
        assert sorted(multi.fencing_tokens) == names
        assert (
            in_thread(lambda: lock("{acct}:2", using="cluster").acquire(blocking=False)) is False
        )
    assert not any(lock(name, using="cluster").locked() for name in names)


def test_lock_all__names_on_several_primaries_are_taken_one_by_one(
    backend: RedisClusterBackend,
) -> None:
    names = [found[0] for found in names_on(backend, "spread", 1).values()]
    assert len({port_of(backend, name) for name in names}) == 3
    assert backend.acquire_all(names, "me", AcquireRequest(ttl=30), [0, 0, 0]) is None
    with lock_all(names, using="cluster") as multi:
        assert sorted(multi.fencing_tokens) == sorted(names)
        assert all(lock(name, using="cluster").locked() for name in names)
    assert not any(lock(name, using="cluster").locked() for name in names)


# Listing -------------------------------------------------------------------------------------


@pytest.fixture
def held(backend: RedisClusterBackend) -> Iterator[dict[str, Any]]:
    """60 locks held by this thread, 20 on each primary: {name: handle}."""
    names = [name for found in names_on(backend, "listed", 20).values() for name in found]
    handles = {}
    for number, name in enumerate(names):
        handle = lock(name, using="cluster", metadata={"number": number})
        assert handle.acquire()
        handles[name] = handle
    yield handles
    for handle in handles.values():
        if handle.owned():
            handle.release()


def test_iter_locks__lists_every_holder_on_every_primary(
    backend: RedisClusterBackend, held: dict[str, Any]
) -> None:
    infos = list(backend.iter_locks())
    assert sorted(info.name for info in infos) == sorted(held)
    thread = threading.current_thread().name
    for info in infos:
        handle = held[info.name]
        assert info.fencing_token == handle.fencing_token
        assert info.holds == 1
        assert 0 < info.ttl <= 30
        assert (info.pid, info.thread) == (os.getpid(), thread)
        assert info.host
        assert info.metadata == {"number": list(held).index(info.name)}
    assert len({info.owner for info in infos}) == 1
    [one] = backend.iter_locks(glob_escape(next(iter(held))))
    assert one.name == next(iter(held))


def test_scan_page__pages_through_every_primary(
    backend: RedisClusterBackend, held: dict[str, Any]
) -> None:
    seen: Counter[str] = Counter()
    primaries_seen: set[int] = set()
    cursor, pages = None, 0
    while True:
        cursor, infos = backend.scan_page(cursor=cursor, count=7)
        seen.update(info.name for info in infos)
        pages += 1
        assert pages < 200, "scan_page never ended"
        if cursor is None:
            break
        assert isinstance(cursor, str)
        index, position = json.loads(cursor)  # a cursor survives a round trip through text
        primaries_seen.add(index)
        cursor = json.dumps([index, position])
    assert set(seen) == set(held)  # SCAN may repeat a key, never miss one
    assert primaries_seen >= {1, 2}
    assert pages >= 3
    # A pattern pages the same way.
    cursor, matched = None, set()
    while True:
        cursor, infos = backend.scan_page("listed:1*", cursor, count=3)
        matched.update(info.name for info in infos)
        if cursor is None:
            break
    assert matched == {name for name in held if name.startswith("listed:1")}


@pytest.mark.parametrize(
    "cursor", ["nope", "[3, 0]", "[-1, 0]", "[0]", '["0", 0]', "{}", "7", "[0, 1, 2]", "[0.5, 0]"]
)
def test_scan_page__a_bad_cursor_is_refused(backend: RedisClusterBackend, cursor: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match="cursor"):
        backend.scan_page(cursor=cursor)


def test_scan_page__a_negative_position_is_refused_as_a_bad_cursor(
    backend: RedisClusterBackend,
) -> None:
    with pytest.raises(InvalidLockArgumentError):
        backend.scan_page(cursor="[0, -1]")


def locks_command(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_locks_command__lists_and_force_releases_on_the_cluster(
    backend: RedisClusterBackend, held: dict[str, Any]
) -> None:
    listed = json.loads(locks_command("list", "--using", "cluster", "--json"))
    assert listed["errors"] == []
    assert listed["truncated"] is False
    assert sorted(row["name"] for row in listed["locks"]) == sorted(held)
    assert {row["alias"] for row in listed["locks"]} == {"cluster"}
    by_name = {row["name"]: row for row in listed["locks"]}
    victims = [names[0] for names in names_on(backend, "listed", 20).values()]
    for name in victims:  # one lock on each primary
        assert by_name[name]["fencing_token"] == held[name].fencing_token
        output = locks_command("release", name, "--using", "cluster", "--yes")
        assert f"Released lock {name!r} on alias 'cluster'" in output
        assert in_thread(lambda n=name: lock(n, using="cluster").acquire(blocking=False))
        backend.force_release(name)
        with pytest.raises(CommandError) as caught:
            locks_command("show", name, "--using", "cluster")
        assert caught.value.returncode == 1
    left = json.loads(locks_command("list", "--using", "cluster", "--json"))
    assert sorted(row["name"] for row in left["locks"]) == sorted(set(held) - set(victims))


# Renewal -------------------------------------------------------------------------------------


def test_renewal__keeps_30_locks_on_every_primary_past_several_leases(
    backend: RedisClusterBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    original = backend.renew

    def counting(leases: Any) -> Any:
        calls.append([name for name, _, _ in leases])
        return original(leases)

    monkeypatch.setattr(backend, "renew", counting)
    by_port = names_on(backend, "renewed", 10)
    names = [name for found in by_port.values() for name in found]
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(lock(name, ttl=0.5, using="cluster")) for name in names]
        time.sleep(1.8)  # more than three leases: only renewal keeps them
        assert all(handle.owned() and not handle.lost for handle in handles)
        for found in by_port.values():
            assert (
                in_thread(lambda n=found[0]: lock(n, using="cluster").acquire(blocking=False))
                is False
            )
        assert all(0 < (backend.ttl(name) or 0) <= 0.5 for name in names)
    assert not any(handle.locked() for handle in handles)
    assert 15 <= len(calls) <= 60, calls
    assert max(map(len, calls)) == 10, "a primary's leases are renewed together"
    for call in calls:
        assert any(set(call) <= set(found) for found in by_port.values()), (
            "each primary's leases are renewed in a call of their own"
        )


def command_calls(clients: dict[int, redis_py.Redis], command: str) -> int:
    """Return how many times ``command`` ran on all the nodes since their stats were reset."""
    total = 0
    for client in clients.values():
        stats = client.info("commandstats")
        total += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return total


def test_renewal__costs_one_round_trip_per_primary(
    backend: RedisClusterBackend, node_clients: dict[int, redis_py.Redis]
) -> None:
    names = [name for found in names_on(backend, "trips", 10).values() for name in found]
    for name in names:
        assert backend.acquire(name, "o", AcquireRequest(ttl=30, metadata=META)).acquired
    backend.renew([(name, "o", 30) for name in names])  # loads the script everywhere
    for client in node_clients.values():
        client.config_resetstat()
    assert backend.renew([(name, "o", 20) for name in names]) == [20.0] * 30
    assert command_calls(node_clients, "evalsha") == 30
    assert (
        command_calls(node_clients, "command|getkeys") + command_calls(node_clients, "command")
        == 0
    )


# Force-release, ping, asyncio ----------------------------------------------------------------


def test_force_release__frees_locks_on_every_primary(backend: RedisClusterBackend) -> None:
    names = [name for found in names_on(backend, "forced", 3).values() for name in found]
    for name in names:
        assert backend.acquire(name, "a", AcquireRequest(ttl=30, metadata=META, limit=2)).acquired
        assert backend.acquire(name, "b", AcquireRequest(ttl=30, metadata=META, limit=2)).acquired
    assert len(list(backend.iter_locks())) == 2 * len(names)
    for name in names:
        assert backend.force_release(name, owner="a") == 1
        assert [info.owner for info in backend.lock_info(name)] == ["b"]
        assert backend.force_release(name) == 1
        assert backend.force_release(name) == 0
    assert list(backend.iter_locks()) == []


def test_ping__asks_every_primary(
    backend: RedisClusterBackend, node_clients: dict[int, redis_py.Redis]
) -> None:
    for client in node_clients.values():
        client.config_resetstat()
    assert backend.ping() is None
    for client in node_clients.values():
        assert client.info("commandstats")["cmdstat_ping"]["calls"] >= 1


async def test_alock__acquire_release_and_handoff_on_the_cluster(
    backend: RedisClusterBackend,
) -> None:
    for found in names_on(backend, "async", 1).values():
        async with alock(found[0], using="cluster") as handle:
            assert await handle.owned()
            assert backend.lock_info(found[0])
        assert not await handle.locked()
    holder = alock("async:handoff", using="cluster")
    assert await holder.acquire()

    async def waiter() -> tuple[int | None, float]:
        handle = alock("async:handoff", using="cluster", timeout=10)
        assert await handle.acquire()
        got, token = time.monotonic(), handle.fencing_token
        await handle.release()
        return token, got

    task = asyncio.create_task(waiter())
    for _ in range(1000):
        if queued(backend, "async:handoff") == 1:
            break
        await asyncio.sleep(0.005)
    assert queued(backend, "async:handoff") == 1
    released = time.monotonic()
    first = holder.fencing_token
    await holder.release()
    token, got = await asyncio.wait_for(task, 5)
    assert got - released < 1.0
    assert token is not None
    assert first is not None
    assert token > first


async def test_aclose__closes_the_asyncio_cluster_client(backend: RedisClusterBackend) -> None:
    async with alock("async:closed", using="cluster") as handle:
        assert await handle.owned()
    await backend.aclose()
    async with alock("async:closed", using="cluster") as handle:  # a new client, built again
        assert await handle.owned()


# Configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"wait_replicas": 1}, {"sentinels": ["127.0.0.1:26379"], "service_name": "mymaster"}],
)
def test_checks__replica_and_sentinel_options_are_unknown_keys(
    cluster: RedisClusterServers, prefix: str, options: dict[str, Any]
) -> None:
    setting = {**LOCMEM_DEFAULT, **cluster_locks(cluster, prefix, **options)}
    found = problems(setting)
    assert [problem.id for problem in found] == ["django_redis_lock.E007"]
    for key in options:
        assert repr(key) in found[0].msg
    with override_settings(LOCKS=setting):
        messages = [m for m in run_checks() if m.id and m.id.startswith("django_redis_lock")]
    assert [m.id for m in messages] == ["django_redis_lock.E007"]


def test_checks__a_good_cluster_alias_has_no_problems(
    cluster: RedisClusterServers, prefix: str
) -> None:
    setting = {**LOCMEM_DEFAULT, **cluster_locks(cluster, prefix, socket_timeout=1)}
    assert problems(setting) == []
    with override_settings(LOCKS=setting):
        assert [m for m in run_checks() if m.id and m.id.startswith("django_redis_lock")] == []


# A primary stopped or frozen -----------------------------------------------------------------


@dataclass
class Degraded:
    """A cluster with one primary stopped: redis-py's default node of ``backend``."""

    servers: RedisClusterServers
    #: Its default node is the stopped primary.
    backend: RedisClusterBackend
    #: Its default node is a running primary.
    other: RedisClusterBackend
    stopped: int
    running: list[int]
    #: Lock names on each primary, by port; the first of each was held by "keeper" before.
    names: dict[int, list[str]]


def default_to_running(backend: RedisClusterBackend, port: int) -> None:
    """Make the primary at ``port`` redis-py's default node of ``backend``, again.

    redis-py reinitializes its view of the cluster after a connection error, and then makes
    the first primary it knows the default node again: the stopped one, here.
    """
    backend.client.set_default_node(backend.client.get_node("127.0.0.1", port))


@pytest.fixture(scope="module")
def degraded() -> Iterator[Degraded]:
    """A cluster of these tests alone; redis-py's default node of ``backend`` is stopped.

    The node timeout is long: the other primaries keep serving their slots (a Redis Cluster
    refuses every command, CLUSTERDOWN, once it marks a primary without replica as failed).
    """
    with RedisClusterServers(primaries=3, node_timeout=60) as servers:
        options: dict[str, Any] = {
            "startup_nodes": node_strings(servers),
            "key_prefix": "degraded",
            "socket_timeout": 0.5,
            "socket_connect_timeout": 0.5,
        }
        backend = RedisClusterBackend(**options)
        other = RedisClusterBackend(**options)
        stopped = int(backend.client.get_default_node().port)
        running = [node.port for node in servers.nodes if node.port != stopped]
        default_to_running(other, running[0])
        names = names_on(backend, "d", 3)
        for found in names.values():
            assert backend.acquire(
                found[0], "keeper", AcquireRequest(ttl=60, metadata=META)
            ).acquired
        for client in (backend, other):  # every script loaded, every connection open
            client.renew([(found[0], "keeper", 60) for found in names.values()])
            client.lock_info(names[stopped][0])
        [node] = [node for node in servers.nodes if node.port == stopped]
        node.stop()
        try:
            yield Degraded(servers, backend, other, stopped, running, names)
        finally:
            backend.close()
            other.close()


def test_degraded__a_stopped_primarys_slots_fail_fast_the_others_work(
    degraded: Degraded,
) -> None:
    name = degraded.names[degraded.stopped][1]
    for client in (degraded.backend, degraded.other):
        on_the_lock: list[Callable[[], object]] = [
            lambda c=client: c.acquire(name, "o", AcquireRequest(ttl=5, metadata=META)),
            lambda c=client: c.acquire(name, "o", AcquireRequest(ttl=5, metadata=META, wait=2)),
            lambda c=client: c.release(name, "o"),
            lambda c=client: c.extend(name, "o", 5),
            lambda c=client: c.ttl(name),
            lambda c=client: c.wait(name, "o", 2),
            lambda c=client: c.force_release(name),
        ]
        for call in on_the_lock:
            assert within(1.0, call).lock_name == name
        for call in (
            lambda c=client: c.lock_info(name),
            lambda c=client: c.ping(),
            lambda c=client: list(c.iter_locks()),
            lambda c=client: c.scan_page(),
        ):
            within(1.0, call)
    # The running primaries serve their own slots, to either client.
    for port in degraded.running:
        name = degraded.names[port][1]
        for client in (degraded.backend, degraded.other):
            result = client.acquire(name, "o", AcquireRequest(ttl=5, metadata=META))
            assert result.acquired
            assert client.ttl(name, "o") is not None
            assert client.release(name, "o") == 0
        # Renewal of leases on running primaries works while redis-py's default node runs.
        keeper = degraded.names[port][0]
        default_to_running(degraded.other, degraded.running[0])
        assert degraded.other.renew([(keeper, "keeper", 60)]) == [60.0]
        assert degraded.other.lock_info(keeper)[0].owner == "keeper"


def test_degraded__a_frozen_primary_fails_within_the_socket_timeout(
    degraded: Degraded,
) -> None:
    port = degraded.running[1]
    [node] = [node for node in degraded.servers.nodes if node.port == port]
    name = degraded.names[port][1]
    node.pause()
    try:
        for call in (
            lambda: degraded.other.acquire(name, "frozen", AcquireRequest(ttl=5, metadata=META)),
            lambda: degraded.other.wait(name, "frozen", 10),
            lambda: degraded.other.ttl(name),
        ):
            error = within(2.0, call)
            assert "Timeout" in str(error) or "timed out" in str(error).lower()
        # Its neighbours do not wait for it.
        other = degraded.names[degraded.running[0]][1]
        assert degraded.other.ttl(other) is None
    finally:
        node.resume()

    def serves_again() -> bool:
        with contextlib.suppress(BackendUnavailableError):
            return degraded.other.ttl(degraded.names[port][2]) is None
        return False

    eventually(serves_again, timeout=5)
    degraded.other.force_release(name)  # what the frozen node ran late, if anything


def test_degraded__lock_info_of_a_lock_on_a_running_primary(degraded: Degraded) -> None:
    keeper = degraded.names[degraded.running[0]][0]
    assert degraded.backend.lock_info(keeper)[0].owner == "keeper"


def test_degraded__renewing_leases_on_running_primaries_while_the_default_node_is_down(
    degraded: Degraded,
) -> None:
    leases = [(degraded.names[port][0], "keeper", 60) for port in degraded.running]
    assert degraded.backend.renew(leases) == [60.0, 60.0]


def test_degraded__one_unreachable_primary_does_not_stop_the_others_renewals(
    degraded: Degraded,
) -> None:
    leases = [(found[0], "keeper", 20) for found in degraded.names.values()]
    default_to_running(degraded.other, degraded.running[0])  # only the batch's failure counts
    with contextlib.suppress(BackendUnavailableError):
        degraded.other.renew(leases)
    for port in degraded.running:
        left = degraded.other.ttl(degraded.names[port][0], "keeper")
        assert left is not None
        assert left <= 20.0, "the lease was not renewed"


def test_degraded__errors_name_the_configured_nodes(degraded: Degraded) -> None:
    error = within(1.0, degraded.backend.ping)
    assert "7000" not in str(error)
    assert "7000" not in repr(degraded.backend)


@pytest.mark.django_db
def test_admin__lists_the_locks_of_every_primary(
    backend: RedisClusterBackend, held: dict[str, Any]
) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.integrations.test_admin import LIST_URL, follow_pages

    client = Client()
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    pages = follow_pages(client, LIST_URL, {"alias": "cluster"})
    seen = [name for page in pages for alias, name in page if alias == "cluster"]
    assert sorted(seen) == sorted(held)  # every lock of the three primaries, once


def test_unreachable_cluster__raises_backend_unavailable_naming_the_nodes() -> None:
    # Nothing listens there: redis-py raises its own RedisClusterException (no RedisError).
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    node = f"127.0.0.1:{port}"
    with pytest.raises(BackendUnavailableError, match=f"Redis Cluster {node} is unavailable"):
        RedisClusterBackend(startup_nodes=[node], socket_connect_timeout=0.2)
