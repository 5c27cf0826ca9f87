"""LeaderScheduler and leader_scheduler(), driven tick by tick in one process.

Each scheduler here is its own node: its own campaign owner, its own schedule state. The
messages they send go to the test's broker (its redis-server), to a queue nobody consumes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from celery import Celery
from celery.beat import PersistentScheduler, Scheduler
from celery.schedules import crontab
from django.test import override_settings

from django_redis_lock import InvalidLockBackendError, LockArgumentTypeError, locks
from django_redis_lock.celery.beat import (
    BeatSettings,
    LeaderScheduler,
    beat_settings,
    fingerprint,
    leader_scheduler,
    micros,
)
from django_redis_lock.testing import RedisServer
from django_redis_lock.testing.topologies import RedisClusterServers
from tests.support.celery_harness import beat_messages

ENTRY = "every-second"


class CountingScheduler(Scheduler):  # type: ignore[misc]
    """A scheduler class of a user's own, as the factory must wrap any."""

    ticks = 0

    def tick(self, *args: Any, **kwargs: Any) -> float:
        type(self).ticks += 1
        interval: float = super().tick(*args, **kwargs)
        return interval


SCHEDULERS = {
    "persistent": LeaderScheduler,
    "in-memory": leader_scheduler(Scheduler),
    "own-class": leader_scheduler(CountingScheduler),
}


@pytest.fixture
def app(redis_url: str, prefix: str) -> Iterator[Celery]:
    app = Celery("beat-tests", broker=redis_url, set_as_current=False)
    app.conf.update(
        beat_schedule={
            ENTRY: {"task": "beat.ping", "schedule": 1.0, "options": {"queue": f"{prefix}-beat"}}
        },
        beat_leader_lock="beat",
        beat_leader_ttl=5,
        broker_connection_retry_on_startup=True,
    )
    yield app
    app.close()


@pytest.fixture(params=sorted(SCHEDULERS))
def node(request: pytest.FixtureRequest, app: Celery, tmp_path: Path) -> Iterator[Any]:
    """Return a function that starts one more beat node of the class under test."""
    started: list[Any] = []

    def start() -> Any:
        cls = SCHEDULERS[request.param]
        kwargs = {"schedule_filename": str(tmp_path / f"node{len(started)}")}
        scheduler = cls(app, **(kwargs if issubclass(cls, PersistentScheduler) else {}))
        started.append(scheduler)
        return scheduler

    yield start
    for scheduler in started:
        scheduler.close()


def make_due(scheduler: Any, ago: float = 10.0) -> None:
    """Make the node's own state say the entry last ran ``ago`` seconds ago (stale state)."""
    entry = scheduler.schedule[ENTRY]
    entry.last_run_at = entry.default_now() - dt.timedelta(seconds=ago)
    scheduler.populate_heap()


def record(raw_redis: redis_py.Redis, prefix: str) -> dict[bytes, bytes]:
    return raw_redis.hgetall(f"{prefix}:{{=leader:beat}}:beat")  # type: ignore[return-value]


def put_record(
    raw_redis: redis_py.Redis, prefix: str, scheduler: Any, when: dt.datetime, mark: str = ""
) -> None:
    """Record ``when`` as the entry's last run sent, as a leader of its schedule would."""
    mark = mark or fingerprint(scheduler.schedule[ENTRY])
    raw_redis.hset(f"{prefix}:{{=leader:beat}}:beat", ENTRY, f"{micros(when)} {mark}")


def test_two_nodes__only_the_leader_sends(
    node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    first, second = node(), node()
    make_due(first)
    make_due(second)
    assert first.tick() == 0  # elected, sent
    assert 0 < second.tick() <= 1.0  # not elected: tries again within a second
    assert second.tick() > 0
    [sent] = beat_messages(raw_redis, prefix)
    assert sent["term"] == first.campaign.leader().fencing_token
    mark = fingerprint(first.schedule[ENTRY])
    assert record(raw_redis, prefix) == {ENTRY.encode(): f"{sent['run']} {mark}".encode()}
    assert first.tick() > 0.5, "the next run is a second away"
    assert len(beat_messages(raw_redis, prefix)) == 1


def test_handover__the_new_leader_counts_from_the_runs_the_old_one_sent(
    node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    first, second = node(), node()
    make_due(first)
    make_due(second, ago=3600)  # its own file is an hour stale
    assert first.tick() == 0
    first.close()  # resigns: the other node is elected at its next tick
    assert second.tick() > 0.5, "it sent the run the old leader had sent"
    assert second.campaign.term is not None
    [sent] = beat_messages(raw_redis, prefix)
    assert second.campaign.term.number > sent["term"]


def test_gap__runs_missed_while_nobody_led_are_sent_once(
    node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    last_run = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5.5)
    scheduler = node()
    put_record(raw_redis, prefix, scheduler, last_run)
    assert scheduler.tick() == 0
    assert 0.5 < scheduler.tick() <= 1.0
    [sent] = beat_messages(raw_redis, prefix)
    assert sent["after"] == micros(last_run), "it counted from the recorded run"


def test_lost_term__the_server_refuses_its_claim_before_the_node_sees_it(
    node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    scheduler = node()
    make_due(scheduler)
    assert scheduler.tick() == 0
    term = scheduler.campaign.term
    assert locks["default"].force_release("leader:beat") == 1
    assert not term.lost, "renewal has not found out yet"
    make_due(scheduler)
    scheduler.tick()
    assert len(beat_messages(raw_redis, prefix)) == 1, "a lost term sent"
    assert scheduler.campaign.term is not term or term.resigned


def test_stale_basis__a_run_counted_from_before_the_record_is_not_sent(
    node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    scheduler = node()
    make_due(scheduler)
    assert scheduler.tick() == 0
    # Another leader's later run, as if recorded behind this node's back.
    put_record(raw_redis, prefix, scheduler, dt.datetime.now(dt.timezone.utc))
    make_due(scheduler)
    scheduler.tick()
    assert len(beat_messages(raw_redis, prefix)) == 1
    assert scheduler.tick() > 0.5, "it counts from the recorded run now"


def test_crontab__a_fresh_node_sends_the_run_its_dead_predecessor_missed(
    app: Celery, node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    app.conf.beat_schedule = {
        ENTRY: {"task": "beat.ping", "schedule": crontab(), "options": {"queue": f"{prefix}-beat"}}
    }
    # The old leader sent the run of two minutes ago, then died: the run of the last minute
    # boundary is missed. A fresh node counts from its start, which is past that boundary.
    now = dt.datetime.now(dt.timezone.utc)
    scheduler = node()
    put_record(raw_redis, prefix, scheduler, now - dt.timedelta(minutes=2))
    scheduler.tick()
    assert len(beat_messages(raw_redis, prefix)) == 1
    scheduler.tick()
    assert len(beat_messages(raw_redis, prefix)) == 1


def test_an_entry_added_again_with_another_schedule__does_not_count_from_the_old_runs(
    app: Celery, node: Any, raw_redis: redis_py.Redis, prefix: str
) -> None:
    later = (dt.datetime.now(dt.timezone.utc).hour + 12) % 24
    app.conf.beat_schedule = {
        ENTRY: {
            "task": "beat.ping",
            "schedule": crontab(minute=0, hour=later),
            "options": {"queue": f"{prefix}-beat"},
        }
    }
    week_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=7)
    scheduler = node()
    put_record(raw_redis, prefix, scheduler, week_ago, mark="another-schedule")
    scheduler.tick()
    assert beat_messages(raw_redis, prefix) == [], "not due by its own schedule"
    # The same schedule's record is this entry's: its missed run is sent, once.
    scheduler.close()
    again = node()
    put_record(raw_redis, prefix, again, week_ago)
    again.tick()
    again.tick()
    assert len(beat_messages(raw_redis, prefix)) == 1


class LosingReplies(leader_scheduler(Scheduler)):  # type: ignore[misc]
    """A node whose first claim runs on the server but whose reply never comes back."""

    lost_replies = 0

    def _claim(self, *args: Any) -> list[Any]:
        reply: list[Any] = super()._claim(*args)  # type: ignore[misc]
        if not type(self).lost_replies:
            type(self).lost_replies += 1
            raise redis_py.TimeoutError("the reply did not come in time")
        return reply


def test_a_claim_whose_reply_was_lost__is_sent_again_and_found_recorded(
    app: Celery, raw_redis: redis_py.Redis, prefix: str
) -> None:
    scheduler = LosingReplies(app)
    try:
        make_due(scheduler)
        assert scheduler.tick() == 0
        assert LosingReplies.lost_replies == 1
        [sent] = beat_messages(raw_redis, prefix)
        assert record(raw_redis, prefix)[ENTRY.encode()].split()[0] == str(sent["run"]).encode()
    finally:
        scheduler.close()


def test_settings__read_from_celery_config_then_django_settings(app: Celery) -> None:
    assert beat_settings(app) == BeatSettings(name="beat", ttl=5.0, using="default")
    app.conf.beat_leader_lock = None
    app.conf.beat_leader_ttl = None
    assert beat_settings(app) == BeatSettings(name="celery-beat:beat-tests")
    assert beat_settings(Celery(set_as_current=False)) == BeatSettings()
    with override_settings(CELERY_BEAT_LEADER_LOCK="from-django", CELERY_BEAT_LEADER_TTL=3):
        assert beat_settings(app) == BeatSettings(name="from-django", ttl=3.0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("beat_leader_ttl", -1, "beat_leader_ttl must be"),
        ("beat_leader_ttl", "10", "beat_leader_ttl must be a number"),
        ("beat_leader_lock", "", "beat_leader_lock must be a lock name"),
        ("beat_leader_using", 3, "beat_leader_using"),
    ],
)
def test_settings__bad_values_are_refused_by_name(
    app: Celery, key: str, value: object, message: str
) -> None:
    app.conf[key] = value
    with pytest.raises(InvalidLockBackendError, match=message):
        beat_settings(app)


@pytest.mark.parametrize(
    ("alias", "message"), [("locmem", "beat_leader_using"), ("missing", "missing")]
)
def test_using__an_alias_without_a_shared_record_stops_beat_as_it_starts(
    app: Celery, alias: str, message: str
) -> None:
    app.conf.beat_leader_using = alias
    with pytest.raises(InvalidLockBackendError, match=message):
        leader_scheduler(Scheduler)(app)


def test_factory__refuses_what_is_no_scheduler_class() -> None:
    with pytest.raises(LockArgumentTypeError):
        leader_scheduler(dict)


def test_factory__keeps_the_wrapped_class() -> None:
    cls = leader_scheduler(CountingScheduler)
    assert issubclass(cls, CountingScheduler)
    assert cls.__name__ == "LeaderCountingScheduler"


def test_redis_down__the_leader_stops_sending_and_beat_keeps_ticking(
    node: Any, raw_redis: redis_py.Redis, prefix: str, own_server: RedisServer
) -> None:
    # The locks on a server of this test alone (the broker stays up).
    locks_on_own = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": own_server.url, "socket_timeout": 0.5},
        }
    }
    with override_settings(LOCKS=locks_on_own):
        scheduler = node()
        make_due(scheduler)
        assert scheduler.tick() == 0
        own_server.stop()
        make_due(scheduler)
        for _ in range(3):
            assert scheduler.tick() >= 0
        assert len(beat_messages(raw_redis, prefix)) == 1, "sent with no record of it"
        assert scheduler.campaign.term is None or scheduler.campaign.term.resigned


@pytest.mark.slow
def test_cluster__the_claim_runs_in_the_leader_lock_slot(
    app: Celery, raw_redis: redis_py.Redis, prefix: str
) -> None:
    with RedisClusterServers(primaries=3) as cluster:
        nodes = [f"{host}:{port}" for host, port in cluster.startup_nodes]
        setting = {
            "cluster": {
                "BACKEND": "django_redis_lock.backends.cluster.RedisClusterBackend",
                "OPTIONS": {"startup_nodes": nodes, "key_prefix": prefix},
            }
        }
        app.conf.beat_leader_using = "cluster"
        with override_settings(LOCKS=setting):
            first, second = (leader_scheduler(Scheduler)(app) for _ in range(2))
            try:
                make_due(first)
                make_due(second, ago=3600)
                assert first.tick() == 0
                assert second.tick() > 0
                first.close()
                assert second.tick() > 0.5, "the new leader counts from the recorded run"
                assert locks["cluster"].force_release("leader:beat") == 1
                make_due(second)
                second.tick()
            finally:
                first.close()
                second.close()
    assert len(beat_messages(raw_redis, prefix)) == 1, "a run was sent twice, or by a lost term"
