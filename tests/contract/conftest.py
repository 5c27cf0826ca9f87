"""The contract runs on every backend: Redis, LocMem, Redis Cluster and Redlock, and once more
on Redis through the valkey client library.

Each test of tests/contract/ runs once per backend (``using`` and ``backend`` are
parametrized here). The Cluster and the Redlock masters start once per session, at the first
test that needs them. A backend that lacks a capability by its design skips the tests marked
``@pytest.mark.needs(capability)``, with the reason below: a skip that says why, never a
silent filter.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import override_settings

from django_redis_lock.backends import locmem
from django_redis_lock.testing.topologies import IndependentMasters, RedisClusterServers
from tests.support.clock import Clock, ManualClock, RealClock
from tests.support.helpers import locks_setting

#: What a backend may lack by design; ``needs`` accepts these names only.
CAPABILITIES = {
    "semaphores": "limit > 1: several owners at once",
    "waiter_queue": "waiters are queued, and handed the lock at release",
    "fair_order": "fair=True serves waiters in the order they came",
    "processes": "locks are shared by every process that uses the backend",
    "read_write": "rwlock(): readers share the lock, and a waiting writer stops new readers",
    "rate_limits": "rate_limit(): at most N hits in any window of a period",
}


@dataclass(frozen=True)
class ContractBackend:
    """A backend the contract runs on: its LOCKS alias, and what it lacks by design and why."""

    alias: str
    lacks: Mapping[str, str] = field(default_factory=dict)


BACKENDS = {
    "redis": ContractBackend("default"),
    "locmem": ContractBackend(
        "locmem",
        lacks={
            "processes": "LocMem keeps locks in the memory of one process: another process, "
            "killed or not, never holds them (docs/backends.rst)",
        },
    ),
    # The Redis backend on the same server, through valkey-py instead of redis-py.
    "valkey_client": ContractBackend("valkey_client"),
    "cluster": ContractBackend("cluster"),
    "redlock": ContractBackend(
        "redlock",
        lacks={
            "semaphores": "Redlock refuses limit > 1: slot counts kept on independent masters "
            "do not bound the holders across majorities (docs/backends.rst)",
            "waiter_queue": "Redlock waits by retrying: N independent masters keep no queue of "
            "waiters and hand nothing over at release (docs/backends.rst)",
            "fair_order": "Redlock waits by retrying, without a queue: fair=True cannot give "
            "first-come-first-served order (docs/backends.rst)",
            "read_write": "Redlock refuses read-write locks: without a queue, a waiting writer "
            "cannot stop new readers, and would starve (docs/locks.rst)",
            "rate_limits": "Redlock keeps no rate limits: hits counted on independent masters "
            "do not bound the hits across majorities (docs/ratelimits.rst)",
        },
    ),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a ``needs`` marker that names no known capability (a typo would never skip)."""
    for item in items:
        for marker in item.iter_markers("needs"):
            unknown = set(marker.args) - set(CAPABILITIES)
            if unknown:
                raise pytest.UsageError(f"{item.nodeid}: unknown capability {sorted(unknown)}")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A 3-primary Redis Cluster for the whole session; each test keeps to its own prefix."""
    with RedisClusterServers(primaries=3) as servers:
        yield servers


@pytest.fixture(scope="session")
def redlock_masters() -> Iterator[IndependentMasters]:
    """Three independent masters for the whole session, as Redlock uses them."""
    with IndependentMasters(3) as masters:
        yield masters


@pytest.fixture(params=list(BACKENDS))
def using(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> Iterator[str]:
    """Run a contract test once per backend: the alias to pass as ``using``."""
    contract_backend = BACKENDS[request.param]
    for marker in request.node.iter_markers("needs"):
        for capability in marker.args:
            if capability in contract_backend.lacks:
                pytest.skip(f"{request.param}: {contract_backend.lacks[capability]}")
    servers: dict[str, Any] = {}
    if request.param == "valkey_client":
        servers["valkey_client"] = True
    elif request.param == "cluster":
        cluster: RedisClusterServers = request.getfixturevalue("redis_cluster")
        servers["cluster_nodes"] = [f"{host}:{port}" for host, port in cluster.startup_nodes]
    elif request.param == "redlock":
        masters: IndependentMasters = request.getfixturevalue("redlock_masters")
        servers["redlock_urls"] = masters.urls
    with override_settings(LOCKS=locks_setting(redis_url, prefix, **servers)):
        yield contract_backend.alias


@pytest.fixture
def clock(using: str, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The clock the backend under test ends its leases on, for a test to pass time on.

    On LocMem, a clock that moves only when the test sleeps on it, in place of the module's
    ``time``: its windows and leases end without a wait. Elsewhere the real clock: the server
    ends them, and the test waits.
    """
    if using != BACKENDS["locmem"].alias:
        return RealClock()
    manual = ManualClock()
    monkeypatch.setattr(locmem, "time", manual)
    return manual
