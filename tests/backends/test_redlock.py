"""RedlockBackend on five real, independent redis-servers: majorities, failures, restarts."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from django.conf import settings
from django.test import override_settings

from django_redis_lock import (
    BackendUnavailableError,
    InvalidLockArgumentError,
    InvalidLockBackendError,
    LockNotOwnedError,
    alock,
    lock,
    locks,
    rate_limit,
    rwlock,
)
from django_redis_lock.backends.base import AcquireRequest, holder_metadata
from django_redis_lock.backends.redlock import RedlockBackend
from django_redis_lock.conf import problems
from django_redis_lock.testing import RedisServer
from tests.support.helpers import in_thread

BACKEND = "django_redis_lock.backends.redlock.RedlockBackend"
# Redlock gives each master 0.2 s to answer (its default, as these tests use it): on a machine
# busy with other tests a master would seem down now and then, and a quorum's answer change.
pytestmark = pytest.mark.serial

META = holder_metadata(host="test", pid=1, thread="t")

spawn = multiprocessing.get_context("spawn")


@pytest.fixture(scope="module")
def masters() -> Iterator[list[RedisServer]]:
    """Five independent redis-servers, for the whole module."""
    servers = [RedisServer() for _ in range(5)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(autouse=True)
def _all_masters_running(masters: list[RedisServer]) -> Iterator[None]:
    """Every test starts, and leaves, with all five masters up (a test may stop some)."""
    for server in masters:
        if server.process is None:
            server.start()
    yield
    for server in masters:
        if server.process is None:
            server.start()


def redlock_config(urls: list[str], prefix: str, **options: Any) -> dict[str, Any]:
    return {"BACKEND": BACKEND, "OPTIONS": {"urls": urls, "key_prefix": prefix, **options}}


@pytest.fixture
def urls(masters: list[RedisServer]) -> list[str]:
    return [server.url for server in masters]


@pytest.fixture
def redlock(urls: list[str], prefix: str) -> Iterator[RedlockBackend]:
    """LOCKS with a 'redlock' alias on the five masters (this test's key prefix)."""
    setting = {**settings.LOCKS, "redlock": redlock_config(urls, prefix)}
    with override_settings(LOCKS=setting):
        backend = locks["redlock"]
        assert isinstance(backend, RedlockBackend)
        yield backend


@pytest.fixture
def clients(urls: list[str]) -> Iterator[list[redis_py.Redis]]:
    made = [redis_py.Redis.from_url(url) for url in urls]
    yield made
    for client in made:
        client.close()


def holders_on(clients: list[redis_py.Redis], prefix: str, name: str) -> list[list[bytes]]:
    key = RedlockBackend(urls=["redis://a/0", "redis://b/0", "redis://c/0"], key_prefix=prefix)
    return [c.hkeys(key.nodes[0].key(name)) for c in clients]


# Configuration ---------------------------------------------------------------------------------


def test_settings__a_redlock_alias_passes_the_checks(urls: list[str]) -> None:
    setting = {"default": redlock_config(urls, "p", ttl=5, clock_drift_factor=0.02)}
    assert problems(setting) == []


def test_settings__redlock_options_are_checked(urls: list[str]) -> None:
    for options, fragment in (
        ({"urls": urls[:2]}, "at least 3"),
        ({"urls": [urls[0]] * 3}, "distinct"),
        ({"urls": urls, "clock_drift_factor": "0.1"}, "clock_drift_factor"),
    ):
        found = problems({"default": {"BACKEND": BACKEND, "OPTIONS": options}})
        assert [p.id for p in found] == ["django_redis_lock.E014"]
        assert fragment in found[0].msg


def test_settings__bad_urls_and_unknown_options_are_reported(urls: list[str]) -> None:
    config = redlock_config([*urls[:2], "http://x:1/0"], "p")
    assert [p.id for p in problems({"default": config})] == ["django_redis_lock.E008"]
    config = redlock_config(urls, "p", url=urls[0])
    assert [p.id for p in problems({"default": config})] == ["django_redis_lock.E007"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"urls": ["redis://a/0", "redis://b/0"]}, "at least 3"),
        ({"urls": "redis://a/0"}, "list of Redis URLs"),
        ({"urls": ["redis://a/0", "redis://a/0", "redis://b/0"]}, "distinct"),
        ({"urls": ["redis://a/0", "redis://b/0", "ftp://c/0"]}, "redis://"),
        ({"clock_drift_factor": 0.7}, "clock_drift_factor"),
        ({"clock_drift_factor": True}, "clock_drift_factor"),
        ({"socket_timeout": 0}, "socket_timeout"),
    ],
)
def test_constructor__refuses_bad_options(options: dict[str, Any], message: str) -> None:
    arguments = {"urls": ["redis://a/0", "redis://b/0", "redis://c/0"], **options}
    with pytest.raises(InvalidLockBackendError, match=message):
        RedlockBackend(**arguments)


def test_repr__redacts_passwords() -> None:
    backend = RedlockBackend(urls=[f"redis://u:s3cret@h{n}:6379/0" for n in range(3)])
    assert "s3cret" not in repr(backend)
    assert backend.quorum == 2


# The basics through lock() ---------------------------------------------------------------------


def test_lock__acquire_reenter_release_on_every_master(
    redlock: RedlockBackend, clients: list[redis_py.Redis], prefix: str
) -> None:
    held = lock("basic", using="redlock", ttl=10)
    assert held.acquire(blocking=False)
    token = held.fencing_token
    assert held.acquire(blocking=False), "reentrant"
    assert held.fencing_token == token
    assert all(len(h) == 1 for h in holders_on(clients, prefix, "basic"))
    assert held.locked()
    assert held.owned()
    ttl = held.ttl()
    assert ttl is not None
    assert 9.5 < ttl <= 10
    [info] = redlock.lock_info("basic")
    assert info.holds == 2
    assert info.fencing_token == token
    assert info.pid == os.getpid()
    held.release()
    assert held.locked()
    held.release()
    assert not held.locked()
    assert holders_on(clients, prefix, "basic") == [[]] * 5
    with pytest.raises(LockNotOwnedError):
        held.release()


def test_lock__another_owner_is_excluded_and_tokens_grow(redlock: RedlockBackend) -> None:
    first = lock("fenced", using="redlock")
    tokens = []
    for _ in range(3):
        with first:
            tokens.append(first.fencing_token)
            assert not in_thread(lambda: lock("fenced", using="redlock").acquire(blocking=False))
        other = lock("fenced", using="redlock")

        def take(other: Any = other) -> Any:
            assert other.acquire(blocking=False)
            return other.fencing_token

        tokens.append(in_thread(take))
        redlock.force_release("fenced")
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


def test_lock__a_waiter_gets_the_lock_soon_after_the_release(redlock: RedlockBackend) -> None:
    holder = lock("wait", using="redlock")
    holder.acquire()
    acquired_at: list[float] = []

    def wait_for_it() -> None:
        with lock("wait", using="redlock", timeout=5):
            acquired_at.append(time.monotonic())

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.3)
    released_at = time.monotonic()
    holder.release()
    waiter.join(10)
    # Waiting is polling here: the next retry (at most max_wait later) takes the lock.
    assert 0 <= acquired_at[0] - released_at < 0.25


def test_lock__a_timed_out_wait_respects_its_timeout(redlock: RedlockBackend) -> None:
    holder = lock("busy", using="redlock")
    holder.acquire()
    started = time.monotonic()
    assert not in_thread(lambda: lock("busy", using="redlock").acquire(timeout=0.3))
    assert 0.3 <= time.monotonic() - started < 0.6
    holder.release()


def test_lock__semaphores_are_refused(redlock: RedlockBackend) -> None:
    with pytest.raises(InvalidLockArgumentError, match="semaphores"):
        lock("sem", using="redlock", limit=2).acquire()


def test_rwlock__readers_are_refused_with_the_reason(redlock: RedlockBackend) -> None:
    rw = rwlock("report", using="redlock")
    with pytest.raises(InvalidLockArgumentError, match="read-write locks") as caught:
        rw.read().acquire()
    assert "a waiting writer could not stop new readers" in str(caught.value)
    assert caught.value.lock_name == "report"
    assert not redlock.locked("report")


async def test_alock__acquire_and_release(redlock: RedlockBackend) -> None:
    async with alock("async", using="redlock") as held:
        assert held.fencing_token is not None
        assert await asyncio.to_thread(redlock.locked, "async")
        other = alock("async", using="redlock")
        assert not await asyncio.create_task(other.acquire(timeout=0.1))
    assert not redlock.locked("async")


# Failures of masters ---------------------------------------------------------------------------


def test_two_masters_down__locks_still_work(
    redlock: RedlockBackend, masters: list[RedisServer]
) -> None:
    masters[0].stop()
    masters[3].stop()
    held = lock("degraded", using="redlock")
    with held:
        assert held.locked()
        assert not in_thread(lambda: lock("degraded", using="redlock").acquire(blocking=False))
        assert held.extend(5) > 5
        [info] = redlock.lock_info("degraded")
        assert info.fencing_token == held.fencing_token
    assert not held.locked()


def test_three_masters_down__a_clear_error_within_bounded_time(
    redlock: RedlockBackend, masters: list[RedisServer]
) -> None:
    for server in masters[:3]:
        server.stop()
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as caught:
        lock("down", using="redlock").acquire(blocking=False)
    assert time.monotonic() - started < 2
    message = str(caught.value)
    assert "only 2 of 5 Redis masters answered (a majority of 3 is needed)" in message
    assert masters[0].url in message
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        redlock.ping()
    with pytest.raises(BackendUnavailableError):
        redlock.ttl("down")
    assert time.monotonic() - started < 2
    for server in masters[:3]:
        server.start()
    with lock("down", using="redlock", timeout=2):  # available again (old connections aside)
        pass


def test_three_masters_frozen__a_clear_error_within_bounded_time(
    redlock: RedlockBackend, masters: list[RedisServer]
) -> None:
    redlock.ping()  # connections open: the frozen masters accept, and never answer
    for server in masters[2:]:
        server.pause()
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError, match="only 2 of 5"):
            lock("frozen3", using="redlock").acquire(timeout=0.1)
        assert time.monotonic() - started < 2
    finally:
        for server in masters[2:]:
            server.resume()


def test_unavailable__urls_are_redacted(masters: list[RedisServer]) -> None:
    ports = [server.port for server in masters[:3]]
    for server in masters[:3]:
        server.stop()
    backend = RedlockBackend(urls=[f"redis://user:s3cret@127.0.0.1:{p}/0" for p in ports])
    with pytest.raises(BackendUnavailableError) as caught:
        backend.acquire("x", "o", AcquireRequest(ttl=1, metadata=META))
    assert "s3cret" not in str(caught.value)
    assert "user:***@127.0.0.1" in str(caught.value)
    assert "only 0 of 3" in str(caught.value)
    backend.close()


def test_a_frozen_master__costs_one_socket_timeout_not_more(
    redlock: RedlockBackend, masters: list[RedisServer]
) -> None:
    masters[1].pause()
    try:
        started = time.monotonic()
        with lock("frozen", using="redlock", ttl=5) as held:
            assert time.monotonic() - started < 1.0
            assert held.ttl() is not None
    finally:
        masters[1].resume()


def test_undecidable__raises_rather_than_guessing(
    redlock: RedlockBackend, masters: list[RedisServer]
) -> None:
    held = lock("undecided", using="redlock")
    held.acquire()
    masters[0].stop()
    masters[1].stop()
    owner = held._owner_token()
    redlock.nodes[2].force_release("undecided", owner)
    # Confirmed on two masters, denied on one, two unreachable: it may hold, it may not.
    with pytest.raises(BackendUnavailableError, match="cannot tell"):
        redlock.ttl("undecided", owner)
    with pytest.raises(BackendUnavailableError, match="cannot tell"):
        redlock.renew([("undecided", owner, 5.0)])
    redlock.nodes[3].force_release("undecided", owner)
    redlock.nodes[4].force_release("undecided", owner)
    # Now denied by three masters, a majority: it is lost for sure.
    assert redlock.ttl("undecided", owner) is None
    assert redlock.renew([("undecided", owner, 5.0)]) == [None]
    with pytest.raises(LockNotOwnedError):
        held.release()


# Majorities ------------------------------------------------------------------------------------


def test_minority_of_stale_keys__is_not_a_lock(
    redlock: RedlockBackend, clients: list[redis_py.Redis], prefix: str
) -> None:
    for node in redlock.nodes[:2]:
        assert node.acquire("stale", "ghost", AcquireRequest(ttl=30, metadata=META)).acquired
    assert not lock("stale", using="redlock").locked()
    assert redlock.ttl("stale") is None
    assert redlock.ttl("stale", "ghost") is None
    assert redlock.lock_info("stale") == []
    assert redlock.release("stale", "ghost") is None  # and the stale keys are dropped
    assert holders_on(clients, prefix, "stale") == [[]] * 5


def test_minority_held_by_others__an_attempt_fails_and_leaves_nothing(
    redlock: RedlockBackend, clients: list[redis_py.Redis], prefix: str
) -> None:
    # Two owners each hold two masters: nobody has a majority, and the free one cannot help.
    for index, ghost in ((0, "g1"), (1, "g1"), (2, "g2"), (3, "g2")):
        assert (
            redlock.nodes[index]
            .acquire("split", ghost, AcquireRequest(ttl=1.5, metadata=META))
            .acquired
        )
    result = redlock.acquire("split", "me", AcquireRequest(ttl=5, metadata=META))
    assert not result.acquired
    assert result.retry_after is not None
    assert 0 < result.retry_after <= 1.5
    assert holders_on(clients, prefix, "split")[4] == []
    assert not redlock.locked("split")
    # When the stale leases end, the lock is free again.
    with lock("split", using="redlock", timeout=4):
        assert redlock.locked("split")


def test_reentry__survives_a_master_that_forgot(
    redlock: RedlockBackend, clients: list[redis_py.Redis], prefix: str
) -> None:
    held = lock("forgot", using="redlock")
    held.acquire()
    token = held.fencing_token
    clients[0].flushdb()  # as if restarted empty
    assert held.acquire(blocking=False)
    assert held.fencing_token == token
    held.release()
    held.release()
    assert not held.locked()


def test_extend_and_ttl__the_majority_decides(redlock: RedlockBackend) -> None:
    def left(seconds: float, spent: float) -> tuple[float, float]:
        """The bounds of a majority's lease of `seconds`, read `spent` seconds after setting it:
        less the clock drift (1 % + 2 ms), and less the time spent, twice at most (the masters'
        clocks ran on, and the read's own round trips are taken off)."""
        drift = seconds * 0.01 + 0.002
        return seconds - drift - 2 * spent - 0.002, seconds - drift + 0.001

    assert redlock.acquire("ttl", "me", AcquireRequest(ttl=10, metadata=META)).acquired
    started = time.monotonic()
    for node, seconds in zip(redlock.nodes, [50, 10, 40, 20, 30], strict=True):
        node.extend("ttl", "me", seconds, replace=True)
    # Any holder's lease hears every master: the third longest of the five.
    longest = redlock.ttl("ttl")
    low, high = left(30, time.monotonic() - started)
    assert longest is not None
    assert low <= longest <= high
    # The owner's is settled once a majority answered: the third longest of those that had
    # by then, 30 s when all five had, less when a loaded machine's slowest had not; never
    # more than a majority hold (not 40 or 50).
    ttl = redlock.ttl("ttl", "me")
    spent = time.monotonic() - started
    assert ttl is not None
    assert left(10, spent)[0] <= ttl <= left(30, spent)[1]
    extended = redlock.extend("ttl", "me", 5)
    spent = time.monotonic() - started
    assert extended is not None
    assert left(15, spent)[0] <= extended <= left(35, spent)[1]

    held = lock("extend", using="redlock", ttl=10)
    held.acquire()
    owner = held._owner_token()
    started = time.monotonic()
    extended = held.extend(100, replace=True)
    low, high = left(100, time.monotonic() - started)
    assert low <= extended <= high
    for node in redlock.nodes[:3]:
        node.force_release("extend", owner)
    assert held.ttl() is None
    assert not held.locked()
    with pytest.raises(LockNotOwnedError):
        held.extend(5)


def test_listing__merges_the_masters(redlock: RedlockBackend, urls: list[str]) -> None:
    a = lock("list-a", using="redlock", metadata={"job": 1})
    b = lock("list-b", using="redlock")
    a.acquire()
    b.acquire()
    for node in redlock.nodes[:2]:
        node.acquire("list-ghost", "ghost", AcquireRequest(ttl=30, metadata=META))
    # A master restarted empty still lists a's hold with its own (newer) token.
    redlock.nodes[4].force_release("list-a")
    redlock.nodes[4].acquire("list-a", a._owner_token(), AcquireRequest(ttl=5, metadata=META))
    infos = list(redlock.iter_locks("list-*"))
    assert [(i.name, i.holds) for i in infos] == [("list-a", 1), ("list-b", 1)]
    assert infos[0].metadata == {"job": 1}
    assert infos[0].fencing_token >= (a.fencing_token or 0)
    assert redlock.lock_info("list-ghost") == []
    cursor, page = redlock.scan_page("list-*", count=1)
    assert [i.name for i in page] == ["list-a"]
    cursor, page = redlock.scan_page("list-*", cursor=cursor, count=1)
    assert [i.name for i in page] == ["list-b"]
    assert cursor is None
    assert redlock.force_release("list-a") == 1
    assert not a.locked()
    b.release()


def test_renewal__keeps_a_lock_past_several_leases(redlock: RedlockBackend) -> None:
    with lock("renewed", using="redlock", ttl=0.3) as held:
        time.sleep(1.2)
        assert held.owned()
        assert not held.lost
        assert not in_thread(lambda: lock("renewed", using="redlock").acquire(blocking=False))


def test_renew__many_leases_at_once(redlock: RedlockBackend) -> None:
    for name in ("r1", "r2"):
        assert redlock.acquire(name, "me", AcquireRequest(ttl=1, metadata=META)).acquired
    left = redlock.renew([("r1", "me", 20.0), ("r2", "me", 30.0), ("r3", "me", 5.0)])
    assert left[0] is not None
    assert left[1] is not None
    assert 19.5 < left[0] <= 20
    assert 29.5 < left[1] <= 30
    assert left[2] is None


def test_withdraw__undoes_on_every_master(redlock: RedlockBackend) -> None:
    assert redlock.acquire("w", "me", AcquireRequest(ttl=5, metadata=META)).acquired
    assert redlock.acquire("w", "me", AcquireRequest(ttl=5, metadata=META)).holds == 2
    assert redlock.withdraw("w", "me", 1) == 1
    assert redlock.withdraw("w", "me", 0) == 0
    assert not redlock.locked("w")


def test_wait__a_short_growing_sleep_never_past_the_timeout(redlock: RedlockBackend) -> None:
    started = time.monotonic()
    assert redlock.wait("n", "o", 0.0) is None
    sleeps = []
    for _ in range(8):
        began = time.monotonic()
        redlock.wait("n", "o", 1.0)
        sleeps.append(time.monotonic() - began)
    assert max(sleeps) < 0.07
    assert sleeps[-1] > sleeps[0]
    assert time.monotonic() - started < 0.5


# Processes, and a master restarted empty -------------------------------------------------------


def count_under_redlock(
    store: str, urls: list[str], prefix: str, worker: int, rounds: int
) -> None:
    """In a spawned process: ``rounds`` increments of a shared counter, each under the lock."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    override_settings(LOCKS={"default": redlock_config(urls, prefix)}).enable()
    client = redis_py.Redis.from_url(store)
    counter, log = f"{prefix}:counter", f"{prefix}:holds"
    guard = lock("shared-counter", ttl=10, timeout=60)
    done = 0
    while done < rounds:
        entered = False
        try:
            with guard:
                entered = True
                start = time.monotonic_ns()
                value = int(client.get(counter) or 0)
                time.sleep(0.001)
                client.set(counter, value + 1)
                end = time.monotonic_ns()
                token = guard.fencing_token
        except BackendUnavailableError:
            # While the master restarts, the masters that answer may be split (2 confirm, 2
            # deny): the release cannot tell whether the lease was still held, and says so.
            # The increment ran under the lock all the same; an acquire that failed did not.
            if not entered:
                continue
        done += 1
        client.rpush(log, f"{worker} {start} {end} {token}")


@pytest.mark.slow
def test_processes__no_double_grant_while_a_master_restarts_empty(
    masters: list[RedisServer], urls: list[str], prefix: str, redis_url: str
) -> None:
    store = redis_py.Redis.from_url(redis_url)
    processes, rounds = 4, 50
    children = [
        spawn.Process(target=count_under_redlock, args=(redis_url, urls, prefix, n, rounds))
        for n in range(processes)
    ]
    for child in children:
        child.start()
    try:
        deadline = time.monotonic() + 60
        while int(store.get(f"{prefix}:counter") or 0) < processes * rounds // 4:
            assert time.monotonic() < deadline, "the workers made no progress"
            time.sleep(0.01)
        masters[2].stop()  # forgets every lock it held...
        time.sleep(0.2)
        masters[2].start()  # ...and comes back empty, on the same port
        restarted_at = int(store.get(f"{prefix}:counter") or 0)
        assert restarted_at < processes * rounds, "the restart came after the work was done"
    finally:
        for child in children:
            child.join(120)
    assert [child.exitcode for child in children] == [0] * processes
    assert int(store.get(f"{prefix}:counter") or 0) == processes * rounds
    entries = [e.split() for e in store.lrange(f"{prefix}:holds", 0, -1)]
    holds = sorted((int(start), int(end), int(token)) for _, start, end, token in entries)
    assert len(holds) == processes * rounds
    for (_, end, token), (start, _, later) in itertools.pairwise(holds):
        assert end <= start, "two holds overlapped"
        assert later > token, "fencing tokens must grow from holder to holder"
    assert len({entry[0] for entry in entries}) == processes
    store.close()


def test_waiters__redlock_keeps_no_queue_and_lists_none(redlock: RedlockBackend) -> None:
    """A waiter retries on the masters, registered nowhere: nobody is listed as waiting."""
    with lock("nobody-queues", using="redlock"):
        waiter = threading.Thread(
            target=lambda: lock("nobody-queues", using="redlock").acquire(timeout=1.0)
        )
        waiter.start()
        time.sleep(0.3)  # the waiter is retrying now; no event says so, as no queue exists

        assert redlock.waiters("nobody-queues") == []
        assert [info.waiting for info in redlock.lock_info("nobody-queues")] == [0]
        waiter.join(5)


def test_rate_limit__refused_saying_why(redlock: RedlockBackend) -> None:
    # Hits counted on independent masters would not bound the hits across majorities.
    with pytest.raises(InvalidLockArgumentError, match="RedlockBackend keeps no rate limits"):
        rate_limit("rl:redlock", "1/s", using="redlock").acquire()
    assert list(redlock.iter_rate_limits()) == []
