"""lock_all / alock_all given up part way: every name taken is given back, on every backend.

Another owner holds the last name, so the names are taken one by one (a backend that takes
them all at once takes none here); then an error, a refusal, a cancellation or an
interruption comes while the first names are held, or while they are given back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from django_redis_lock import (
    BackendUnavailableError,
    alock_all,
    lock,
    lock_all,
    locks,
)
from django_redis_lock.backends.base import AcquireRequest
from tests.support.helpers import aeventually, queued

NAMES = ["back:a", "back:b", "back:c"]


def held_names(using: str) -> set[str]:
    return {name for name in NAMES if lock(name, using=using).locked()}


@pytest.fixture
def last_held_elsewhere(using: str) -> Iterator[None]:
    """Have another owner hold the last name for the test, and nothing held after it."""
    assert locks[using].acquire("back:c", "other", AcquireRequest(ttl=30)).acquired
    yield
    locks[using].force_release("back:c")
    assert held_names(using) == set()


def unavailable(*args: object) -> bool:
    raise BackendUnavailableError("The backend did not answer in time.", lock_name="back:b")


async def aunavailable(*args: object) -> bool:
    return unavailable()


@pytest.mark.usefixtures("last_held_elsewhere")
def test_lock_all__a_backend_error_on_one_name_gives_back_those_taken(using: str) -> None:
    multi = lock_all(NAMES, using=using)
    multi.locks[1]._acquire = unavailable  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailableError):
        multi.acquire()
    assert held_names(using) == {"back:c"}
    assert multi.fencing_tokens == {}


@pytest.mark.usefixtures("last_held_elsewhere")
async def test_alock_all__a_backend_error_on_one_name_gives_back_those_taken(using: str) -> None:
    multi = alock_all(NAMES, using=using)
    multi.locks[1]._acquire = aunavailable  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailableError):
        await multi.acquire()
    assert held_names(using) == {"back:c"}
    assert multi.fencing_tokens == {}


@pytest.mark.needs("waiter_queue")
@pytest.mark.usefixtures("last_held_elsewhere")
async def test_alock_all__cancelled_while_queued_for_a_name_leaves_no_hold_and_no_waiter(
    using: str,
) -> None:
    multi = alock_all(NAMES, using=using, timeout=30)
    waiting = asyncio.create_task(multi.acquire())
    await aeventually(lambda: queued(locks[using], "back:c") == 1, 10)
    assert held_names(using) == set(NAMES)  # a and b are held while it waits for c
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert held_names(using) == {"back:c"}
    assert queued(locks[using], "back:c") == 0


@pytest.mark.usefixtures("last_held_elsewhere")
def test_lock_all__a_failed_give_back_is_logged_and_the_others_still_given_back(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    multi = lock_all(NAMES, using=using)
    b = multi.locks[1]
    release = b.release

    def failing_release() -> None:
        release()
        raise BackendUnavailableError("The backend did not answer in time.", lock_name=b.name)

    b.release = failing_release  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, "django_redis_lock"):
        assert multi.acquire(timeout=0.2) is False
    assert held_names(using) == {"back:c"}
    assert "Could not release lock 'back:b' while giving up the locks of" in caplog.text


@pytest.mark.usefixtures("last_held_elsewhere")
def test_lock_all__interrupted_while_giving_back_gives_back_the_rest_first(using: str) -> None:
    multi = lock_all(NAMES, using=using)
    b = multi.locks[1]
    release = b.release

    def interrupted_release() -> None:
        release()
        raise KeyboardInterrupt

    b.release = interrupted_release  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        multi.acquire(timeout=0.2)
    assert held_names(using) == {"back:c"}


@pytest.mark.usefixtures("last_held_elsewhere")
async def test_alock_all__cancelled_while_giving_back_gives_back_the_rest_first(
    using: str,
) -> None:
    multi = alock_all(NAMES, using=using)
    b = multi.locks[1]
    release = b.release

    async def cancelled_release() -> None:
        await release()
        raise asyncio.CancelledError

    b.release = cancelled_release  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(multi.acquire(timeout=0.2))
    assert held_names(using) == {"back:c"}
