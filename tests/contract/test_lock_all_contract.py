"""lock_all / alock_all: several names held together, on every backend (see conftest.py).

Another owner is another thread (or asyncio task) of this process, as in the lock contract;
tests/backends/test_lock_all_processes.py has the same rules between processes.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest

from django_redis_lock import (
    AsyncMultiLock,
    InvalidLockArgumentError,
    Lock,
    LockArgumentTypeError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
    MultiLock,
    alock,
    alock_all,
    lock,
    lock_all,
    locks,
)
from django_redis_lock.signals import lock_acquired
from tests.support.helpers import aeventually, eventually, in_thread

NAMES = ["all:c", "all:a", "all:b"]


def held_names(using: str, names: list[str]) -> set[str]:
    return {name for name in names if lock(name, using=using).locked()}


class OtherOwner:
    """Another thread holding ``names`` until told, and releasing the first ones when told."""

    def __init__(self, using: str, *names: str) -> None:
        self.names, self.using = names, using
        self.holding, self.release_first, self.done = (threading.Event() for _ in range(3))
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.holding.wait(10)

    def _run(self) -> None:
        handles = [lock(name, using=self.using, ttl=30) for name in self.names]
        for handle in handles:
            assert handle.acquire()
        self.holding.set()
        self.release_first.wait(30)
        handles[0].release()
        self.done.wait(30)
        for handle in handles[1:]:
            handle.release()

    def stop(self) -> None:
        self.release_first.set()
        self.done.set()
        self.thread.join(30)


# Acquiring and releasing ---------------------------------------------------------------------


def test_lock_all__holds_every_name_and_release_frees_them_all(using: str) -> None:
    multi = lock_all([*NAMES, "all:a"], using=using)
    assert isinstance(multi, MultiLock)
    assert multi.names == ("all:a", "all:b", "all:c")
    assert multi.acquire() is True
    assert held_names(using, NAMES) == set(NAMES)
    assert multi.owned()
    assert multi.locked()
    assert in_thread(lambda: lock("all:b", using=using).acquire(blocking=False)) is False
    multi.release()
    assert held_names(using, NAMES) == set()
    assert not multi.owned()
    assert not multi.locked()
    assert multi.fencing_tokens == {}


def test_lock_all__with_block_holds_then_frees(using: str) -> None:
    with lock_all(NAMES, using=using) as multi:
        assert held_names(using, NAMES) == set(NAMES)
        assert multi.owned()
    assert held_names(using, NAMES) == set()


def test_lock_all__a_name_held_elsewhere_leaves_nothing_held(using: str) -> None:
    other = OtherOwner(using, "all:c")  # the last name in order: a and b are taken first
    try:
        multi = lock_all(NAMES, using=using)
        assert multi.acquire(blocking=False) is False
        assert held_names(using, NAMES) == {"all:c"}
        assert multi.acquire(timeout=0.2) is False
        assert held_names(using, NAMES) == {"all:c"}
        assert multi.fencing_tokens == {}
        with pytest.raises(LockNotAcquiredError) as caught:
            with lock_all(NAMES, using=using, blocking=False):
                pytest.fail("the block must not run without every name")
        assert caught.value.lock_name == "all:c"
        assert "'all:c'" in str(caught.value)
        assert held_names(using, NAMES) == {"all:c"}
    finally:
        other.stop()
    assert held_names(using, NAMES) == set()


@pytest.mark.serial
def test_lock_all__the_timeout_bounds_the_whole_acquisition(using: str) -> None:
    # a is freed after 0.6 s, c never: one timeout per name would wait 0.6 + 0.8 s.
    other = OtherOwner(using, "all:a", "all:c")
    try:
        threading.Timer(0.6, other.release_first.set).start()
        started = time.monotonic()
        assert lock_all(NAMES, using=using, timeout=0.8).acquire() is False
        elapsed = time.monotonic() - started
        assert 0.8 <= elapsed < 1.25
        assert held_names(using, NAMES) == {"all:c"}
    finally:
        other.stop()


def test_lock_all__waits_for_every_name_then_holds_them(using: str) -> None:
    other = OtherOwner(using, "all:b", "all:c")
    try:
        threading.Timer(0.2, other.stop).start()
        with lock_all(NAMES, using=using, timeout=10) as multi:
            assert multi.owned()
    finally:
        other.stop()


def test_lock_all__a_lease_that_ends_while_waiting_for_the_rest_is_taken_again(
    using: str,
) -> None:
    # acquire() does not renew: a's lease (0.4 s) ends while c is held for 1 s more.
    other = OtherOwner(using, "all:c")
    threading.Timer(1.0, other.stop).start()
    told: list[object] = []
    multi = lock_all(NAMES, using=using, ttl=0.4, on_lost=told.append)
    assert multi.acquire(timeout=10)
    try:
        multi.check()  # every name is held now, with a lease that has not ended
        assert not multi.lost
    finally:
        multi.release()
    other.stop()
    assert told == [], "a lease that ended before the acquisition succeeded is no loss of it"


def test_lock_all__an_error_while_acquiring_gives_back_what_was_taken(using: str) -> None:
    multi = lock_all(NAMES, using=using)

    def interrupted(*args: Any) -> bool:
        raise KeyboardInterrupt

    multi.locks[2]._acquire = interrupted  # type: ignore[method-assign]
    other = OtherOwner(using, "all:c")  # so the names are taken one by one
    try:
        with pytest.raises(KeyboardInterrupt):
            multi.acquire()
        assert held_names(using, NAMES) == {"all:c"}
    finally:
        other.stop()
    assert held_names(using, NAMES) == set()


def test_lock_all__release_twice_raises_not_owned_naming_the_locks(using: str) -> None:
    multi = lock_all(NAMES, using=using)
    multi.acquire()
    multi.release()
    with pytest.raises(LockNotOwnedError) as caught:
        multi.release()
    assert "['all:a', 'all:b', 'all:c']" in str(caught.value)


def test_lock_all__is_reentrant_per_name(using: str) -> None:
    multi = lock_all(NAMES, using=using)
    assert multi.acquire()
    assert multi.acquire()
    multi.release()
    assert multi.owned()
    multi.release()
    assert held_names(using, NAMES) == set()


def test_lock_all__fencing_tokens_per_name_grow_with_each_holder(using: str) -> None:
    multi = lock_all(NAMES, using=using)
    with multi:
        first = multi.fencing_tokens
        assert sorted(first) == sorted(NAMES)
        assert first["all:a"] == multi.locks[0].fencing_token
    with lock("all:b", using=using) as single:
        between = single.fencing_token
    assert between is not None
    assert between > first["all:b"]
    with multi:
        again = multi.fencing_tokens
    assert all(again[name] > first[name] for name in NAMES)
    assert again["all:b"] > between


def test_lock_all__overlapping_sets_in_threads_never_deadlock_or_overlap(using: str) -> None:
    names = [f"all:t{n}" for n in range(4)]
    inside: Counter[str] = Counter()
    overlaps: list[str] = []
    guard = threading.Lock()

    def worker(seed: int) -> int:
        chooser, done = random.Random(seed), 0
        for _ in range(15):
            chosen = chooser.sample(names, chooser.randint(2, 3))
            with lock_all(chosen, using=using, timeout=20):
                with guard:
                    inside.update(chosen)
                    overlaps.extend(n for n in chosen if inside[n] > 1)
                time.sleep(0.002)
                with guard:
                    inside.subtract(chosen)
            done += 1
        return done

    results: list[int] = []
    threads = [threading.Thread(target=lambda s=s: results.append(worker(s))) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [15] * 4
    assert overlaps == []


def test_lock_all__decorates_a_function_holding_every_name(using: str) -> None:
    @lock_all(NAMES, using=using)
    def work(amount: int, *, twice: bool = False) -> tuple[set[str], int]:
        return held_names(using, NAMES), amount * (2 if twice else 1)

    assert work(3, twice=True) == (set(NAMES), 6)
    assert work.__name__ == "work"
    assert held_names(using, NAMES) == set()


# Loss --------------------------------------------------------------------------------------


def test_lock_all__losing_one_name_is_losing_the_multi_lock(using: str) -> None:
    told: list[object] = []
    multi = lock_all(NAMES, using=using, auto_renew=False, on_lost=told.append)
    assert multi.acquire()
    multi.check()
    assert not multi.lost
    locks[using].force_release("all:b")
    with pytest.raises(LockLostError) as caught:
        multi.check()
    assert caught.value.lock_name == "all:b"
    assert "['all:b']" in str(caught.value)
    assert multi.lost
    locks[using].force_release("all:c")
    with pytest.raises(LockLostError):
        multi.check()
    assert told == [multi], "on_lost is called once, for the first name lost"
    with pytest.raises(LockNotOwnedError) as not_owned:
        multi.release()
    assert "['all:b', 'all:c']" in str(not_owned.value)
    assert held_names(using, NAMES) == set(), "the names still held are released all the same"


def test_lock_all__a_loss_found_by_renewal_raises_at_the_end_of_the_block(using: str) -> None:
    told: list[object] = []
    with pytest.raises(LockLostError) as caught:
        with lock_all(NAMES, using=using, ttl=0.3, on_lost=told.append) as multi:
            locks[using].force_release("all:a")
            eventually(lambda: multi.lost, 5)
            eventually(lambda: told == [multi], 5)
    assert caught.value.lock_name == "all:a"
    assert held_names(using, NAMES) == set()
    assert told == [multi]


def test_lock_all__raise_on_lost_false_only_reports(using: str) -> None:
    with lock_all(NAMES, using=using, auto_renew=False, raise_on_lost=False) as multi:
        locks[using].force_release("all:c")
        with pytest.raises(LockLostError):
            multi.check()
    assert multi.lost
    assert held_names(using, NAMES) == set()


def test_lock_all__a_failed_acquisition_reports_no_loss(using: str) -> None:
    told: list[object] = []
    other = OtherOwner(using, "all:c")
    try:
        assert not lock_all(NAMES, using=using, on_lost=told.append).acquire(timeout=0.1)
    finally:
        other.stop()
    time.sleep(0.2)
    assert told == []


def test_lock_all__each_name_is_signalled_as_a_lock(using: str) -> None:
    senders: list[tuple[object, str]] = []

    def receiver(sender: object, name: str, **kwargs: Any) -> None:
        senders.append((sender, name))

    lock_acquired.connect(receiver, sender=Lock)
    try:
        with lock_all(NAMES, using=using):
            pass
    finally:
        lock_acquired.disconnect(receiver, sender=Lock)
    assert senders == [(Lock, name) for name in sorted(NAMES)]


# asyncio -----------------------------------------------------------------------------------


async def aheld_names(using: str, names: list[str]) -> set[str]:
    return {name for name in names if await alock(name, using=using).locked()}


def test_lock_all__extend_lengthens_every_lease_and_ttl_is_the_shortest(using: str) -> None:
    multi = lock_all(NAMES, using=using, ttl=5)
    assert multi.ttl() is None  # nobody holds the names
    assert multi.acquire()
    try:
        multi.locks[1].extend(20)  # one name's lease is longer than the others'
        assert 4 < multi.ttl() <= 5  # type: ignore[operator]
        assert 14 < multi.extend(10) <= 15
        assert 34 < multi.locks[1].ttl() <= 35  # type: ignore[operator]
        assert 14 < multi.ttl() <= 15  # type: ignore[operator]
        assert 59 < multi.extend(60, replace=True) <= 60
        assert all(59 < member.ttl() <= 60 for member in multi.locks)  # type: ignore[operator]
    finally:
        multi.release()
    assert multi.ttl() is None


def test_lock_all__extend_without_every_name_raises_naming_those_not_held(using: str) -> None:
    multi = lock_all(NAMES, using=using, ttl=5)
    with multi:
        multi.locks[0].release()  # all:a is no longer the caller's
        with pytest.raises(LockNotOwnedError) as caught:
            multi.extend(30)
        assert caught.value.lock_name == "all:a"
        assert "extend lock(s) ['all:a']" in str(caught.value)
        # The names still held were extended all the same.
        assert all(34 < member.ttl() <= 35 for member in multi.locks[1:])  # type: ignore[operator]
        multi.locks[0].acquire()  # for the block's release
    with pytest.raises(LockNotOwnedError):
        multi.extend(1)


async def test_alock_all__extend_and_ttl(using: str) -> None:
    multi = alock_all(NAMES, using=using, ttl=5)
    assert await multi.ttl() is None
    async with multi:
        assert 4 < await multi.ttl() <= 5  # type: ignore[operator]
        assert 14 < await multi.extend(10) <= 15
        assert 14 < await multi.ttl() <= 15  # type: ignore[operator]
    with pytest.raises(LockNotOwnedError):
        await multi.extend(1)


async def test_alock_all__holds_every_name_and_frees_them(using: str) -> None:
    multi = alock_all(NAMES, using=using)
    assert isinstance(multi, AsyncMultiLock)
    async with multi:
        assert await aheld_names(using, NAMES) == set(NAMES)
        assert await multi.owned()
        assert sorted(multi.fencing_tokens) == sorted(NAMES)
    assert await aheld_names(using, NAMES) == set()
    assert await multi.acquire() is True
    await multi.release()
    assert not await multi.locked()


async def test_alock_all__a_name_held_elsewhere_leaves_nothing_held(using: str) -> None:
    holder = alock("all:c", using=using)
    assert await holder.acquire()
    try:
        multi = alock_all(NAMES, using=using)
        started = time.monotonic()
        got = await asyncio.create_task(multi.acquire(timeout=0.3))
        assert got is False
        assert time.monotonic() - started >= 0.3
        assert await aheld_names(using, NAMES) == {"all:c"}

        async def enter() -> None:  # another task: another owner than the holder's
            async with alock_all(NAMES, using=using, blocking=False):
                pytest.fail("the block must not run without every name")

        with pytest.raises(LockNotAcquiredError):
            await asyncio.create_task(enter())
        assert await aheld_names(using, NAMES) == {"all:c"}
    finally:
        await holder.release()


async def test_alock_all__a_task_cancelled_while_waiting_keeps_nothing(using: str) -> None:
    holder = alock("all:c", using=using)
    assert await holder.acquire()
    try:
        multi = alock_all(NAMES, using=using, timeout=30)
        waiting = asyncio.create_task(multi.acquire())
        await aeventually(lambda: lock("all:b", using=using).locked(), 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert await aheld_names(using, NAMES) == {"all:c"}
    finally:
        await holder.release()
    assert await aheld_names(using, NAMES) == set()


async def test_alock_all__losing_one_name_is_reported_once(using: str) -> None:
    told: list[object] = []

    async def on_lost(multi: object) -> None:
        told.append(multi)

    with pytest.raises(LockLostError) as caught:
        async with alock_all(NAMES, using=using, ttl=0.3, on_lost=on_lost) as multi:
            locks[using].force_release("all:b")
            locks[using].force_release("all:c")
            await aeventually(lambda: multi.lost, 5)
            await aeventually(lambda: told == [multi], 5)
            with pytest.raises(LockLostError):
                await multi.check()
    assert caught.value.lock_name == "all:b"
    assert await aheld_names(using, NAMES) == set()
    assert told == [multi]


async def test_alock_all__decorates_a_coroutine_function(using: str) -> None:
    @alock_all(NAMES, using=using)
    async def work(amount: int) -> tuple[set[str], int]:
        return await aheld_names(using, NAMES), amount

    assert await work(4) == (set(NAMES), 4)
    assert await aheld_names(using, NAMES) == set()


def test_lock_all__decorating_the_wrong_kind_of_function_is_refused() -> None:
    async def coroutine_function() -> None: ...

    def plain() -> None: ...

    with pytest.raises(LockArgumentTypeError, match="Use alock_all"):
        lock_all(NAMES)(coroutine_function)
    with pytest.raises(LockArgumentTypeError, match="Use lock_all"):
        alock_all(NAMES)(plain)  # type: ignore[arg-type]


# Bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "error", "message"),
    [
        ("all:a", LockArgumentTypeError, "names must be a list of lock names, not str"),
        (None, LockArgumentTypeError, "names must be a list of lock names, not NoneType"),
        ([], InvalidLockArgumentError, "names must hold at least one lock name, got []."),
        (["all:a", 42], LockArgumentTypeError, "Lock name must be a str, not int: 42."),
        (["all:a", ""], InvalidLockArgumentError, "Lock name must not be empty."),
    ],
)
@pytest.mark.parametrize("factory", [lock_all, alock_all])
def test_lock_all__bad_names_are_refused(
    factory: Any, names: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        factory(names)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"limit": 2}, LockArgumentTypeError, "unexpected keyword argument 'limit' (limit: only"),
        ({"limit": 1}, LockArgumentTypeError, "lock_all() got an unexpected keyword argument"),
        ({"min_hold": 0}, LockArgumentTypeError, "unexpected keyword argument 'min_hold'"),
        ({"lease": 5}, LockArgumentTypeError, "unexpected keyword argument 'lease'; it takes"),
        ({"on_lost": 3}, LockArgumentTypeError, "on_lost must be a callable"),
        ({"raise_on_lost": 1}, LockArgumentTypeError, "raise_on_lost must be True or False"),
        ({"ttl": 0}, InvalidLockArgumentError, "ttl must be a finite number"),
        ({"blocking": False, "timeout": 1}, InvalidLockArgumentError, "timeout cannot be given"),
    ],
)
@pytest.mark.parametrize("factory", [lock_all, alock_all])
def test_lock_all__bad_arguments_are_refused(
    factory: Any, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        factory(NAMES, **arguments)
    assert message in str(caught.value)


def test_lock_all__a_timeout_with_a_non_blocking_acquire_is_refused() -> None:
    with pytest.raises(InvalidLockArgumentError, match="non-blocking acquire"):
        lock_all(NAMES).acquire(blocking=False, timeout=1)


def test_lock_all__names_are_iterables_of_any_kind() -> None:
    assert lock_all(iter(["b", "a"])).names == ("a", "b")
    assert lock_all(("x", "x")).names == ("x",)
