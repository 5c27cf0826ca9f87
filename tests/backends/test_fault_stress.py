"""The fault-injection stress test: no overlap of two critical sections goes unexplained.

Processes (some running asyncio tasks) take one lock with short leases, random holds (some
longer than the lease, so renewal runs), random timeouts and nested acquires, while a chaos
thread stops, resumes and kills them, holders and waiters alike. ``STRESS_SECONDS`` sets the
length of the run on Redis (default 45); Redlock and Cluster run a third of it, and so does
the run of ``lock_all`` over several names (tests/support/stress_lock_all.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from django_redis_lock.testing.topologies import IndependentMasters, RedisClusterServers
from tests.support import stress, stress_lock_all

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("STRESS_SECONDS", "45"))


def backend(path: str, **options: object) -> dict[str, object]:
    return {"default": {"BACKEND": f"django_redis_lock.backends.{path}", "OPTIONS": options}}


def assert_explained(report: stress.Report) -> None:
    print(report.summary())
    assert report.acquisitions >= report.seconds, "too few acquisitions to mean anything"
    assert report.pauses
    assert report.kills
    assert report.unexplained == [], "\n".join(report.unexplained[:20])


def test_stress__redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    assert_explained(stress.run(setting, tmp_path, processes=10, seconds=SECONDS))


def test_stress__redlock(prefix: str, tmp_path: Path) -> None:
    with IndependentMasters(3) as masters:
        setting = backend("redlock.RedlockBackend", urls=masters.urls, key_prefix=prefix)
        report = stress.run(setting, tmp_path, processes=6, seconds=SECONDS / 3, asyncio_share=0)
    assert_explained(report)


def test_stress__cluster(prefix: str, tmp_path: Path) -> None:
    with RedisClusterServers(primaries=3, node_timeout=60) as cluster:
        nodes = [f"{host}:{port}" for host, port in cluster.startup_nodes]
        setting = backend(
            "cluster.RedisClusterBackend", startup_nodes=nodes, key_prefix=prefix, socket_timeout=2
        )
        assert_explained(stress.run(setting, tmp_path, processes=6, seconds=SECONDS / 3))


def test_stress__lock_all_redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    reports = stress_lock_all.run(setting, tmp_path, processes=8, seconds=SECONDS / 3)
    assert sorted(reports) == [f"stress:{n}" for n in range(6)]
    for name, report in reports.items():
        print(name, end=": ")
        assert_explained(report)
