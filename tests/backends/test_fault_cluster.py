"""Renewal on a real 3-primary Redis Cluster while a primary is frozen, or a slot moves."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from redis.crc import key_slot

from django_redis_lock import BackendUnavailableError, lock, locks
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.backends.cluster import RedisClusterBackend
from django_redis_lock.testing.topologies import RedisClusterServers

pytestmark = pytest.mark.slow

CLUSTER_BACKEND = "django_redis_lock.backends.cluster.RedisClusterBackend"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    """A cluster of this module alone, slow to fail a primary (no CLUSTERDOWN meanwhile)."""
    with RedisClusterServers(primaries=3, node_timeout=60) as servers:
        yield servers


@pytest.fixture
def backend(cluster: RedisClusterServers, prefix: str) -> Iterator[RedisClusterBackend]:
    nodes = [f"{host}:{port}" for host, port in cluster.startup_nodes]
    options = {"startup_nodes": nodes, "key_prefix": prefix, "socket_timeout": 3}
    with override_settings(LOCKS={"default": {"BACKEND": CLUSTER_BACKEND, "OPTIONS": options}}):
        found = locks["default"]
        assert isinstance(found, RedisClusterBackend)
        yield found


def port_of(backend: RedisClusterBackend, name: str) -> int:
    return int(backend.client.get_node_from_key(backend.key(name)).port)


def names_by_port(backend: RedisClusterBackend, per_port: int) -> dict[int, list[str]]:
    ports = {int(node.port) for node in backend.client.get_primaries()}
    found: dict[int, list[str]] = {port: [] for port in ports}
    number = 0
    while any(len(names) < per_port for names in found.values()):
        name = f"fault:{number}"
        if len(found[port_of(backend, name)]) < per_port:
            found[port_of(backend, name)].append(name)
        number += 1
    return found


def test_renewal__a_frozen_primary_never_delays_the_others(
    cluster: RedisClusterServers, backend: RedisClusterBackend
) -> None:
    by_port = names_by_port(backend, 2)
    frozen_port = sorted(by_port)[0]
    [frozen] = [node for node in cluster.nodes if node.port == frozen_port]
    with contextlib.ExitStack() as stack:
        handles = {
            name: stack.enter_context(lock(name, ttl=1.5, raise_on_lost=False))
            for names in by_port.values()
            for name in names
        }
        frozen.pause()
        try:
            time.sleep(4.5)  # three leases; a frozen primary answers after 3s, if ever
            for port, names in by_port.items():
                if port == frozen_port:
                    continue
                for name in names:
                    assert not handles[name].lost, f"{name} on a healthy primary was lost"
                    assert handles[name].owned()
        finally:
            frozen.resume()


def migrate_slot(
    cluster: RedisClusterServers, backend: RedisClusterBackend, key: str, *, finish: bool = True
) -> int:
    """Move the slot of ``key``, with its keys, to another primary; return the new port.

    Without ``finish`` the slot stays half-moved: its keys are on the new primary, and the old
    one answers ASK for them.
    """
    slot = key_slot(key.encode())
    source = backend.client.get_node_from_key(key)
    target = next(n for n in backend.client.get_primaries() if n.port != source.port)
    source_conn, target_conn = source.redis_connection, target.redis_connection
    source_id = source_conn.execute_command("CLUSTER MYID").decode()
    target_id = target_conn.execute_command("CLUSTER MYID").decode()
    target_conn.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source_conn.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    keys = source_conn.execute_command("CLUSTER GETKEYSINSLOT", slot, 100)
    if keys:
        source_conn.execute_command(
            "MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys
        )
    if finish:
        assign_slot(cluster, backend, key, int(target.port))
    return int(target.port)


def assign_slot(
    cluster: RedisClusterServers, backend: RedisClusterBackend, key: str, port: int
) -> None:
    """Tell every node that the slot of ``key`` is served by the primary at ``port``."""
    owner: Any = backend.client.get_node(host="127.0.0.1", port=port).redis_connection
    owner_id = owner.execute_command("CLUSTER MYID").decode()
    for node in cluster.nodes:
        conn: Any = backend.client.get_node(host="127.0.0.1", port=node.port).redis_connection
        conn.execute_command("CLUSTER SETSLOT", key_slot(key.encode()), "NODE", owner_id)


@pytest.mark.parametrize("finish", [True, False], ids=["moved", "ask"])
def test_renewal__follows_a_slot_that_moved_to_another_primary(
    cluster: RedisClusterServers, backend: RedisClusterBackend, finish: bool
) -> None:
    name = f"fault:resharded-{finish}"
    with lock(name, ttl=1.0) as held:
        before = port_of(backend, name)
        time.sleep(0.2)
        after = migrate_slot(cluster, backend, backend.key(name), finish=finish)
        assert after != before
        time.sleep(3.0)  # three leases: only a renewal that follows the slot keeps it
        assert not held.lost, "renewal reported a moved lock as lost"
        if not finish:
            # A script is given every key of its lock: Redis refuses it while the slot is
            # half moved (TRYAGAIN), and serves it once the move is finished.
            with pytest.raises(BackendUnavailableError, match="TTL exhausted"):
                backend.acquire(name, "another owner", AcquireRequest(ttl=1))
            assign_slot(cluster, backend, backend.key(name), after)
        assert held.owned()
        [holder] = backend.lock_info(name)
        assert holder.fencing_token == held.fencing_token
    assert not held.locked()
