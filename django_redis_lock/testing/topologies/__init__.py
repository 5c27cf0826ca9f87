"""Throw-away Redis topologies for tests of Sentinel, Cluster and Redlock deployments.

Built on :class:`~django_redis_lock.testing.RedisServer`: every process listens on loopback
TCP, keeps its few files (sentinel.conf, nodes.conf, its log) in a temporary directory of its
own, and is stopped, its files removed, when the topology stops, even when ``start()`` fails
half-way. Each class is a context manager::

    from django_redis_lock.testing.topologies import SentinelRedis

    with SentinelRedis(replicas=1, sentinels=3) as topology:
        topology.current_primary()         # ("127.0.0.1", <port>)
        topology.kill_primary()
        topology.wait_for_failover()       # the replica, promoted

:class:`ReplicatedRedis`
    A primary and its replicas.
:class:`SentinelRedis`
    A :class:`ReplicatedRedis` watched by Sentinel processes that fail it over.
:class:`RedisClusterServers`
    A Redis Cluster of primaries only, created with ``redis-cli --cluster create``.
:class:`IndependentMasters`
    Unrelated masters, as Redlock uses them; one can be stopped, restarted empty or frozen.

Every wait has a timeout and ends with a :class:`~django_redis_lock.testing.RedisServerError`
that tells what was awaited and what was last seen.
"""

from ._common import find_redis_cli
from .cluster import RedisClusterServers
from .masters import IndependentMasters
from .replication import ReplicatedRedis
from .sentinel import SentinelRedis

__all__ = [
    "IndependentMasters",
    "RedisClusterServers",
    "ReplicatedRedis",
    "SentinelRedis",
    "find_redis_cli",
]
