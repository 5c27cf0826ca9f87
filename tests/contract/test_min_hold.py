"""``min_hold``: a lock stays held until that long after its acquire, even after a release.

Every test here runs on every backend (see conftest.py). Windows are short (1 to 1.5 s) and
every bound has a margin of a quarter second or more: a window is measured on the backend's
clock from the acquire, which happens between the two client times a test knows of.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis as redis_py
from django.conf import settings

from django_redis_lock import (
    InvalidLockArgumentError,
    LockArgumentTypeError,
    alock,
    lock,
)
from django_redis_lock._core.owner import current_owner
from django_redis_lock.backends.base import (
    MIN_HOLD_PREFIX,
    AcquireRequest,
    BaseLockBackend,
    LockInfo,
    ReleaseRequest,
    holder_metadata,
)
from tests.support import fault_workers
from tests.support.clock import Clock
from tests.support.helpers import eventually, in_thread

META = holder_metadata(host="h", pid=1, thread="t")

#: Margin of every bound on when a window ends, in seconds.
MARGIN = 0.25


def sleep_until(clock: Clock, moment: float) -> None:
    """Sleep until ``clock`` reads ``moment``: the tests here are about time.

    On LocMem, ``clock`` is the backend's own (conftest.py): it moves there at once.
    """
    clock.sleep(max(0.0, moment - clock.monotonic()))


def try_other(name: str, using: str) -> bool:
    """Try once to take ``name`` as another owner (a thread of its own); release it if taken."""

    def attempt() -> bool:
        handle = lock(name, using=using, blocking=False)
        if handle.acquire():
            handle.release()
            return True
        return False

    return in_thread(attempt)


def holders(backend: BaseLockBackend, name: str) -> list[LockInfo]:
    return backend.lock_info(name)


def test_min_hold__another_owner_is_refused_until_the_window_ends(
    using: str, backend: BaseLockBackend, clock: Clock
) -> None:
    before = clock.monotonic()
    with lock("minhold:other", using=using, min_hold=1.5):
        acquired = clock.monotonic()
        clock.sleep(0.1)
    assert try_other("minhold:other", using) is False  # released, and still held
    sleep_until(clock, before + 1.0)
    assert try_other("minhold:other", using) is False
    sleep_until(clock, acquired + 1.5 + MARGIN)
    assert try_other("minhold:other", using) is True
    assert holders(backend, "minhold:other") == []


@pytest.mark.serial
def test_min_hold__the_listing_shows_the_window_held_by_nobody(
    using: str, backend: BaseLockBackend
) -> None:
    handle = lock("minhold:listed", using=using, min_hold=1.5, metadata={"job": "nightly"})
    with handle:
        token, owner = handle.fencing_token, current_owner()
        (live,) = holders(backend, "minhold:listed")
    assert live.min_hold_of is None
    (kept,) = holders(backend, "minhold:listed")
    assert kept.owner == MIN_HOLD_PREFIX + owner
    assert kept.min_hold_of == owner
    assert (kept.holds, kept.fencing_token) == (0, token)
    # The same record moved (Redlock lists one master's copy, which may differ by a few ms).
    assert abs((kept.acquired_at - live.acquired_at).total_seconds()) < 0.05
    assert (kept.metadata, kept.thread) == ({"job": "nightly"}, live.thread)
    # Measured from the acquire, not from the release.
    assert 0.5 < kept.ttl <= 1.5
    assert not handle.owned()
    assert handle.locked()
    assert 0 < (handle.ttl() or 0) <= 1.5


def test_min_hold__the_same_owner_cannot_take_it_again_within_the_window(
    using: str, clock: Clock
) -> None:
    handle = lock("minhold:same", using=using, min_hold=1.0)
    with handle:
        acquired = clock.monotonic()
    assert handle.acquire(blocking=False) is False
    assert lock("minhold:same", using=using).acquire(blocking=False) is False
    sleep_until(clock, acquired + 1.0 + MARGIN)
    assert handle.acquire(blocking=False) is True
    handle.release()  # a new hold, and a new window
    assert lock("minhold:same", using=using).acquire(blocking=False) is False


def test_min_hold__a_release_after_the_window_frees_the_lock_at_once(
    using: str, backend: BaseLockBackend, clock: Clock
) -> None:
    with lock("minhold:late", using=using, min_hold=0.2):
        clock.sleep(0.2 + MARGIN)
    assert holders(backend, "minhold:late") == []
    assert try_other("minhold:late", using) is True


def test_min_hold__zero_frees_the_lock_at_once(using: str, backend: BaseLockBackend) -> None:
    with lock("minhold:zero", using=using, min_hold=0):
        pass
    assert holders(backend, "minhold:zero") == []


def test_min_hold__the_window_outlasts_a_shorter_lease(
    using: str, backend: BaseLockBackend, clock: Clock
) -> None:
    """The window is kept by a holder that lives to release; a lease shorter than it is not."""
    with lock("minhold:short", using=using, ttl=0.5, min_hold=1.2, auto_renew=False):
        acquired = clock.monotonic()
    sleep_until(clock, acquired + 0.5 + MARGIN)
    (kept,) = holders(backend, "minhold:short")
    assert kept.min_hold_of is not None
    sleep_until(clock, acquired + 1.2 + MARGIN)
    assert try_other("minhold:short", using) is True


def test_min_hold__a_blocking_waiter_gets_the_lock_when_the_window_ends(using: str) -> None:
    with lock("minhold:wait", using=using, min_hold=1.0):
        acquired = time.monotonic()
    got: list[float] = []

    def wait() -> None:
        with lock("minhold:wait", using=using, timeout=5):
            got.append(time.monotonic())

    in_thread(wait)
    assert acquired + 1.0 - 0.05 <= got[0] <= acquired + 1.0 + MARGIN + 0.05


def test_min_hold__a_waiter_queued_before_the_release_gets_nothing_until_the_window_ends(
    using: str,
) -> None:
    """The release hands nothing over; the waiter takes the lock once the window has ended."""
    holder = lock("minhold:queued", using=using, min_hold=1.0)
    holder.acquire()
    acquired, got = time.monotonic(), list[float]()
    waiting = threading.Event()

    def wait() -> None:
        handle = lock("minhold:queued", using=using, timeout=10)
        waiting.set()
        with handle:
            got.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    waiting.wait(5)
    time.sleep(0.1)
    holder.release()
    thread.join(15)
    # A wait under way at the release ends at its own time, at most two seconds (WAIT_SLICE).
    assert acquired + 1.0 - 0.05 <= got[0] <= acquired + 1.0 + 2.0 + MARGIN


def test_min_hold__fencing_tokens_still_grow(using: str, clock: Clock) -> None:
    handle = lock("minhold:fence", using=using, min_hold=1.0)
    with handle:
        first = handle.fencing_token
        acquired = clock.monotonic()
    sleep_until(clock, acquired + 1.0 + MARGIN)
    with lock("minhold:fence", using=using) as again:
        assert first is not None
        assert again.fencing_token is not None
        assert again.fencing_token > first


def test_min_hold__only_the_last_release_of_a_reentrant_hold_keeps_the_window(
    using: str, backend: BaseLockBackend
) -> None:
    handle = lock("minhold:nested", using=using, min_hold=1.5)
    with handle:
        with handle, lock("minhold:nested", using=using, min_hold=1.5):
            pass
        (info,) = holders(backend, "minhold:nested")
        assert (info.owner, info.min_hold_of, info.holds) == (current_owner(), None, 1)
        assert handle.owned()
    (kept,) = holders(backend, "minhold:nested")
    assert kept.min_hold_of == current_owner()
    assert not handle.owned()


def test_min_hold__the_last_release_applies_its_own_handles_window(
    using: str, backend: BaseLockBackend
) -> None:
    """An inner handle's min_hold applies when its release is not the last: never."""
    with lock("minhold:inner", using=using), lock("minhold:inner", using=using, min_hold=5):
        pass
    assert holders(backend, "minhold:inner") == []


def test_min_hold__force_release_frees_the_window(using: str, backend: BaseLockBackend) -> None:
    with lock("minhold:force", using=using, min_hold=30):
        pass
    (kept,) = holders(backend, "minhold:force")
    assert backend.force_release("minhold:force", owner=kept.owner) == 1
    assert try_other("minhold:force", using) is True
    with lock("minhold:force", using=using, min_hold=30):
        pass
    assert backend.force_release("minhold:force") == 1
    assert holders(backend, "minhold:force") == []


def test_min_hold__a_backend_release_by_owner_token_keeps_the_window(
    using: str, backend: BaseLockBackend
) -> None:
    """What a Celery worker's main process does for the run its dead child held."""
    owner = "celery:" + "ab" * 16
    taken = backend.acquire("minhold:token", owner, AcquireRequest(ttl=30, metadata=META))
    assert taken.acquired
    assert backend.release("minhold:token", owner, ReleaseRequest(holds=1, min_hold=1.0)) == 0
    (kept,) = holders(backend, "minhold:token")
    assert (kept.owner, kept.min_hold_of) == (MIN_HOLD_PREFIX + owner, owner)
    again = backend.acquire("minhold:token", owner, AcquireRequest(ttl=30, metadata=META))
    assert not again.acquired
    assert again.retry_after is not None
    assert again.retry_after <= 1.0
    # Nobody may release or extend the window: its owner is no longer the holder.
    assert backend.release("minhold:token", owner) is None
    assert backend.extend("minhold:token", owner, 10) is None
    eventually(lambda: holders(backend, "minhold:token") == [], timeout=1.0 + MARGIN + 0.5)
    assert backend.acquire("minhold:token", owner, AcquireRequest(ttl=30, metadata=META)).acquired
    assert backend.release("minhold:token", owner, ReleaseRequest(holds=1)) == 0
    assert holders(backend, "minhold:token") == []


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (-1, InvalidLockArgumentError, "min_hold must be a finite number of seconds >= 0"),
        (float("nan"), InvalidLockArgumentError, "min_hold must be a finite number"),
        (float("inf"), InvalidLockArgumentError, "min_hold must be a finite number"),
        (1e18, InvalidLockArgumentError, "min_hold must be at most 315360000 seconds"),
        ("3", LockArgumentTypeError, "min_hold must be a number of seconds, not str: '3'."),
        (True, LockArgumentTypeError, "min_hold must be a number of seconds, not bool"),
        (None, LockArgumentTypeError, "min_hold must be a number of seconds, not NoneType"),
    ],
)
def test_min_hold__bad_values_are_refused(
    value: Any, error: type[Exception], message: str
) -> None:
    for make in (lock, alock):
        with pytest.raises(error) as caught:
            make("minhold:bad", min_hold=value)
        assert message in str(caught.value)
        assert isinstance(caught.value, ValueError)


def test_min_hold__is_refused_with_a_semaphore() -> None:
    with pytest.raises(InvalidLockArgumentError, match="min_hold cannot be given to a lock with"):
        lock("minhold:sem", limit=2, min_hold=1)


def test_min_hold__an_owner_token_of_the_window_holders_is_refused() -> None:
    with pytest.raises(InvalidLockArgumentError, match="owner must not start with 'min_hold:'"):
        lock("minhold:owner", owner=MIN_HOLD_PREFIX + "abc")


# A holder that dies keeps no window: its lease ends as it would have ------------------------


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.needs("processes")
def test_min_hold__a_killed_holder_frees_the_lock_when_its_lease_ends(
    using: str, redis_url: str, prefix: str, backend: BaseLockBackend
) -> None:
    child = multiprocessing.get_context("spawn").Process(
        target=fault_workers.hold_with_min_hold,
        args=(settings.LOCKS, using, redis_url, prefix, "minhold:killed", 1.0, 30.0),
        daemon=True,
    )
    child.start()
    client = redis_py.Redis.from_url(redis_url, socket_timeout=None)
    try:
        assert client.blpop([f"{prefix}:holding"], timeout=60) is not None
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        child.join(10)
        (info,) = holders(backend, "minhold:killed")
        assert info.min_hold_of is None  # killed before it released: no window
        eventually(lambda: try_other("minhold:killed", using), timeout=5)
        # Renewed every third of its 1 s lease while it lived: free within that lease.
        assert time.monotonic() - killed < 1.0 + MARGIN + 0.5
    finally:
        client.close()


# The asyncio twin ----------------------------------------------------------------------------


@pytest.mark.serial
async def test_min_hold__asyncio__other_tasks_and_the_same_task_wait_for_the_window(
    using: str, backend: BaseLockBackend
) -> None:
    handle = alock("minhold:async", using=using, min_hold=1.0)
    async with handle:
        acquired = time.monotonic()
        token = handle.fencing_token
    assert await handle.acquire(blocking=False) is False  # the same task

    async def other() -> bool:
        attempt = alock("minhold:async", using=using, blocking=False)
        if await attempt.acquire():
            await attempt.release()
            return True
        return False

    assert await asyncio.create_task(other()) is False
    (kept,) = await asyncio.to_thread(holders, backend, "minhold:async")
    assert (kept.fencing_token, kept.holds) == (token, 0)
    assert kept.min_hold_of is not None
    async with alock("minhold:async", using=using, timeout=5) as again:
        waited = time.monotonic()
        assert again.fencing_token is not None
        assert token is not None
        assert again.fencing_token > token
    assert acquired + 1.0 - 0.05 <= waited <= acquired + 1.0 + MARGIN + 0.05
    assert await asyncio.create_task(other()) is True
