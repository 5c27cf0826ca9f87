"""Redlock over three real masters while one or two of them are frozen (SIGSTOP)."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, lock, locks
from django_redis_lock._core.owner import new_attempt
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.backends.redlock import RedlockBackend
from django_redis_lock.testing import RedisServer
from django_redis_lock.testing.topologies import IndependentMasters
from tests.support.helpers import eventually

pytestmark = pytest.mark.slow

BACKEND = "django_redis_lock.backends.redlock.RedlockBackend"


@pytest.fixture
def masters() -> Iterator[list[RedisServer]]:
    with IndependentMasters(3) as independent:
        yield independent.servers


@pytest.fixture
def redlock(masters: list[RedisServer], prefix: str) -> Iterator[RedlockBackend]:
    """A 'default' Redlock alias; each master answers or fails within 2s."""
    options = {
        "urls": [server.url for server in masters],
        "key_prefix": prefix,
        "socket_timeout": 2,
        "socket_connect_timeout": 2,
    }
    with override_settings(LOCKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        backend = locks["default"]
        assert isinstance(backend, RedlockBackend)
        with lock("fault:warm-up", ttl=1):  # every master has loaded the scripts
            pass
        yield backend


def holders(server: RedisServer, redlock: RedlockBackend, name: str) -> list[bytes]:
    client = redis_py.Redis.from_url(server.url)
    try:
        return list(client.hkeys(redlock.nodes[0].key(name)))
    finally:
        client.close()


@pytest.mark.serial
def test_one_master_frozen__calls_return_once_a_majority_answered(
    masters: list[RedisServer], redlock: RedlockBackend
) -> None:
    masters[2].pause()
    try:
        slowest = 0.0
        for round_ in range(10):
            started = time.monotonic()
            with lock(f"fault:quorum:{round_}", ttl=10, auto_renew=False):
                pass
            slowest = max(slowest, time.monotonic() - started)
        # Each acquire and release settles with two masters: never the frozen one's 2s.
        assert slowest < 0.5, f"an acquire and release took {slowest:.3f}s"
    finally:
        masters[2].resume()


def test_two_masters_frozen__a_failed_acquire_holds_nothing_once_they_answer(
    masters: list[RedisServer], redlock: RedlockBackend
) -> None:
    name = "fault:late"
    handle = lock(name, ttl=30)
    masters[1].pause()
    masters[2].pause()
    try:
        with pytest.raises(BackendUnavailableError):
            handle.acquire()
    finally:
        masters[1].resume()
        masters[2].resume()
    time.sleep(0.5)  # the frozen masters now run what was queued for them
    assert [holders(server, redlock, name) for server in masters] == [[], [], []], (
        "a failed acquire left holds on the masters that ran it late"
    )
    other = lock(name, ttl=30, owner="other")
    assert other.acquire(blocking=False), "the failed owner still holds a majority"
    other.release()


@pytest.mark.xfail(
    reason="known: the holder takes the largest token among the grants before the majority, the "
    "listing the largest among all masters; taking the least instead let a hold taken over by "
    "its owner repeat the token of the hold before it, so the fix is still to be found",
    strict=True,
)
def test_one_master_late__the_listing_shows_the_token_the_holder_has(
    masters: list[RedisServer], prefix: str
) -> None:
    # The late master's counter runs an hour ahead of the others', so its token is the
    # largest; it runs the acquire only after the majority answered, and holds it all the same.
    name = "fault:late-token"
    urls = [server.url for server in masters]
    options = {"urls": urls, "key_prefix": prefix, "fencing_ttl": 60, "socket_timeout": 2}
    with override_settings(LOCKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        backend = locks["default"]
        assert isinstance(backend, RedlockBackend)
        with lock("fault:warm-up", ttl=1):
            pass
        late = redis_py.Redis.from_url(masters[2].url)
        try:
            seconds, micros = late.time()
            late.set(backend.nodes[2].key(name, "f"), (seconds + 3600) * 10**6 + micros, px=60_000)
            masters[2].pause()
            try:
                handle = lock(name, ttl=30, owner="holder")
                assert handle.acquire(blocking=False)
                token = handle.fencing_token
            finally:
                masters[2].resume()
            eventually(lambda: bool(late.hexists(backend.nodes[2].key(name), "holder")))
            (info,) = backend.lock_info(name)
            (listed,) = backend.iter_locks(name)
            handle.release()
        finally:
            late.close()
    assert info.fencing_token == listed.fencing_token == token


def test_an_earlier_try_run_late__its_withdrawal_leaves_the_later_hold(
    redlock: RedlockBackend,
) -> None:
    # A try that failed, and is owed its withdrawal, can reach a master after the owner's next
    # try took the lock there (it waited in a socket, or for its thread on a loaded machine);
    # the withdrawal comes after it. Here a majority of the masters run the two that way.
    name = "fault:late-try"
    earlier = AcquireRequest(ttl=30, metadata="{}", attempt=f"{new_attempt()}~0")
    with lock(name, ttl=30, owner="holder") as handle:
        for node in redlock.nodes[:2]:
            node.acquire(name, "holder", earlier)
            node.withdraw(name, "holder", 0, earlier.attempt)
        assert handle.locked()
    assert not handle.lost


def run_first_call_late(
    monkeypatch: pytest.MonkeyPatch, node: object, method: str, seconds: float
) -> threading.Event:
    """Make the first ``method`` call on ``node`` start ``seconds`` late, as when its thread
    waits for a core on a loaded machine; return an event set once that call has run."""
    original, ran, calls = getattr(node, method), threading.Event(), itertools.count()

    def late(*args: object, **kwargs: object) -> object:
        if next(calls):  # not the first
            return original(*args, **kwargs)
        time.sleep(seconds)
        try:
            return original(*args, **kwargs)
        finally:
            ran.set()

    monkeypatch.setattr(node, method, late)
    return ran


def test_a_release_run_late__never_frees_the_owners_next_hold(
    redlock: RedlockBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The release is settled by the two masters that answered; the third runs it late. The
    # owner's next acquire must reach that master after it, not overtake it and be freed by
    # it: else the owner holds one master fewer than it counts on, without being told.
    name = "fault:late-release"
    handle = lock(name, ttl=30, owner="holder")
    handle.acquire()
    eventually(lambda: all(node.ttl(name, "holder") for node in redlock.nodes))
    ran = run_first_call_late(monkeypatch, redlock.nodes[0], "release", 0.3)
    handle.release()
    handle.acquire()
    assert ran.wait(5)
    eventually(lambda: all(node.ttl(name, "holder") for node in redlock.nodes))
    time.sleep(0.2)  # nothing late is left to free it
    assert [bool(node.ttl(name, "holder")) for node in redlock.nodes] == [True] * 3
    handle.release()
    assert not handle.locked()


def test_an_acquire_run_late__the_next_reentry_counts_on_it_on_every_master(
    redlock: RedlockBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first acquire is settled by two masters; the third runs it late. A reentrant
    # acquire must reach that master after it: each master counts two holds.
    name = "fault:late-acquire"
    ran = run_first_call_late(monkeypatch, redlock.nodes[0], "acquire", 0.3)
    request = AcquireRequest(ttl=30, metadata="{}")
    assert redlock.acquire(name, "holder", request).acquired
    assert redlock.acquire(name, "holder", request).holds == 2
    assert ran.wait(5)
    time.sleep(0.2)  # the reentry has reached that master too
    assert [[i.holds for i in node.lock_info(name)] for node in redlock.nodes] == [[2]] * 3
    assert redlock.release(name, "holder") == 1
    assert redlock.release(name, "holder") == 0
    assert not redlock.locked(name)


@pytest.fixture
def quick_redlock(masters: list[RedisServer], prefix: str) -> Iterator[RedlockBackend]:
    """A 'default' Redlock alias with the default per-master timeouts (0.2s)."""
    options = {"urls": [server.url for server in masters], "key_prefix": prefix}
    with override_settings(LOCKS={"default": {"BACKEND": BACKEND, "OPTIONS": options}}):
        backend = locks["default"]
        assert isinstance(backend, RedlockBackend)
        # Two connections to every master, opened before the freeze: an acquire sent on one
        # reaches the frozen master's socket, and runs when it resumes.
        with lock("fault:warm-up", ttl=1), lock("fault:warm-up:2", ttl=1):
            pass
        yield backend


@pytest.mark.parametrize("blocking", [False, True], ids=["try-lock", "blocking"])
def test_two_masters_frozen__failed_acquires_are_withdrawn_when_they_resume(
    masters: list[RedisServer], quick_redlock: RedlockBackend, blocking: bool
) -> None:
    name = "fault:resume"
    handle = lock(name, ttl=10)
    masters[1].pause()
    masters[2].pause()
    try:
        for _ in range(5):
            with pytest.raises(BackendUnavailableError):
                handle.acquire(blocking=blocking, timeout=1 if blocking else None)
    finally:
        masters[1].resume()
        masters[2].resume()
        resumed = time.monotonic()
    other = lock(name, ttl=10, owner="other")
    assert other.acquire(timeout=1.5), (
        "the failed owner held a majority after the frozen masters resumed"
    )
    waited = time.monotonic() - resumed
    other.release()
    assert waited < 1.5


def test_fork_while_a_lane_holds_its_lock__the_child_still_withdraws(
    masters: list[RedisServer], quick_redlock: RedlockBackend
) -> None:
    # A worker's main process forks children while its Redlock threads run; a child forked
    # while a withdrawal lane (or a master's thread) held a lock must not inherit it held.
    name = "fault:fork"
    masters[1].pause()
    masters[2].pause()
    try:
        with pytest.raises(BackendUnavailableError):
            lock(name, ttl=10).acquire(blocking=False)  # the parent's lanes now run
        taken, done = threading.Event(), threading.Event()

        def hold(inner: threading.Lock) -> None:
            with inner:  # as a lane or a master's thread holds it, briefly, at any moment
                taken.set()
                done.wait(10)

        holders_ = [
            threading.Thread(target=hold, args=(inner,))
            for inner in (quick_redlock._withdrawals._lock, quick_redlock._masters._lock)
        ]
        for thread in holders_:
            taken.clear()
            thread.start()
            assert taken.wait(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            pid = os.fork()
        if pid == 0:  # the child: a failed try must return, and owe its withdrawals
            code = 1
            try:
                lock(name, ttl=10, owner="child").acquire(blocking=False)
            except BackendUnavailableError:
                code = 0
            finally:
                os._exit(code)
        done.set()
        for thread in holders_:
            thread.join()
        deadline = time.monotonic() + 10
        while (status := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child hung on a lock its parent's thread held")
            time.sleep(0.05)
        assert os.waitstatus_to_exitcode(status[1]) == 0
    finally:
        masters[1].resume()
        masters[2].resume()
