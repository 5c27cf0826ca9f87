"""rwlock / arwlock: many readers or one writer, on every backend that supports them.

Another owner is another thread (or asyncio task) of this process, as in the lock contract;
tests/backends/test_rwlock_processes.py has the same rules between processes, under faults.
Redlock refuses readers (it keeps no queue, so a waiting writer could not stop new readers):
it skips these tests, saying why, and tests/backends/test_redlock.py checks the refusal.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from django_redis_lock import (
    AsyncReadWriteLock,
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockLostError,
    LockUpgradeError,
    ReadWriteLock,
    arwlock,
    lock,
    locks,
    rwlock,
)
from django_redis_lock.backends.base import SHARED, AcquireRequest, ReleaseRequest
from tests.support.helpers import eventually, in_thread, queued

pytestmark = pytest.mark.needs("read_write")

NAME = "rw:report"


class Owner:
    """Another thread that acquires one side of ``NAME``, holds it until told, then releases."""

    def __init__(self, side: Callable[[], object], *, started: bool = True) -> None:
        self.side = side
        self.holding, self.done = threading.Event(), threading.Event()
        self.token: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if started:
            assert self.holding.wait(10), "the other owner did not acquire"

    def _run(self) -> None:
        handle = self.side()
        with handle:  # type: ignore[attr-defined]
            self.token = handle.fencing_token  # type: ignore[attr-defined]
            self.holding.set()
            self.done.wait(30)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)


@contextmanager
def owners(*sides: Callable[[], object]) -> Iterator[list[Owner]]:
    started = [Owner(side) for side in sides]
    try:
        yield started
    finally:
        for owner in started:
            owner.stop()


def until_queued(using: str, count: int) -> None:
    """Wait until ``count`` owners wait for ``NAME``, in the backend's own queue."""
    eventually(lambda: queued(locks[using], NAME) == count)


def try_side(side: Callable[[], object]) -> bool:
    """Return whether another owner gets ``side`` at once (and let it go again)."""

    def attempt() -> bool:
        handle = side()
        got = bool(handle.acquire(blocking=False))  # type: ignore[attr-defined]
        if got:
            handle.release()  # type: ignore[attr-defined]
        return got

    return in_thread(attempt)


# Who may hold together -----------------------------------------------------------------------


def test_rwlock__readers_hold_together(using: str) -> None:
    rw = rwlock(NAME, using=using)
    assert isinstance(rw, ReadWriteLock)
    with owners(rw.read, rw.read, rw.read):
        with rw.read() as mine:
            assert mine.owned()
            holders = list(locks[using].iter_locks(NAME))
            assert len(holders) == 4
            assert {info.mode for info in holders} == {"read"}


def test_rwlock__a_writer_excludes_readers_and_writers(using: str) -> None:
    rw = rwlock(NAME, using=using)
    with owners(rw.write) as [writer]:
        assert not try_side(rw.read)
        assert not try_side(rw.write)
        assert not try_side(lambda: lock(NAME, using=using))
        [info] = locks[using].iter_locks(NAME)
        assert info.mode == "write"
        assert info.fencing_token == writer.token
    assert try_side(rw.read)
    assert try_side(rw.write)


def test_rwlock__a_reader_excludes_writers(using: str) -> None:
    rw = rwlock(NAME, using=using)
    with owners(rw.read):
        assert not try_side(rw.write)
        assert try_side(rw.read)
    assert try_side(rw.write)


def test_rwlock__a_waiting_writer_stops_new_readers(using: str) -> None:
    rw = rwlock(NAME, using=using)
    with owners(rw.read) as [reader]:
        writer = Owner(rw.write, started=False)
        until_queued(using, 1)
        assert not try_side(rw.read), "a new reader passed a waiting writer"
        late_reader = Owner(rw.read, started=False)
        until_queued(using, 2)
        reader.stop()
        assert writer.holding.wait(10), "the writer was not handed the lock"
        assert not late_reader.holding.is_set()
        writer.stop()
        assert late_reader.holding.wait(10), "the reader queued behind the writer never got in"
        assert writer.token is not None
        assert late_reader.token is not None
        assert late_reader.token > writer.token
        late_reader.stop()


def test_rwlock__a_writers_release_hands_the_lock_to_every_reader_queued_before_the_next_writer(
    using: str,
) -> None:
    rw = rwlock(NAME, using=using)
    backend = locks[using]
    with owners(rw.write) as [first_writer]:
        readers = [Owner(rw.read, started=False) for _ in range(3)]
        until_queued(using, 3)
        second_writer = Owner(rw.write, started=False)
        until_queued(using, 4)
        last_reader = Owner(rw.read, started=False)
        until_queued(using, 5)
        first_writer.stop()
        for reader in readers:
            assert reader.holding.wait(10)
        # The three readers hold together; the writer queued after them, and the reader after
        # it, still wait.
        assert {info.mode for info in backend.iter_locks(NAME)} == {"read"}
        assert len(list(backend.iter_locks(NAME))) == 3
        assert not second_writer.holding.is_set()
        assert not last_reader.holding.is_set()
        for reader in readers:
            reader.stop()
        assert second_writer.holding.wait(10)
        assert not last_reader.holding.is_set()
        second_writer.stop()
        assert last_reader.holding.wait(10)
        last_reader.stop()


# Reentrancy and upgrades ---------------------------------------------------------------------


def test_rwlock__a_writer_may_also_read(using: str) -> None:
    rw = rwlock(NAME, using=using)
    with rw.write() as writer:
        token = writer.fencing_token
        with rw.read() as reader:
            assert reader.fencing_token == token  # one hold, counted twice
            assert not try_side(rw.read)
        assert writer.owned()
        assert not try_side(rw.read)
    assert not rw.write().owned()
    assert try_side(rw.read)


def test_rwlock__a_reader_cannot_upgrade_and_keeps_its_read_hold(using: str) -> None:
    rw = rwlock(NAME, using=using)
    with rw.read() as reader:
        with pytest.raises(LockUpgradeError) as caught:
            rw.write().acquire(timeout=5)
        assert caught.value.lock_name == NAME
        assert "for writing" in str(caught.value)
        assert "holds it for reading" in str(caught.value)
        assert isinstance(caught.value, RuntimeError)
        assert reader.owned()
        assert queued(locks[using], NAME) == 0
        with pytest.raises(LockUpgradeError, match="holds it for reading"):
            lock(NAME, using=using).acquire(blocking=False)  # a plain lock is a writer too
        assert try_side(rw.read)  # still a read hold: readers share it
    assert try_side(rw.write)


def test_rwlock__a_stricter_request_over_a_hold_the_owner_does_not_know_is_no_upgrade(
    using: str,
) -> None:
    # A read hold left by an acquire its owner saw fail (holds=0 says it knows of none) is
    # not taken over by a write: it is dropped, and the write is taken afresh.
    engine = locks[using]
    shared = AcquireRequest(ttl=30, limit=SHARED, holds=0)
    assert engine.acquire(NAME, "owner", shared).acquired
    result = engine.acquire(NAME, "owner", AcquireRequest(ttl=30, limit=1, holds=0))
    assert result.acquired
    assert result.holds == 1
    assert not try_side(rw_read(using))
    # Given its holds (1), the same owner asking to write over its read is refused.
    engine.release(NAME, "owner", ReleaseRequest(holds=1))
    assert engine.acquire(NAME, "owner", shared).acquired
    refused = engine.acquire(NAME, "owner", AcquireRequest(ttl=30, limit=1, holds=1))
    assert refused.stricter
    assert not refused.acquired
    assert engine.release(NAME, "owner", ReleaseRequest(holds=1)) == 0
    assert not lock(NAME, using=using).locked()


def rw_read(using: str) -> Callable[[], object]:
    return rwlock(NAME, using=using).read


# Fencing, fair order, loss -------------------------------------------------------------------


def test_rwlock__reads_and_writes_share_one_sequence_of_fencing_tokens(using: str) -> None:
    rw = rwlock(NAME, using=using)
    tokens = []
    for side in (rw.read, rw.write, rw.read, rw.read, rw.write):
        with side() as handle:
            tokens.append(handle.fencing_token)
    with owners(rw.read) as [first]:
        with rw.read() as second:
            tokens += [first.token, second.fencing_token]
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)


@pytest.mark.needs("fair_order")
def test_rwlock__fair_serves_readers_and_writers_in_arrival_order(using: str) -> None:
    rw = rwlock(NAME, using=using, fair=True)
    backend = locks[using]
    with owners(rw.write) as [holder]:
        waiting: list[Owner] = []
        for side in (rw.read, rw.write, rw.read, rw.read):
            waiting.append(Owner(side, started=False))
            until_queued(using, len(waiting))
        first_reader, writer, *readers = waiting
        holder.stop()
        assert first_reader.holding.wait(10)
        assert not any(owner.holding.is_set() for owner in (writer, *readers))
        first_reader.stop()
        assert writer.holding.wait(10)
        assert not any(owner.holding.is_set() for owner in readers)
        writer.stop()
        for reader in readers:  # the two last readers hold together
            assert reader.holding.wait(10)
        assert len(list(backend.iter_locks(NAME))) == 2
        for reader in readers:
            reader.stop()


def test_rwlock__a_reader_whose_lease_ended_is_told(using: str) -> None:
    rw = rwlock(NAME, using=using, ttl=0.3, auto_renew=False)
    with pytest.raises(LockLostError):
        with rw.read():
            eventually(lambda: try_side(rw.write), timeout=5)
    assert rw.read().lost


# Arguments and backends ----------------------------------------------------------------------


@pytest.mark.parametrize("factory", [rwlock, arwlock])
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"limit": 2},
            "rwlock() got an unexpected keyword argument 'limit' (limit: only lock() takes it)",
        ),
        ({"limit": 1}, "unexpected keyword argument 'limit'"),
        ({"min_hold": 5}, "unexpected keyword argument 'min_hold' (min_hold: only lock()"),
        (
            {"limit": 1, "min_hold": 0},
            "unexpected keyword arguments 'limit', 'min_hold' (limit and min_hold: only lock() "
            "takes them)",
        ),
        ({"lease": 5}, "unexpected keyword argument 'lease'; it takes auto_renew, blocking"),
    ],
)
def test_rwlock__takes_only_the_options_its_sides_share(
    factory: Any, arguments: dict[str, Any], message: str, using: str
) -> None:
    # A TypeError, as Python raises for any unexpected keyword; nothing is built.
    with pytest.raises(LockArgumentTypeError) as caught:
        factory(NAME, using=using, **arguments)
    assert message in str(caught.value)
    assert isinstance(caught.value, TypeError)


def test_rwlock__checks_its_options_as_lock_does(using: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match="ttl"):
        rwlock(NAME, using=using, ttl=-1)
    with pytest.raises(LockArgumentTypeError, match="fair"):
        rwlock(NAME, using=using, fair="yes")  # type: ignore[arg-type]
    rw = rwlock(NAME, using=using)
    assert rw.read() is rw.read()
    assert rw.write() is rw.write()
    assert repr(rw) == f"<ReadWriteLock {NAME!r} using={using!r}>"


def test_rwlock__sides_are_decorators(using: str) -> None:
    rw = rwlock(NAME, using=using)

    @rw.read()
    def report() -> bool:
        return not try_side(rw.write) and try_side(rw.read)

    assert report()
    assert try_side(rw.write)


# asyncio --------------------------------------------------------------------------------------


async def test_arwlock__tasks_read_together_and_a_writer_waits_for_them(using: str) -> None:
    rw = arwlock(NAME, using=using)
    assert isinstance(rw, AsyncReadWriteLock)
    both_read = asyncio.Event()
    holding = 0
    events: list[str] = []

    async def reader() -> None:
        nonlocal holding
        async with rw.read():
            holding += 1
            if holding == 2:
                both_read.set()
            await asyncio.wait_for(both_read.wait(), 10)
            await asyncio.sleep(0.05)
            events.append("read done")

    async def writer() -> None:
        await both_read.wait()
        async with rw.write():
            events.append("write")

    await asyncio.gather(reader(), reader(), writer())
    assert events == ["read done", "read done", "write"]


async def test_arwlock__a_task_reading_cannot_write(using: str) -> None:
    rw = arwlock(NAME, using=using)
    async with rw.read():
        with pytest.raises(LockUpgradeError):
            await rw.write().acquire(timeout=1)
    async with rw.write(), rw.read() as reader:
        assert await reader.owned()


def test_rwlock__blocking_and_asyncio_sides_exclude_each_other(using: str) -> None:
    with owners(rwlock(NAME, using=using).write):

        async def read_at_once() -> bool:
            return await arwlock(NAME, using=using).read().acquire(blocking=False)

        started = time.monotonic()
        assert asyncio.run(read_at_once()) is False
        assert time.monotonic() - started < 5
