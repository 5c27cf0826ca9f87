"""Waiting, handoff, fairness, renewal and lost-lease reporting, in one process."""

from __future__ import annotations

import logging
import statistics
import threading
import time
from typing import Any

import pytest
import redis as redis_py

from django_redis_lock import LockLostError, LockNotOwnedError, lock, locks
from django_redis_lock._core.renewal import renewer
from django_redis_lock.backends.base import AcquireRequest, BaseLockBackend, holder_metadata
from django_redis_lock.signals import lock_acquired, lock_lost, lock_released
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually, in_thread, queued

META = holder_metadata(host="h", pid=1, thread="t")


@pytest.mark.serial
@pytest.mark.needs("waiter_queue")
def test_handoff__a_waiter_acquires_promptly_after_each_release(
    using: str, backend: BaseLockBackend
) -> None:
    """Many handoffs between two threads: each far faster than a polling interval."""
    rounds, latencies, released_at = 40, [], [0.0]
    go, done = threading.Event(), threading.Event()

    def waiter() -> None:
        handle = lock("live:handoff", using=using, timeout=10)
        for _ in range(rounds):
            go.wait(10)
            go.clear()
            with handle:
                latencies.append(time.monotonic() - released_at[0])
            done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    holder = lock("live:handoff", using=using)
    for _ in range(rounds):
        holder.acquire()
        go.set()
        eventually(lambda: queued(backend, "live:handoff") == 1)  # the waiter is blocked
        released_at[0] = time.monotonic()
        holder.release()
        assert done.wait(10)
        done.clear()
    thread.join(10)
    assert len(latencies) == rounds
    # A 100 ms polling loop would give a median near 50 ms; a wake-up takes a round trip.
    assert statistics.median(latencies) < 0.02, latencies
    assert max(latencies) < 0.5, latencies


def test_waiting__is_not_a_polling_loop(raw_redis: redis_py.Redis) -> None:
    """A waiter blocked for a second sends a handful of commands, not one per poll."""
    with lock("live:nopoll"):
        raw_redis.config_resetstat()
        assert in_thread(lambda: lock("live:nopoll").acquire(timeout=1.0)) is False
        stats = raw_redis.info("commandstats")
    # Commands run inside scripts are counted too: look at what the client sent.
    sent = {k: v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_blpop")}
    assert sent == {"cmdstat_evalsha": 2, "cmdstat_blpop": 1}, stats


def test_timeout__a_waiter_that_gives_up_leaves_the_queue(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    with lock("live:giveup"):
        assert in_thread(lambda: lock("live:giveup").acquire(timeout=0.2)) is False
        assert raw_redis.exists(f"{prefix}:{{=live:giveup}}:q") == 0
        assert raw_redis.exists(f"{prefix}:{{=live:giveup}}:w") == 0
    left = sorted(k.decode() for k in raw_redis.scan_iter(match=f"{prefix}:*"))
    assert left == []


@pytest.mark.needs("waiter_queue")
def test_dead_waiter__holds_the_others_back_only_for_its_registration(
    using: str, backend: BaseLockBackend
) -> None:
    """A registered waiter that never comes (it died) is handed a short lease only."""
    holder = lock("live:ghost", using=using)
    holder.acquire()
    ghost = backend.acquire("live:ghost", "ghost", AcquireRequest(ttl=60, metadata=META, wait=0.3))
    assert not ghost.acquired
    holder.release()  # hands the lock to the ghost, with a lease of its registration + 1 s
    [info] = backend.lock_info("live:ghost")
    assert info.owner == "ghost"
    assert info.ttl <= 1.3 + 0.05
    started = time.monotonic()
    assert in_thread(lambda: lock("live:ghost", using=using).acquire(timeout=10))
    assert time.monotonic() - started < 3.0


@pytest.mark.needs("fair_order")
def test_fair__waiters_are_served_in_arrival_order(using: str, backend: BaseLockBackend) -> None:
    order: list[int] = []
    holder = lock("live:fifo", using=using, fair=True)
    holder.acquire()

    def waiter(number: int) -> None:
        with lock("live:fifo", using=using, fair=True, timeout=20):
            order.append(number)

    threads = []
    for number in range(5):
        threads.append(threading.Thread(target=waiter, args=(number,)))
        threads[-1].start()
        # Each waiter is registered before the next one starts.
        eventually(lambda n=number: queued(backend, "live:fifo") == n + 1)
    holder.release()
    for thread in threads:
        thread.join(20)
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.needs("fair_order")
def test_fair__a_newcomer_does_not_overtake_queued_waiters(
    using: str, backend: BaseLockBackend
) -> None:
    holder = lock("live:overtake", using=using, fair=True)
    holder.acquire()
    got = threading.Event()

    def waiter() -> None:
        with lock("live:overtake", using=using, fair=True, timeout=20):
            got.set()
            time.sleep(0.2)

    thread = threading.Thread(target=waiter)
    thread.start()
    eventually(lambda: queued(backend, "live:overtake") == 1)
    holder.release()
    got.wait(10)
    # The waiter holds it now; a fair newcomer cannot cut in.
    assert (
        in_thread(lambda: lock("live:overtake", using=using, fair=True).acquire(blocking=False))
        is False
    )
    thread.join(10)


@pytest.mark.needs("fair_order")
def test_fair__try_lock_is_not_refused_because_of_waiters_that_are_gone(
    using: str, backend: BaseLockBackend
) -> None:
    holder = lock("live:stale-queue", ttl=0.2, using=using, fair=True, auto_renew=False)
    holder.acquire()
    # A waiter registers for 50 ms and is never heard of again; then the lease just ends.
    backend.acquire(
        "live:stale-queue", "gone", AcquireRequest(ttl=5, metadata=META, fair=True, wait=0.05)
    )
    assert queued(backend, "live:stale-queue") == 1
    eventually(lambda: not holder.locked())
    newcomer = lock("live:stale-queue", using=using, fair=True)
    assert in_thread(lambda: newcomer.acquire(blocking=False)) is True
    assert queued(backend, "live:stale-queue") == 0


@pytest.mark.needs("semaphores")
def test_semaphore__limit_owners_hold_at_once(using: str) -> None:
    handles = [lock("live:sem", using=using, limit=3) for _ in range(4)]
    results = [in_thread(lambda h=h: h.acquire(blocking=False)) for h in handles]
    assert results == [True, True, True, False]
    assert len(list(locks[using].iter_locks("live:sem"))) == 3


@pytest.mark.needs("semaphores")
def test_semaphore__a_release_hands_the_slot_to_a_waiter(using: str) -> None:
    holders = [lock("live:sem-wait", using=using, limit=2) for _ in range(2)]
    barrier = threading.Barrier(3)
    done = threading.Event()

    def hold(handle: Any) -> None:
        handle.acquire()
        barrier.wait(5)
        done.wait(10)
        handle.release()

    threads = [threading.Thread(target=hold, args=(h,)) for h in holders]
    for thread in threads:
        thread.start()
    barrier.wait(5)
    third = lock("live:sem-wait", using=using, limit=2)
    assert third.acquire(blocking=False) is False
    done.set()
    assert third.acquire(timeout=10) is True
    third.release()
    for thread in threads:
        thread.join(10)


# Renewal -------------------------------------------------------------------------------------


def test_renewal__keeps_a_lock_held_past_several_lease_lengths(using: str) -> None:
    with lock("live:renew", ttl=0.3, using=using) as handle:
        time.sleep(1.2)  # four leases: only renewal keeps it
        assert handle.owned()
        assert not handle.lost
        assert in_thread(lambda: lock("live:renew", using=using).acquire(blocking=False)) is False
    assert not handle.locked()


def test_renewal__off_lets_the_lease_end(using: str) -> None:
    handle = lock("live:norenew", ttl=0.2, using=using, auto_renew=False)
    with pytest.raises(LockLostError), handle:
        eventually(lambda: not handle.locked())
    assert handle.lost


def test_renewal__stops_at_release_and_never_revives_the_lock(using: str) -> None:
    with lock("live:stop", ttl=0.3, using=using):
        pass
    time.sleep(0.4)
    assert not lock("live:stop", using=using).locked()
    assert all(lease.name != "live:stop" for lease in list(renewer._leases))


def test_renewal__closing_the_backend_while_it_renews_never_costs_a_lease(using: str) -> None:
    # override_settings(LOCKS=...) and locks.reset() close a backend whose locks other
    # threads may still hold: what a renewal is using is not closed under it.
    with lock("live:closed-under", ttl=0.3, using=using, raise_on_lost=False) as handle:
        until = time.monotonic() + 3  # ten leases, each renewed while being closed
        while time.monotonic() < until:
            locks[using].close()
            time.sleep(0.0005)
        assert not handle.lost, "closing the backend cost a renewal its lease"
        assert handle.owned()


def test_renewal__an_unforeseen_error_is_retried_later_and_the_lease_end_told(
    using: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Not a LockError: a client library's own failure (a socket closed under it, say). It
    # must neither spin the renewal thread nor keep the holder from hearing of its loss.
    calls: list[float] = []

    def failing(leases: Any) -> Any:
        calls.append(time.monotonic())
        raise ValueError("I/O operation on closed file.")

    handle = lock("live:unforeseen", ttl=0.6, using=using, raise_on_lost=False)
    with caplog.at_level(logging.WARNING, "django_redis_lock"), handle:
        monkeypatch.setattr(locks[using], "renew", failing)
        eventually(lambda: handle.lost, timeout=5)
    # Retried sooner as the lease's end nears (a third of what is left), never in a spin.
    assert 1 <= len(calls) <= 40, f"{len(calls)} renewals tried in {calls[-1] - calls[0]:.2f}s"
    assert "unexpectedly" in caplog.text
    assert "its lease ended while renewal failed: I/O operation on closed file." in caplog.text


def test_withdrawal__an_unforeseen_error_is_retried_until_the_late_hold_is_gone(
    using: str, backend: BaseLockBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An acquire whose reply never came may have taken the lock: its withdrawal must not be
    # given up on after one odd failure, or the hold outlives its owner's interest for a ttl.
    name = "live:late-hold"
    late = AcquireRequest(ttl=30, metadata=META, attempt="attempt-1")
    assert backend.acquire(name, "late-owner", late).acquired
    original, calls = backend.withdraw, []

    def failing_once(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise ValueError("I/O operation on closed file.")
        return original(*args)

    monkeypatch.setattr(backend, "withdraw", failing_once)
    until = time.monotonic() + 30
    renewer.withdraw_later(backend, name, "late-owner", "attempt-1", keep=lambda: 0, until=until)
    eventually(lambda: not backend.locked(name), timeout=5)
    assert len(calls) == 2


def test_renewal__one_round_trip_per_interval_for_many_locks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = locks["default"]
    calls: list[int] = []
    original = backend.renew

    def counting(leases: Any) -> Any:
        calls.append(len(leases))
        return original(leases)

    monkeypatch.setattr(backend, "renew", counting)
    handles = [lock(f"live:many:{n}", ttl=0.6, auto_renew=True) for n in range(200)]
    for handle in handles:
        assert handle.acquire()
    time.sleep(1.1)  # about five renewal intervals of 0.2 s
    assert all(handle.owned() for handle in handles[::20])
    for handle in handles:
        handle.release()
    assert 3 <= len(calls) <= 10, calls
    assert max(calls) == 200, "every lease of the backend renewed in one call"


def test_renewal__max_hold_ends_renewal_and_reports_the_loss(using: str) -> None:
    handle = lock("live:max-hold", ttl=0.2, max_hold=0.3, using=using)
    with pytest.raises(LockLostError, match="max_hold"), handle:
        eventually(lambda: handle.lost, timeout=5)
    assert not handle.locked()


def test_renewal__survives_dropped_connections(own_server: RedisServer) -> None:
    from django.test import override_settings

    setting = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": own_server.url, "socket_timeout": 1},
        }
    }
    with override_settings(LOCKS=setting):
        client = redis_py.Redis.from_url(own_server.url)
        with lock("live:reconnect", ttl=0.6) as handle:
            for _ in range(3):
                client.client_kill_filter(_type="normal", skipme=True)
                time.sleep(0.3)
            assert handle.owned()
            assert not handle.lost
        client.close()


# Lost leases are loud ------------------------------------------------------------------------


def test_lost__renewal_finds_the_lock_taken_and_reports_it(
    using: str, backend: BaseLockBackend, caplog: pytest.LogCaptureFixture
) -> None:
    lost_calls: list[Any] = []
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_lost.connect(receiver)
    handle = lock("live:stolen", ttl=0.3, using=using, on_lost=lost_calls.append)
    try:
        with caplog.at_level(logging.WARNING, "django_redis_lock"):
            with pytest.raises(LockLostError, match="another owner"), handle:
                backend.force_release("live:stolen")
                # The report's last step: the renewal thread marks the hold lost first, then
                # logs, signals and calls on_lost.
                eventually(lambda: lost_calls, timeout=5)
                with pytest.raises(LockLostError):
                    handle.check()
    finally:
        lock_lost.disconnect(receiver)
    assert lost_calls == [handle]
    assert len(received) == 1
    assert received[0]["name"] == "live:stolen"
    assert received[0]["held_for"] > 0
    assert "another owner" in received[0]["reason"]
    assert "live:stolen" in caplog.text
    assert "was lost" in caplog.text


def test_lost__raise_on_lost_false_only_warns(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    handle = lock("live:warn", ttl=0.1, using=using, auto_renew=False, raise_on_lost=False)
    with caplog.at_level(logging.WARNING, "django_redis_lock"), handle:
        eventually(lambda: not handle.locked())
    assert handle.lost
    assert "live:warn" in caplog.text


def test_check__without_renewal_asks_the_backend(using: str) -> None:
    handle = lock("live:check", ttl=0.2, using=using, auto_renew=False)
    handle.acquire()
    handle.check()
    eventually(lambda: not handle.locked())
    with pytest.raises(LockLostError):
        handle.check()
    with pytest.raises(LockNotOwnedError):
        handle.release()


def test_check__by_an_owner_that_holds_nothing_raises_not_owned(using: str) -> None:
    with pytest.raises(LockNotOwnedError):
        lock("live:check-none", using=using).check()


# Observability -------------------------------------------------------------------------------


def test_signals__acquired_and_released_carry_durations(using: str) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    def on_acquired(**kwargs: Any) -> None:
        events.append(("acquired", kwargs))

    def on_released(**kwargs: Any) -> None:
        events.append(("released", kwargs))

    lock_acquired.connect(on_acquired)
    lock_released.connect(on_released)
    try:
        with lock("live:signals", using=using) as handle:
            token = handle.fencing_token
            time.sleep(0.05)
    finally:
        lock_acquired.disconnect(on_acquired)
        lock_released.disconnect(on_released)
    [(first, acquired), (second, released)] = events
    assert (first, second) == ("acquired", "released")
    assert acquired["name"] == released["name"] == "live:signals"
    assert acquired["using"] == using
    assert acquired["fencing_token"] == released["fencing_token"] == token
    assert 0 <= acquired["waited"] < 1
    assert released["held_for"] >= 0.05
    assert acquired["lock"] is handle


def test_logging__debug_on_acquire_and_release_warning_on_timeout(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, "django_redis_lock"):
        with lock("live:logs", using=using):
            assert in_thread(lambda: lock("live:logs", using=using).acquire(timeout=0.1)) is False
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert any(level == "DEBUG" and "Acquired lock 'live:logs'" in m for level, m in records)
    assert any(level == "DEBUG" and "Released lock 'live:logs'" in m for level, m in records)
    assert any(
        level == "WARNING" and "Gave up acquiring lock 'live:logs'" in m for level, m in records
    )


def test_contention__leaves_nothing_behind(raw_redis: redis_py.Redis, prefix: str) -> None:
    """Queues, waiter records and wake-up lists all go once the waiting is over."""
    counts: list[int] = []

    def contend() -> None:
        handle, done = lock("live:tidy", timeout=10), 0
        for _ in range(30):
            with handle:
                done += 1
        counts.append(done)

    threads = [threading.Thread(target=contend) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert counts == [30] * 4
    left = sorted(k.decode() for k in raw_redis.scan_iter(match=f"{prefix}:*"))
    assert left == []


def test_signals__a_failing_receiver_is_logged_and_changes_nothing(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    lock_acquired.connect(broken)
    lock_released.connect(broken)
    try:
        with caplog.at_level(logging.ERROR, "django_redis_lock"), lock("live:broken", using=using):
            pass
    finally:
        lock_acquired.disconnect(broken)
        lock_released.disconnect(broken)
    assert not lock("live:broken", using=using).locked()
    assert caplog.text.count("A receiver of a lock signal failed") == 2


def test_signals__a_reentrant_acquire_is_announced_once(using: str) -> None:
    names: list[str] = []

    def on_acquired(**kwargs: Any) -> None:
        names.append(kwargs["name"])

    lock_acquired.connect(on_acquired)
    try:
        handle = lock("live:once", using=using)
        with handle, handle:
            pass
    finally:
        lock_acquired.disconnect(on_acquired)
    assert names == ["live:once"]


def test_logging__a_zero_timeout_refusal_is_no_warning(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "django_redis_lock"), lock("live:quiet", using=using):
        assert in_thread(lambda: lock("live:quiet", using=using).acquire(timeout=0)) is False
    assert caplog.text == ""


@pytest.mark.needs("waiter_queue")
def test_handoff__a_short_handed_over_lease_is_topped_up_to_the_full_lease(
    using: str, backend: BaseLockBackend
) -> None:
    holder = lock("live:top-up", ttl=30, using=using)
    holder.acquire()
    waiter = lock("live:top-up", ttl=30, using=using, timeout=10)  # acquire(): no renewal
    thread = threading.Thread(target=waiter.acquire)
    thread.start()
    eventually(lambda: queued(backend, "live:top-up") == 1)
    holder.release()  # handed over with a lease of the waiter's registration + 1 s only
    thread.join(10)
    [info] = backend.lock_info("live:top-up")
    eventually(lambda: backend.ttl("live:top-up", info.owner) > 25)
    backend.force_release("live:top-up")


def test_renewal__a_reentrant_acquire_of_a_lost_hold_is_refused_and_stops_its_renewal(
    using: str, backend: BaseLockBackend
) -> None:
    before = len(renewer)
    handle = lock("live:replaced", ttl=30, auto_renew=True, using=using)
    assert handle.acquire()
    backend.force_release("live:replaced")  # lost, while the handle still records the hold
    with pytest.raises(LockLostError):
        handle.acquire()  # never a new hold silently standing in for the lost one
    assert handle.lost
    assert len(renewer) == before, "the lost hold's lease is still being renewed"
    assert backend.lock_info("live:replaced") == [], "the refused acquire took a hold"
    with pytest.raises(LockNotOwnedError):
        handle.release()
    assert handle.acquire(), "after the lost hold is released, a new one can be taken"
    assert len(renewer) == before + 1
    handle.release()
    assert len(renewer) == before
