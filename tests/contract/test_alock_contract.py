"""The alock contract: every test here runs on every backend (see conftest.py).

It mirrors the contract of the blocking lock (test_lock_contract.py, test_liveness.py), with
asyncio tasks where those tests use threads: each task is its own owner, even when tasks
share one handle. The last part covers the ``withdraw`` primitive that undoes an acquire or
release a cancelled task never saw the end of.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from django_redis_lock import (
    AsyncLock,
    LockArgumentTypeError,
    LockError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
    alock,
    lock,
)
from django_redis_lock.backends.base import AcquireRequest, BaseLockBackend, Grant, holder_metadata
from django_redis_lock.signals import lock_acquired, lock_lost, lock_released
from tests.support.helpers import aeventually as eventually
from tests.support.helpers import queued

T = TypeVar("T")

META = holder_metadata(host="h", pid=1, thread="t")

#: Another process, waiting for a lock: registered for 5 seconds.
WAITING = AcquireRequest(ttl=10, metadata=META, wait=5)


async def in_task(func: Callable[[], Awaitable[T]]) -> T:
    """Run ``func()`` in a new asyncio task (another lock owner) and return its result.

    ``func`` returns a fresh coroutine (a coroutine function, or a lambda calling one): only
    the coroutine's body runs in the new task, so ``func`` itself must not read lock state.
    """
    return await asyncio.wait_for(asyncio.create_task(func()), 30)


async def not_locked(handle: AsyncLock) -> bool:
    return not await handle.locked()


# Acquiring and releasing ---------------------------------------------------------------------


async def test_acquire_release__frees_the_lock(using: str) -> None:
    handle = alock("acontract:basic", using=using)
    assert not await handle.locked()
    assert await handle.acquire() is True
    assert await handle.locked()
    assert await handle.owned()
    await handle.release()
    assert not await handle.locked()
    assert not await handle.owned()


async def test_try_acquire__fails_while_another_task_holds(using: str) -> None:
    async with alock("acontract:try", using=using):
        other = alock("acontract:try", using=using)
        assert await in_task(lambda: other.acquire(blocking=False)) is False
    assert await in_task(alock("acontract:try", using=using, blocking=False).acquire) is True


async def test_try_acquire__does_not_wait(using: str) -> None:
    async with alock("acontract:nowait", using=using):
        other = alock("acontract:nowait", using=using)
        started = time.monotonic()
        assert not await in_task(lambda: other.acquire(blocking=False))
        assert time.monotonic() - started < 1.0


async def test_blocking_acquire__times_out_not_before_the_timeout(using: str) -> None:
    async with alock("acontract:timeout", using=using):
        other = alock("acontract:timeout", using=using)
        started = time.monotonic()
        acquired = await in_task(lambda: other.acquire(timeout=0.3))
        elapsed = time.monotonic() - started
    assert acquired is False
    assert 0.3 <= elapsed < 3.0


@pytest.mark.needs("waiter_queue")
async def test_blocking_acquire__timeout_zero_tries_once(
    using: str, backend: BaseLockBackend
) -> None:
    async with alock("acontract:zero", using=using):
        other = alock("acontract:zero", using=using)
        started = time.monotonic()
        assert await in_task(lambda: other.acquire(timeout=0)) is False
        assert time.monotonic() - started < 1.0
        assert queued(backend, "acontract:zero") == 0, "a single try does not queue"


@pytest.mark.needs("waiter_queue")
async def test_blocking_acquire__gets_the_lock_when_the_holder_releases(
    using: str, backend: BaseLockBackend
) -> None:
    holder = alock("acontract:handoff", using=using)
    await holder.acquire()
    waiter = alock("acontract:handoff", using=using, timeout=10)

    async def wait_for_it() -> tuple[int | None, float]:
        async with waiter:
            return waiter.fencing_token, time.monotonic()

    task = asyncio.create_task(wait_for_it())
    await eventually(lambda: queued(backend, "acontract:handoff") == 1)
    assert not task.done()
    first = holder.fencing_token
    released_at = time.monotonic()
    await holder.release()
    got, acquired_at = await asyncio.wait_for(task, 10)
    assert got is not None
    assert first is not None
    assert got > first
    assert acquired_at - released_at < 1.0, "handed over at the release, not at a retry"
    assert not await holder.locked()


async def test_blocking_acquire__a_waiter_does_not_block_the_event_loop(using: str) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async with alock("acontract:loop", using=using):
        ticker = asyncio.create_task(tick())
        other = alock("acontract:loop", using=using)
        try:
            assert await in_task(lambda: other.acquire(timeout=0.3)) is False
        finally:
            ticker.cancel()
    assert ticks >= 10, "the event loop kept running while the other task waited"


async def test_reentrancy__same_task_acquires_again_and_must_release_as_often(
    using: str,
) -> None:
    handle = alock("acontract:reentrant", using=using)
    assert await handle.acquire(blocking=False)
    token = handle.fencing_token
    assert await handle.acquire(blocking=False)
    assert handle.fencing_token == token
    await handle.release()
    assert await handle.locked(), "one hold remains"
    other = alock("acontract:reentrant", using=using)
    assert not await in_task(lambda: other.acquire(blocking=False))
    await handle.release()
    assert not await handle.locked()
    with pytest.raises(LockNotOwnedError):
        await handle.release()


async def test_reentrancy__across_handles_of_one_task(using: str) -> None:
    async with alock("acontract:handles", using=using) as outer:
        async with alock("acontract:handles", using=using, blocking=False) as inner:
            assert inner.fencing_token == outer.fencing_token
        assert await outer.owned()
    assert not await outer.locked()


async def test_mixed__a_blocking_lock_and_an_alock_exclude_each_other(using: str) -> None:
    async with alock("acontract:mixed", using=using):
        other = lock("acontract:mixed", using=using)
        assert await asyncio.to_thread(other.acquire, blocking=False) is False
    held = lock("acontract:mixed", using=using)
    loop = asyncio.get_running_loop()
    # One thread for the blocking lock's acquire and release: it is their owner.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread:
        assert await loop.run_in_executor(thread, functools.partial(held.acquire, False))
        try:
            assert await alock("acontract:mixed", using=using).acquire(blocking=False) is False
        finally:
            await loop.run_in_executor(thread, held.release)
    assert not await alock("acontract:mixed", using=using).locked()


# Tasks are owners ----------------------------------------------------------------------------


async def test_shared_handle__another_task_cannot_release(using: str) -> None:
    handle = alock("acontract:tasks", using=using)
    async with handle:
        with pytest.raises(LockNotOwnedError) as caught:
            await in_task(handle.release)
        assert caught.value.lock_name == "acontract:tasks"
        assert await handle.owned(), "the holder's hold survives the other task's release"
    assert not await handle.locked()


async def test_shared_handle__another_task_cannot_try_acquire(using: str) -> None:
    handle = alock("acontract:tasks-try", using=using)
    async with handle:
        assert await in_task(lambda: handle.acquire(blocking=False)) is False
        assert await in_task(lambda: handle.acquire(timeout=0.1)) is False
    assert await in_task(lambda: handle.acquire(blocking=False)) is True


async def test_shared_handle__owned_is_per_task(using: str) -> None:
    handle = alock("acontract:tasks-owned", using=using)
    async with handle:
        assert await in_task(handle.owned) is False
        assert await handle.owned() is True
        assert await in_task(handle.locked) is True


@pytest.mark.needs("semaphores")
async def test_fencing_token__differs_per_task_on_a_shared_handle(using: str) -> None:
    handle = alock("acontract:fence-tasks", using=using, limit=2)
    async with handle:

        async def token() -> int | None:
            return handle.fencing_token

        assert await in_task(token) is None
        mine = handle.fencing_token
        assert mine is not None

        async def take() -> int | None:
            assert await handle.acquire(blocking=False)
            try:
                return handle.fencing_token
            finally:
                await handle.release()

        theirs = await in_task(take)
        assert theirs is not None
        assert theirs > mine
        assert handle.fencing_token == mine


async def test_child_task__is_another_owner(using: str) -> None:
    handle = alock("acontract:child", using=using)

    async def child() -> tuple[bool, bool, int | None, bool]:
        owned = await handle.owned()
        acquired = await handle.acquire(blocking=False)
        token = handle.fencing_token
        try:
            await handle.release()
        except LockNotOwnedError:
            released = False
        else:
            released = True
        return owned, acquired, token, released

    async def parent() -> tuple[bool, bool, int | None, bool]:
        async with handle:
            return await asyncio.create_task(child())

    assert await asyncio.wait_for(asyncio.create_task(parent()), 10) == (
        False,
        False,
        None,
        False,
    )
    assert not await handle.locked()


async def test_concurrent_tasks__never_hold_one_lock_at_once(using: str) -> None:
    handle = alock("acontract:exclusive", using=using, timeout=20)
    inside: list[int] = []
    overlaps: list[list[int]] = []

    async def work(number: int) -> None:
        for _ in range(5):
            async with handle:
                inside.append(number)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                await asyncio.sleep(0.002)
                inside.remove(number)

    await asyncio.wait_for(asyncio.gather(*(work(n) for n in range(4))), 30)
    assert overlaps == []
    assert not await handle.locked()


# Release, fencing, ttl and extend --------------------------------------------------------------


async def test_release__never_acquired_raises_not_owned(using: str) -> None:
    with pytest.raises(LockNotOwnedError, match="does not hold it") as caught:
        await alock("acontract:never", using=using).release()
    assert caught.value.lock_name == "acontract:never"


async def test_release__twice_raises_not_owned(using: str) -> None:
    handle = alock("acontract:twice", using=using)
    await handle.acquire()
    await handle.release()
    with pytest.raises(LockNotOwnedError):
        await handle.release()


async def test_fencing_token__grows_with_each_new_holder(using: str) -> None:
    tokens = []
    for _ in range(5):
        async with alock("acontract:fence", using=using) as handle:
            tokens.append(handle.fencing_token)
        assert handle.fencing_token is None
    assert all(isinstance(t, int) for t in tokens)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


async def test_ttl__reports_the_remaining_lease(using: str) -> None:
    handle = alock("acontract:ttl", ttl=10, using=using)
    assert await handle.ttl() is None
    async with handle:
        remaining = await handle.ttl()
        assert remaining is not None
        assert 8 < remaining <= 10
        assert await in_task(handle.ttl) == pytest.approx(remaining, abs=1)


async def test_extend__adds_to_the_lease(using: str) -> None:
    async with alock("acontract:extend", ttl=5, using=using) as handle:
        remaining = await handle.extend(10)
        assert 13 < remaining <= 15
        assert await handle.ttl() == pytest.approx(remaining, abs=1)


async def test_extend__replace_sets_the_lease(using: str) -> None:
    async with alock("acontract:replace", ttl=50, using=using) as handle:
        remaining = await handle.extend(2, replace=True)
        assert 1 < remaining <= 2
        assert await handle.ttl() == pytest.approx(remaining, abs=0.5)


async def test_extend__by_another_task_raises_not_owned(using: str) -> None:
    async with alock("acontract:extend-other", ttl=5, using=using) as handle:
        with pytest.raises(LockNotOwnedError, match="Cannot extend") as caught:
            await in_task(lambda: handle.extend(50))
        assert caught.value.lock_name == "acontract:extend-other"
        remaining = await handle.ttl()
        assert remaining is not None
        assert remaining <= 5


async def test_expiry__frees_the_lock_for_another_task(using: str) -> None:
    first = alock("acontract:expiry", ttl=0.2, using=using)
    await first.acquire()
    first_token = first.fencing_token
    await eventually(lambda: not_locked(first))
    second = alock("acontract:expiry", using=using)

    async def take() -> int | None:
        assert await second.acquire(blocking=False)
        return second.fencing_token

    second_token = await in_task(take)
    assert second_token is not None
    assert first_token is not None
    assert second_token > first_token
    with pytest.raises(LockNotOwnedError):
        await first.release()
    with pytest.raises(LockNotOwnedError):
        await first.extend(10)
    assert await first.locked(), "the late release must leave the new holder's lock intact"
    assert not await first.owned()


async def test_expiry__a_waiting_task_acquires_when_the_lease_ends(using: str) -> None:
    await alock("acontract:expiry-wait", ttl=0.3, using=using).acquire()
    other = alock("acontract:expiry-wait", using=using)
    started = time.monotonic()
    assert await in_task(lambda: other.acquire(timeout=10)) is True
    assert time.monotonic() - started < 5.0


# async with and the decorator ----------------------------------------------------------------


async def test_context_manager__raises_not_acquired_when_held(using: str) -> None:
    async with alock("acontract:cm", using=using):

        async def enter() -> None:
            async with alock("acontract:cm", using=using, blocking=False):
                pass

        with pytest.raises(LockNotAcquiredError, match="at once") as caught:
            await in_task(enter)
    assert caught.value.lock_name == "acontract:cm"
    assert isinstance(caught.value, LockError)


async def test_context_manager__raises_not_acquired_after_a_short_timeout(using: str) -> None:
    async with alock("acontract:cm-timeout", using=using):
        entered: list[bool] = []

        async def enter() -> None:
            async with alock("acontract:cm-timeout", using=using, timeout=0.2):
                entered.append(True)

        started = time.monotonic()
        with pytest.raises(LockNotAcquiredError, match=r"within 0\.2s") as caught:
            await in_task(enter)
        assert time.monotonic() - started >= 0.2
    assert caught.value.lock_name == "acontract:cm-timeout"
    assert entered == []


async def test_context_manager__lease_ended_in_block_raises_lock_lost(using: str) -> None:
    handle = alock("acontract:lost", ttl=0.1, using=using, auto_renew=False)
    with pytest.raises(LockLostError, match="lost") as caught:
        async with handle:
            await eventually(lambda: not_locked(handle))
    assert caught.value.lock_name == "acontract:lost"
    assert handle.lost


async def test_context_manager__lost_lease_keeps_the_block_exception(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    handle = alock("acontract:lost-exc", ttl=0.1, using=using, auto_renew=False)
    with caplog.at_level(logging.WARNING, "django_redis_lock"), pytest.raises(KeyError):
        async with handle:
            await eventually(lambda: not_locked(handle))
            raise KeyError("from the block")
    assert "acontract:lost-exc" in caplog.text
    assert "lost" in caplog.text


async def test_context_manager__releases_when_the_block_raises(using: str) -> None:
    handle = alock("acontract:raise", using=using)
    with pytest.raises(RuntimeError, match="boom"):
        async with handle:
            raise RuntimeError("boom")
    assert not await handle.locked()
    assert handle.fencing_token is None


async def test_decorator__runs_the_coroutine_under_the_lock(using: str) -> None:
    guard = alock("acontract:decorated", using=using, timeout=10)
    inside: list[str] = []
    overlapped: list[bool] = []

    async def job(value: int) -> tuple[int, bool]:
        """Double ``value``."""
        inside.append("in")
        overlapped.append(len(inside) > 1)
        await asyncio.sleep(0.02)
        owned = await guard.owned()
        inside.remove("in")
        return value * 2, owned

    decorated = guard(job)
    assert await decorated(21) == (42, True)
    assert await asyncio.gather(decorated(1), decorated(2)) == [(2, True), (4, True)]
    assert overlapped == [False, False, False]
    assert decorated.__name__ == "job"
    assert decorated.__doc__ == "Double ``value``."
    assert decorated.__wrapped__ is job  # type: ignore[attr-defined]
    assert inspect.iscoroutinefunction(decorated)
    assert not await guard.locked()


async def test_decorator__releases_when_the_coroutine_raises(using: str) -> None:
    guard = alock("acontract:decorated-raise", using=using)

    @guard
    async def job() -> None:
        raise ValueError("from the job")

    with pytest.raises(ValueError, match="from the job"):
        await job()
    assert not await guard.locked()


def test_decorator__refuses_plain_functions(using: str) -> None:
    def job() -> None:
        pass

    with pytest.raises(LockArgumentTypeError, match="coroutine functions") as caught:
        alock("acontract:plain", using=using)(job)  # type: ignore[arg-type]
    assert caught.value.lock_name == "acontract:plain"
    assert isinstance(caught.value, TypeError)


def test_sync_decorator__refuses_coroutine_functions_and_names_alock(using: str) -> None:
    async def job() -> None:
        pass

    with pytest.raises(LockArgumentTypeError, match=r"alock\(\)"):
        lock("acontract:async", using=using)(job)


# Fairness and limits --------------------------------------------------------------------------


@pytest.mark.needs("fair_order")
async def test_fair__waiting_tasks_are_served_in_arrival_order(
    using: str, backend: BaseLockBackend
) -> None:
    order: list[int] = []
    holder = alock("acontract:fifo", using=using, fair=True)
    await holder.acquire()

    async def waiter(number: int) -> None:
        async with alock("acontract:fifo", using=using, fair=True, timeout=20):
            order.append(number)

    tasks = []
    for number in range(5):
        tasks.append(asyncio.create_task(waiter(number)))
        # Each waiter is registered before the next one starts.
        await eventually(lambda n=number: queued(backend, "acontract:fifo") == n + 1)
    await holder.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert order == [0, 1, 2, 3, 4]


@pytest.mark.needs("fair_order")
async def test_fair__a_newcomer_does_not_overtake_a_queued_waiter(
    using: str, backend: BaseLockBackend
) -> None:
    name = "acontract:overtake"
    holder = alock(name, ttl=0.2, using=using, fair=True, auto_renew=False)
    await holder.acquire()
    assert not backend.acquire(
        name, "queued", AcquireRequest(ttl=10, metadata=META, fair=True, wait=5)
    ).acquired
    await eventually(lambda: not_locked(holder))  # the lease ended: nobody handed it over
    newcomer = alock(name, using=using, fair=True)
    assert await in_task(lambda: newcomer.acquire(blocking=False)) is False
    assert [info.owner for info in backend.lock_info(name)] == ["queued"]
    assert backend.force_release(name) == 1


@pytest.mark.needs("semaphores")
async def test_limit__that_many_tasks_hold_at_once(using: str, backend: BaseLockBackend) -> None:
    handle = alock("acontract:sem", using=using, limit=3)
    results = [await in_task(lambda: handle.acquire(blocking=False)) for _ in range(4)]
    assert results == [True, True, True, False]
    assert len(list(backend.iter_locks("acontract:sem"))) == 3
    assert backend.force_release("acontract:sem") == 3


@pytest.mark.needs("semaphores")
async def test_limit__a_release_hands_the_slot_to_a_waiting_task(
    using: str, backend: BaseLockBackend
) -> None:
    handle = alock("acontract:sem-wait", using=using, limit=2)
    held = [asyncio.Event(), asyncio.Event()]
    done = asyncio.Event()

    async def hold(index: int) -> None:
        async with handle:
            held[index].set()
            await done.wait()

    holders = [asyncio.create_task(hold(index)) for index in range(2)]
    await asyncio.wait_for(asyncio.gather(*(event.wait() for event in held)), 10)
    assert await handle.acquire(blocking=False) is False

    async def wait_for_a_slot() -> tuple[bool, bool]:
        acquired = await handle.acquire(timeout=10)
        owned = await handle.owned()
        await handle.release()
        return acquired, owned

    third = asyncio.create_task(wait_for_a_slot())
    await eventually(lambda: queued(backend, "acontract:sem-wait") == 1)
    assert not third.done()
    done.set()
    assert await asyncio.wait_for(third, 10) == (True, True)
    await asyncio.wait_for(asyncio.gather(*holders), 10)
    assert not await handle.locked()


# Renewal --------------------------------------------------------------------------------------


async def test_renewal__keeps_a_lock_held_past_several_lease_lengths(using: str) -> None:
    async with alock("acontract:renew", ttl=0.3, using=using) as handle:
        await asyncio.sleep(1.0)  # more than three leases: only renewal keeps it
        assert await handle.owned()
        assert not handle.lost
        other = alock("acontract:renew", using=using)
        assert await in_task(lambda: other.acquire(blocking=False)) is False
    assert not await handle.locked()
    assert not handle.lost


async def test_renewal__off_lets_the_lease_end(using: str) -> None:
    handle = alock("acontract:norenew", ttl=0.2, using=using, auto_renew=False)
    with pytest.raises(LockLostError):
        async with handle:
            await eventually(lambda: not_locked(handle))
    assert handle.lost


async def test_renewal__acquire_with_auto_renew_keeps_the_lease(using: str) -> None:
    handle = alock("acontract:renew-acquire", ttl=0.3, using=using, auto_renew=True)
    assert await handle.acquire()
    await asyncio.sleep(1.0)
    assert await handle.owned()
    await handle.release()
    assert not handle.lost


async def test_renewal__stops_when_the_holding_task_ends_without_releasing(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The renewal thread says so when it next wakes; the lease, no longer renewed, then ends.
    # Waiting for the words before the lease's end keeps a slow renewal thread from failing it.
    handle = alock("acontract:orphan", ttl=1.0, using=using, auto_renew=True)

    async def take_and_forget() -> None:
        assert await handle.acquire()

    with caplog.at_level(logging.WARNING, "django_redis_lock"):
        await in_task(take_and_forget)
        assert await handle.locked()
        ended = "the task holding it ended without releasing it"
        await eventually(lambda: ended in caplog.text, timeout=10)
        await eventually(lambda: not_locked(handle), timeout=10)


async def test_renewal__max_hold_ends_renewal_and_reports_the_loss(using: str) -> None:
    handle = alock("acontract:max-hold", ttl=0.2, max_hold=0.3, using=using)
    with pytest.raises(LockLostError, match="max_hold"):
        async with handle:
            await eventually(lambda: handle.lost, timeout=5)
    assert not await handle.locked()


# Lost leases are loud ---------------------------------------------------------------------------


async def test_lost__renewal_finds_the_lock_taken_and_reports_it(
    using: str, backend: BaseLockBackend, caplog: pytest.LogCaptureFixture
) -> None:
    lost_calls: list[Any] = []
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_lost.connect(receiver)
    handle = alock("acontract:stolen", ttl=0.3, using=using, on_lost=lost_calls.append)
    try:
        with caplog.at_level(logging.WARNING, "django_redis_lock"):
            with pytest.raises(LockLostError, match="another owner") as caught:
                async with handle:
                    token = handle.fencing_token
                    await handle.check()
                    assert await asyncio.to_thread(backend.force_release, "acontract:stolen") == 1
                    await eventually(lambda: handle.lost, timeout=5)
                    with pytest.raises(LockLostError):
                        await handle.check()
        assert caught.value.lock_name == "acontract:stolen"
        # on_lost runs after the signal is sent (from the renewal thread): then both are in.
        await eventually(lambda: lost_calls == [handle], timeout=5)
    finally:
        lock_lost.disconnect(receiver)
    assert len(received) == 1
    assert received[0]["sender"] is AsyncLock
    assert received[0]["lock"] is handle
    assert received[0]["name"] == "acontract:stolen"
    assert received[0]["fencing_token"] == token
    assert received[0]["held_for"] > 0
    assert "another owner" in received[0]["reason"]
    assert "acontract:stolen" in caplog.text
    assert "was lost" in caplog.text


async def test_lost__is_per_task_on_a_shared_handle(using: str, backend: BaseLockBackend) -> None:
    handle = alock("acontract:lost-task", ttl=0.3, using=using)
    with pytest.raises(LockLostError):
        async with handle:
            backend.force_release("acontract:lost-task")
            await eventually(lambda: handle.lost, timeout=5)

            async def lost() -> bool:
                return handle.lost

            assert await in_task(lost) is False
    assert handle.lost


async def test_lost__on_lost_runs_on_the_holders_event_loop_thread(
    using: str, backend: BaseLockBackend
) -> None:
    calls: list[tuple[int, asyncio.AbstractEventLoop, AsyncLock]] = []

    def on_lost(handle: AsyncLock) -> None:
        calls.append((threading.get_ident(), asyncio.get_running_loop(), handle))

    handle = alock("acontract:lost-thread", ttl=0.3, using=using, on_lost=on_lost)
    with pytest.raises(LockLostError):
        async with handle:
            await asyncio.to_thread(backend.force_release, "acontract:lost-thread")
            await eventually(lambda: bool(calls), timeout=5)
    assert calls == [(threading.get_ident(), asyncio.get_running_loop(), handle)]


async def test_lost__an_async_on_lost_callback_is_awaited(
    using: str, backend: BaseLockBackend
) -> None:
    calls: list[tuple[int, asyncio.AbstractEventLoop, AsyncLock]] = []

    async def on_lost(handle: AsyncLock) -> None:
        await asyncio.sleep(0.01)  # it runs as a task: it may await
        calls.append((threading.get_ident(), asyncio.get_running_loop(), handle))

    handle = alock("acontract:lost-async", ttl=0.3, using=using, on_lost=on_lost)
    with pytest.raises(LockLostError):
        async with handle:
            await asyncio.to_thread(backend.force_release, "acontract:lost-async")
            await eventually(lambda: bool(calls), timeout=5)
    assert calls == [(threading.get_ident(), asyncio.get_running_loop(), handle)]


async def test_lost__a_failing_on_lost_callback_is_logged(
    using: str, backend: BaseLockBackend, caplog: pytest.LogCaptureFixture
) -> None:
    async def on_lost(handle: AsyncLock) -> None:
        raise RuntimeError("callback bug")

    handle = alock("acontract:lost-broken", ttl=0.3, using=using, on_lost=on_lost)
    with caplog.at_level(logging.ERROR, "django_redis_lock"), pytest.raises(LockLostError):
        async with handle:
            backend.force_release("acontract:lost-broken")
            await eventually(lambda: "on_lost callback" in caplog.text, timeout=5)
    assert "callback bug" in caplog.text


async def test_lost__raise_on_lost_false_only_warns(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    handle = alock("acontract:warn", ttl=0.1, using=using, auto_renew=False, raise_on_lost=False)
    with caplog.at_level(logging.WARNING, "django_redis_lock"):
        async with handle:
            await eventually(lambda: not_locked(handle))
    assert handle.lost
    assert "acontract:warn" in caplog.text


async def test_check__without_renewal_asks_the_backend(
    using: str, backend: BaseLockBackend
) -> None:
    handle = alock("acontract:check", ttl=10, using=using, auto_renew=False)
    await handle.acquire()
    await handle.check()
    assert not handle.lost
    backend.force_release("acontract:check")
    with pytest.raises(LockLostError) as caught:
        await handle.check()
    assert caught.value.lock_name == "acontract:check"
    assert handle.lost
    with pytest.raises(LockNotOwnedError):
        await handle.release()


async def test_check__by_a_task_that_holds_nothing_raises_not_owned(using: str) -> None:
    handle = alock("acontract:check-none", using=using)
    with pytest.raises(LockNotOwnedError):
        await handle.check()
    async with handle:
        with pytest.raises(LockNotOwnedError):
            await in_task(handle.check)


# Observability ----------------------------------------------------------------------------------


async def test_signals__acquired_and_released_are_sent_for_alock_holds(
    using: str, backend: BaseLockBackend
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []

    def on_acquired(**kwargs: Any) -> None:
        events.append(("acquired", kwargs))

    def on_released(**kwargs: Any) -> None:
        events.append(("released", kwargs))

    lock_acquired.connect(on_acquired)
    lock_released.connect(on_released)
    try:
        async with alock("acontract:signals", using=using) as handle:
            token = handle.fencing_token
            [info] = backend.lock_info("acontract:signals")
            await asyncio.sleep(0.05)
    finally:
        lock_acquired.disconnect(on_acquired)
        lock_released.disconnect(on_released)
    [(first, acquired), (second, released)] = events
    assert (first, second) == ("acquired", "released")
    assert acquired["sender"] is released["sender"] is AsyncLock
    assert acquired["lock"] is released["lock"] is handle
    assert acquired["name"] == released["name"] == "acontract:signals"
    assert acquired["using"] == using
    assert acquired["owner"] == released["owner"] == info.owner
    assert acquired["fencing_token"] == released["fencing_token"] == token
    assert 0 <= acquired["waited"] < 1
    assert released["held_for"] >= 0.05


async def test_signals__a_reentrant_acquire_is_announced_once(using: str) -> None:
    names: list[str] = []

    def on_acquired(**kwargs: Any) -> None:
        names.append(kwargs["name"])

    lock_acquired.connect(on_acquired)
    try:
        handle = alock("acontract:once", using=using)
        async with handle, handle:
            pass
    finally:
        lock_acquired.disconnect(on_acquired)
    assert names == ["acontract:once"]


async def test_listing__names_the_holding_task(using: str, backend: BaseLockBackend) -> None:
    async def hold() -> str | None:
        async with alock("acontract:list", using=using, metadata={"job": 7}):
            [info] = backend.lock_info("acontract:list")
            assert info.metadata == {"job": 7}
            return info.thread

    where = await asyncio.create_task(hold(), name="the-holder")
    assert where == f"{threading.current_thread().name}/the-holder"


# Cancellation -----------------------------------------------------------------------------------


@pytest.mark.needs("waiter_queue")
async def test_cancel__a_waiting_task_leaves_the_queue(
    using: str, backend: BaseLockBackend
) -> None:
    holder = alock("acontract:cancel", using=using)
    await holder.acquire()
    waiter = alock("acontract:cancel", using=using, timeout=10)
    task = asyncio.create_task(waiter.acquire())
    await eventually(lambda: queued(backend, "acontract:cancel") == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queued(backend, "acontract:cancel") == 0
    await holder.release()
    assert not await holder.locked(), "nothing was handed to the cancelled waiter"


@pytest.mark.needs("waiter_queue")
async def test_cancel__a_lock_handed_to_a_cancelled_waiter_goes_to_the_next(
    using: str, backend: BaseLockBackend
) -> None:
    name = "acontract:cancel-handed"
    assert backend.acquire(name, "holder", AcquireRequest(ttl=10, metadata=META)).acquired
    waiter = alock(name, using=using, timeout=10)
    task = asyncio.create_task(waiter.acquire())
    await eventually(lambda: queued(backend, name) == 1)
    assert not backend.acquire(name, "next", WAITING).acquired
    # The release hands the lock to the waiting task, which is cancelled before it runs
    # again (the event loop is not given a turn in between).
    assert backend.release(name, "holder") == 0
    task.cancel()
    outcome = (await asyncio.gather(task, return_exceptions=True))[0]
    assert isinstance(outcome, asyncio.CancelledError), (
        f"the cancelled acquire returned {outcome!r} instead of raising CancelledError"
    )
    assert waiter.fencing_token is None
    assert [info.owner for info in backend.lock_info(name)] == ["next"]
    assert backend.force_release(name) == 1


# The withdraw primitive -------------------------------------------------------------------------


@pytest.fixture(params=["sync", "async"])
def withdraw(
    request: pytest.FixtureRequest, backend: BaseLockBackend
) -> Callable[..., Awaitable[int]]:
    """``await withdraw(name, owner, holds)``: the backend's withdraw, blocking or asyncio."""
    if request.param == "async":
        return backend.awithdraw

    async def blocking(name: str, owner: str, holds: int = 0) -> int:
        return await asyncio.to_thread(functools.partial(backend.withdraw, name, owner, holds))

    return blocking


@pytest.mark.needs("waiter_queue")
async def test_withdraw__removes_a_registered_waiter_from_the_queue(
    backend: BaseLockBackend, withdraw: Callable[..., Awaitable[int]]
) -> None:
    name = "withdraw:queue"
    assert backend.acquire(name, "holder", AcquireRequest(ttl=10, metadata=META)).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    assert queued(backend, name) == 1
    assert await withdraw(name, "waiter") == 0
    assert queued(backend, name) == 0
    assert backend.ttl(name, "holder") is not None, "the holder is untouched"
    assert backend.release(name, "holder") == 0
    assert not backend.locked(name), "the lock is not handed to a withdrawn waiter"


@pytest.mark.needs("waiter_queue")
async def test_withdraw__frees_a_lock_handed_to_a_waiter_and_hands_it_on(
    backend: BaseLockBackend, withdraw: Callable[..., Awaitable[int]]
) -> None:
    name = "withdraw:handed"
    assert backend.acquire(name, "holder", AcquireRequest(ttl=10, metadata=META)).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    assert not backend.acquire(name, "next", WAITING).acquired
    assert backend.release(name, "holder") == 0
    assert [info.owner for info in backend.lock_info(name)] == ["waiter"]
    assert await withdraw(name, "waiter") == 0
    assert [info.owner for info in backend.lock_info(name)] == ["next"]
    assert queued(backend, name) == 0
    grant = backend.wait(name, "next", 1)
    assert isinstance(grant, Grant)
    assert grant.fencing_token == backend.lock_info(name)[0].fencing_token
    assert backend.wait(name, "waiter", 0.05) is None, "the waiter's wake-up call is gone"
    assert backend.release(name, "next") == 0
    assert not backend.locked(name)


async def test_withdraw__drops_holds_above_the_count_kept(
    backend: BaseLockBackend, withdraw: Callable[..., Awaitable[int]]
) -> None:
    name = "withdraw:holds"
    for _ in range(3):
        assert backend.acquire(name, "owner", AcquireRequest(ttl=10, metadata=META)).acquired
    [info] = backend.lock_info(name)
    assert info.holds == 3
    assert await withdraw(name, "owner", 1) == 1
    [after] = backend.lock_info(name)
    assert after.holds == 1
    assert after.fencing_token == info.fencing_token
    assert await withdraw(name, "owner", 5) == 1, "fewer holds than kept are left alone"
    assert backend.lock_info(name)[0].holds == 1
    assert backend.release(name, "owner") == 0
    assert not backend.locked(name)


@pytest.mark.needs("waiter_queue")
async def test_withdraw__to_zero_holds_frees_the_lock_for_the_next_waiter(
    backend: BaseLockBackend, withdraw: Callable[..., Awaitable[int]]
) -> None:
    name = "withdraw:zero"
    assert backend.acquire(name, "owner", AcquireRequest(ttl=10, metadata=META)).acquired
    assert backend.acquire(name, "owner", AcquireRequest(ttl=10, metadata=META)).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    assert await withdraw(name, "owner") == 0
    assert backend.ttl(name, "owner") is None
    assert [info.owner for info in backend.lock_info(name)] == ["waiter"]
    assert isinstance(backend.wait(name, "waiter", 1), Grant)
    assert backend.force_release(name) == 1


@pytest.mark.needs("waiter_queue")
async def test_withdraw__an_owner_with_nothing_changes_nothing(
    backend: BaseLockBackend, withdraw: Callable[..., Awaitable[int]]
) -> None:
    name = "withdraw:stranger"
    assert await withdraw(name, "stranger") == 0
    assert not backend.locked(name)
    assert backend.acquire(name, "holder", AcquireRequest(ttl=10, metadata=META)).acquired
    assert not backend.acquire(name, "waiter", WAITING).acquired
    assert await withdraw(name, "stranger") == 0
    assert await withdraw(name, "holder", 1) == 1
    [info] = backend.lock_info(name)
    assert (info.owner, info.holds) == ("holder", 1)
    assert queued(backend, name) == 1
    assert backend.force_release(name) == 1


async def test_signals__async_receivers_are_sent_from_the_loop_without_breaking_the_lock(
    using: str,
) -> None:
    events: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def on_acquired(sender: object, name: str, **kwargs: object) -> None:
        events.append(("acquired", name))

    async def on_released(sender: object, name: str, **kwargs: object) -> None:
        events.append(("released", name))
        done.set()

    lock_acquired.connect(on_acquired)
    lock_released.connect(on_released)
    try:
        handle = alock("acontract:async-receivers", using=using)
        assert await handle.acquire() is True
        assert await handle.owned()
        await handle.release()
        assert not await handle.locked()
        await asyncio.wait_for(done.wait(), 5)
    finally:
        lock_acquired.disconnect(on_acquired)
        lock_released.disconnect(on_released)
    assert events == [
        ("acquired", "acontract:async-receivers"),
        ("released", "acontract:async-receivers"),
    ]
