"""The fault-injection stress test: no overlap of two critical sections goes unexplained.

Processes (some running asyncio tasks) take one lock with short leases, random holds (some
longer than the lease, so renewal runs), random timeouts and nested acquires, while a chaos
thread stops, resumes and kills them, holders and waiters alike. ``STRESS_SECONDS`` sets the
length of the run on Redis (default 45); Redlock and Cluster run a third of it, and so do
the runs of ``lock_all`` over several names (tests/support/stress_lock_all.py: on Redis,
Redlock and Cluster) and of the two sides of a read-write lock (tests/support/stress_rwlock.py:
on Redis and Cluster; Redlock refuses read-write locks).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from django_redis_lock.testing.topologies import IndependentMasters, RedisClusterServers
from tests.support import stress, stress_lock_all, stress_rwlock

pytestmark = pytest.mark.slow

SECONDS = float(os.environ.get("STRESS_SECONDS", "45"))


def backend(path: str, **options: object) -> dict[str, object]:
    return {"default": {"BACKEND": f"django_redis_lock.backends.{path}", "OPTIONS": options}}


@contextmanager
def redlock_setting(prefix: str) -> Iterator[dict[str, object]]:
    """LOCKS on three throw-away independent masters, for one run."""
    with IndependentMasters(3) as masters:
        yield backend("redlock.RedlockBackend", urls=masters.urls, key_prefix=prefix)


@contextmanager
def cluster_setting(prefix: str) -> Iterator[dict[str, object]]:
    """LOCKS on a throw-away 3-primary Redis Cluster, for one run."""
    with RedisClusterServers(primaries=3, node_timeout=60) as cluster:
        nodes = [f"{host}:{port}" for host, port in cluster.startup_nodes]
        yield backend(
            "cluster.RedisClusterBackend", startup_nodes=nodes, key_prefix=prefix, socket_timeout=2
        )


def assert_each_explained(reports: dict[str, stress.Report]) -> None:
    for name, report in reports.items():
        print(name, end=": ")
        assert_explained(report)


def assert_explained(report: stress.Report) -> None:
    print(report.summary())
    assert report.crashed == [], "a worker failed: see its log"
    assert report.acquisitions >= report.seconds, "too few acquisitions to mean anything"
    assert report.pauses
    assert report.kills
    assert report.unexplained == [], "\n".join(report.unexplained[:20])


def test_stress__redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    assert_explained(stress.run(setting, tmp_path, processes=10, seconds=SECONDS))


def test_stress__redlock(prefix: str, tmp_path: Path) -> None:
    with redlock_setting(prefix) as setting:
        report = stress.run(setting, tmp_path, processes=6, seconds=SECONDS / 3, asyncio_share=0)
    assert_explained(report)


def test_stress__cluster(prefix: str, tmp_path: Path) -> None:
    with cluster_setting(prefix) as setting:
        assert_explained(stress.run(setting, tmp_path, processes=6, seconds=SECONDS / 3))


def test_stress__lock_all_redlock(prefix: str, tmp_path: Path) -> None:
    with redlock_setting(prefix) as setting:
        reports = stress_lock_all.run(setting, tmp_path, processes=6, seconds=SECONDS / 3)
    assert_each_explained(reports)


def test_stress__lock_all_cluster(prefix: str, tmp_path: Path) -> None:
    # The names live in several slots: taken one by one, across primaries.
    with cluster_setting(prefix) as setting:
        reports = stress_lock_all.run(setting, tmp_path, processes=6, seconds=SECONDS / 3)
    assert_each_explained(reports)


def test_stress__rwlock_cluster(prefix: str, tmp_path: Path) -> None:
    with cluster_setting(prefix) as setting:
        report = stress_rwlock.run(setting, tmp_path, processes=6, seconds=SECONDS / 3)
    assert_explained(report)
    assert report.shared, "no two readers ever held the lock at once"


def test_stress__rwlock_redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    report = stress_rwlock.run(setting, tmp_path, processes=8, seconds=SECONDS / 3)
    assert_explained(report)
    assert report.shared, "no two readers ever held the lock at once"


def crashing_rounds(*arguments: object) -> None:
    """A stress worker's loop that fails at once, as one whose code is broken would."""
    raise RuntimeError("this worker fails")


async def crashing_async_rounds(*arguments: object) -> None:
    crashing_rounds()


def test_run__a_worker_that_fails_fails_the_run(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix)
    rounds = (crashing_rounds, crashing_async_rounds)
    report = stress.run(setting, tmp_path, processes=2, seconds=1, chaos=False, rounds=rounds)
    assert len(report.crashed) == 2
    assert all(line.endswith("exited with 1") for line in report.crashed)


def test_check__two_readers_may_overlap_a_writer_with_anyone_may_not(tmp_path: Path) -> None:
    ms = 1_000_000
    logs = {
        "chaos.log": [],
        "worker-0.log": ["pid 10", "enter 1 0 - read", f"leave 1 {100 * ms}"],
        "worker-1.log": ["pid 11", f"enter 2 {50 * ms} - read", f"leave 2 {150 * ms}"],
        "worker-2.log": ["pid 12", f"enter 3 {140 * ms} -", f"leave 3 {200 * ms}"],
    }
    for name, lines in logs.items():
        (tmp_path / name).write_text("".join(f"{line}\n" for line in lines))
    report = stress.check(tmp_path, 3, 1.0)
    assert (report.shared, report.overlaps) == (1, 1)
    assert [line.splitlines()[0] for line in report.unexplained] == [
        "tokens 2 (pid 11) and 3 (pid 12) ran at once; neither was told of a loss"
    ]


def test_stress__lock_all_redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    reports = stress_lock_all.run(setting, tmp_path, processes=8, seconds=SECONDS / 3)
    assert sorted(reports) == [f"stress:{n}" for n in range(6)]
    assert_each_explained(reports)
