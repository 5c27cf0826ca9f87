"""The fault-injection stress test: no overlap of two critical sections goes unexplained.

Processes (some running asyncio tasks) take one lock with short leases, random holds (some
longer than the lease, so renewal runs), random timeouts and nested acquires, while a chaos
thread stops, resumes and kills them, holders and waiters alike. ``STRESS_SECONDS`` sets the
length of the run on Redis (default 20); Redlock and Cluster run half of it, and so do
the runs of ``lock_all`` over several names (tests/support/stress_lock_all.py: on Redis,
Redlock and Cluster) and of the two sides of a read-write lock (tests/support/stress_rwlock.py:
on Redis and Cluster; Redlock refuses read-write locks).

The chaos is seeded, so a run replays one schedule of pauses and kills: the default lengths
keep several pauses and kills in every run (the report's counts are asserted). A longer run
only adds more draws of the same faults; a soak run sets ``STRESS_SECONDS=600``. The three
Cluster runs share one Cluster, and the two Redlock runs one set of masters (each run keeps
to its own key prefix).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_redis_lock.testing.topologies import IndependentMasters, RedisClusterServers
from tests.support import stress, stress_lock_all, stress_rwlock

# Many processes at once, their pace asserted: one such module runs at a time under xdist.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]

SECONDS = float(os.environ.get("STRESS_SECONDS", "20"))
#: The length of every run but the one of ``lock`` on one Redis.
SIDE_SECONDS = SECONDS / 2


def backend(path: str, **options: object) -> dict[str, object]:
    return {"default": {"BACKEND": f"django_redis_lock.backends.{path}", "OPTIONS": options}}


@pytest.fixture(scope="module")
def stress_masters() -> Iterator[IndependentMasters]:
    """Three throw-away independent masters, shared by this module's Redlock runs."""
    with IndependentMasters(3) as masters:
        yield masters


@pytest.fixture(scope="module")
def stress_cluster() -> Iterator[RedisClusterServers]:
    """A throw-away 3-primary Redis Cluster, shared by this module's Cluster runs.

    Its node timeout (60 s) outlasts every pause of the chaos, so no failover starts.
    """
    with RedisClusterServers(primaries=3, node_timeout=60) as cluster:
        yield cluster


@pytest.fixture
def redlock_setting(stress_masters: IndependentMasters, prefix: str) -> dict[str, object]:
    """LOCKS on the module's independent masters, under this test's prefix."""
    return backend("redlock.RedlockBackend", urls=stress_masters.urls, key_prefix=prefix)


@pytest.fixture
def cluster_setting(stress_cluster: RedisClusterServers, prefix: str) -> dict[str, object]:
    """LOCKS on the module's Redis Cluster, under this test's prefix."""
    nodes = [f"{host}:{port}" for host, port in stress_cluster.startup_nodes]
    return backend(
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


def test_stress__redlock(redlock_setting: dict[str, object], tmp_path: Path) -> None:
    report = stress.run(
        redlock_setting, tmp_path, processes=6, seconds=SIDE_SECONDS, asyncio_share=0
    )
    assert_explained(report)


def test_stress__cluster(cluster_setting: dict[str, object], tmp_path: Path) -> None:
    assert_explained(stress.run(cluster_setting, tmp_path, processes=6, seconds=SIDE_SECONDS))


def test_stress__lock_all_redlock(redlock_setting: dict[str, object], tmp_path: Path) -> None:
    reports = stress_lock_all.run(redlock_setting, tmp_path, processes=6, seconds=SIDE_SECONDS)
    assert_each_explained(reports)


def test_stress__lock_all_cluster(cluster_setting: dict[str, object], tmp_path: Path) -> None:
    # The names live in several slots: taken one by one, across primaries.
    reports = stress_lock_all.run(cluster_setting, tmp_path, processes=6, seconds=SIDE_SECONDS)
    assert_each_explained(reports)


def test_stress__rwlock_cluster(cluster_setting: dict[str, object], tmp_path: Path) -> None:
    report = stress_rwlock.run(cluster_setting, tmp_path, processes=6, seconds=SIDE_SECONDS)
    assert_explained(report)
    assert report.shared, "no two readers ever held the lock at once"


def test_stress__rwlock_redis(redis_url: str, prefix: str, tmp_path: Path) -> None:
    setting = backend("redis.RedisBackend", url=redis_url, key_prefix=prefix, socket_timeout=2)
    report = stress_rwlock.run(setting, tmp_path, processes=8, seconds=SIDE_SECONDS)
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
    reports = stress_lock_all.run(setting, tmp_path, processes=8, seconds=SIDE_SECONDS)
    assert sorted(reports) == [f"stress:{n}" for n in range(6)]
    assert_each_explained(reports)
