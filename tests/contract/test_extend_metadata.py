"""``extend(..., metadata=...)``: a holder records new details with its hold, without releasing.

For an id learned only after the acquire (a task's id, assigned once its enqueue claim is
taken). Every test here runs on every backend (see conftest.py), through the blocking
primitive and its asyncio twin.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import pytest

from django_redis_lock.backends.base import (
    AcquireRequest,
    BaseLockBackend,
    LockInfo,
    holder_metadata,
)
from django_redis_lock.backends.locmem import LocMemBackend
from tests.support.helpers import eventually

BEFORE = holder_metadata(host="host-a", pid=1, thread="T-a", data={"task": None})
AFTER = holder_metadata(host="host-b", pid=2, thread="T-b", data={"task": "id-42"})

Extend = Callable[..., Awaitable[float | None]]


@pytest.fixture(params=["sync", "async"])
def extend(request: pytest.FixtureRequest, backend: BaseLockBackend) -> Extend:
    """``await extend(name, owner, ttl, **options)``: the backend's extend, blocking or asyncio."""
    if request.param == "async":
        return backend.aextend

    async def blocking(name: str, owner: str, ttl: float, **options: object) -> float | None:
        call = functools.partial(backend.extend, name, owner, ttl, **options)
        return await asyncio.to_thread(call)

    return blocking


def take(backend: BaseLockBackend, name: str, owner: str = "holder", ttl: float = 10) -> None:
    assert backend.acquire(name, owner, AcquireRequest(ttl=ttl, metadata=BEFORE)).acquired


def holder(backend: BaseLockBackend, name: str, owner: str = "holder") -> LockInfo:
    [info] = [info for info in backend.lock_info(name) if info.owner == owner]
    return info


def unchanged_hold(before: LockInfo, after: LockInfo) -> bool:
    """Return whether ``after`` is the same hold as ``before``: holds, token, acquired-at.

    Acquired-at may move by the moments between the masters' acquires: Redlock lists the
    record of the master with the majority's lease, which an extend may change.
    """
    moved = abs((after.acquired_at - before.acquired_at).total_seconds())
    same = (after.holds, after.fencing_token) == (before.holds, before.fencing_token)
    return same and moved < 0.5


async def test_extend__metadata_replaces_the_holders_record(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:replace"
    take(backend, name)
    take(backend, name)  # reentrant: two holds, which the new record keeps
    before = holder(backend, name)

    left = await extend(name, "holder", 20, replace=True, metadata=AFTER)

    assert left is not None
    assert 15 < left <= 20
    after = holder(backend, name)
    assert after.metadata == {"task": "id-42"}
    assert (after.host, after.pid, after.thread) == ("host-b", 2, "T-b")
    assert after.holds == 2
    assert unchanged_hold(before, after)
    assert backend.release(name, "holder") == 1
    assert holder(backend, name).metadata == {"task": "id-42"}, "a release keeps the record"


async def test_extend__metadata_with_an_added_lease(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:add"
    take(backend, name, ttl=5)
    before = holder(backend, name)

    left = await extend(name, "holder", 10, metadata=AFTER)

    assert left is not None
    assert 10 < left <= 15
    after = holder(backend, name)
    assert after.metadata == {"task": "id-42"}
    assert unchanged_hold(before, after)


async def test_extend__metadata_none_keeps_the_holders_record(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:keep"
    take(backend, name)
    assert await extend(name, "holder", 20, replace=True, metadata=AFTER) is not None
    before = holder(backend, name)

    left = await extend(name, "holder", 30, replace=True, metadata=None)

    assert left is not None
    assert 25 < left <= 30
    after = holder(backend, name)
    assert after.metadata == {"task": "id-42"}
    assert (after.host, after.pid, after.thread) == ("host-b", 2, "T-b")
    assert unchanged_hold(before, after)


async def test_extend__metadata_by_a_non_holder_returns_none_and_writes_nothing(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:stranger"
    take(backend, name)
    before = holder(backend, name)

    assert await extend(name, "stranger", 20, replace=True, metadata=AFTER) is None

    assert [info.owner for info in backend.lock_info(name)] == ["holder"]
    after = holder(backend, name)
    assert after.metadata == {"task": None}
    assert (after.host, after.pid, after.thread) == ("host-a", 1, "T-a")
    assert unchanged_hold(before, after)
    assert backend.ttl(name, "stranger") is None


async def test_extend__metadata_on_an_ended_lease_revives_nothing(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:ended"
    # A lease with room for a loaded machine: Redlock refuses one spent in acquiring it.
    take(backend, name, ttl=0.5)
    eventually(lambda: backend.ttl(name, "holder") is None)

    assert await extend(name, "holder", 20, replace=True, metadata=AFTER) is None

    assert backend.lock_info(name) == []
    assert not backend.locked(name)


@pytest.mark.needs("semaphores")
async def test_extend__metadata_changes_only_the_owners_record_in_a_semaphore(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:semaphore"
    for owner in ("first", "second"):
        request = AcquireRequest(ttl=10, metadata=BEFORE, limit=2)
        assert backend.acquire(name, owner, request).acquired
    other = holder(backend, name, "second")

    assert await extend(name, "first", 20, replace=True, metadata=AFTER) is not None

    assert holder(backend, name, "first").metadata == {"task": "id-42"}
    assert holder(backend, name, "second").metadata == {"task": None}
    assert unchanged_hold(other, holder(backend, name, "second"))


async def test_extend__renewal_keeps_the_metadata_an_extend_recorded(
    backend: BaseLockBackend, extend: Extend
) -> None:
    name = "extendmeta:renew"
    take(backend, name)
    assert await extend(name, "holder", 10, replace=True, metadata=AFTER) is not None
    before = holder(backend, name)

    [left] = await asyncio.to_thread(backend.renew, [(name, "holder", 20.0)])

    assert isinstance(left, float)
    assert 15 < left <= 20
    after = holder(backend, name)
    assert after.metadata == {"task": "id-42"}
    assert unchanged_hold(before, after)


class WrittenBefore(LocMemBackend):
    """A backend written before ``metadata`` existed: its extend does not take it."""

    def extend(  # type: ignore[override]
        self, name: str, owner: str, ttl: float, *, replace: bool = False
    ) -> float | None:
        return super().extend(name, owner, ttl, replace=replace)

    aextend = BaseLockBackend.aextend  # the default: the blocking extend, in a thread


async def test_aextend__default_still_extends_on_a_backend_without_metadata() -> None:
    backend = WrittenBefore()
    take(backend, "extendmeta:before")

    left = await backend.aextend("extendmeta:before", "holder", 20, replace=True)

    assert left is not None
    assert 15 < left <= 20
