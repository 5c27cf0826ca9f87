"""A blocking acquire never gives up before its timeout, whatever its backend's waits do."""

from __future__ import annotations

import asyncio
import time

from django.test import override_settings

from django_redis_lock import alock, lock
from django_redis_lock.backends.base import Grant
from django_redis_lock.backends.locmem import LocMemBackend
from tests.support.helpers import in_thread


class EarlyWaker(LocMemBackend):
    """LocMem whose waits end at once: a backend may end a wait before its timeout."""

    def wait(self, name: str, owner: str, timeout: float) -> Grant | None:
        return None

    async def await_grant(self, name: str, owner: str, timeout: float) -> Grant | None:
        return None


EARLY = {"early": {"BACKEND": f"{__name__}.EarlyWaker", "OPTIONS": {"key_prefix": "early"}}}


@override_settings(LOCKS=EARLY)
def test_timeout__not_cut_short_by_waits_that_end_early() -> None:
    with lock("early", using="early"):
        other = lock("early", using="early")
        started = time.monotonic()
        assert in_thread(lambda: other.acquire(timeout=0.2)) is False
        assert time.monotonic() - started >= 0.2


@override_settings(LOCKS=EARLY)
async def test_timeout__not_cut_short_by_awaited_waits_that_end_early() -> None:
    async with alock("early", using="early"):
        other = alock("early", using="early")
        started = time.monotonic()
        assert await asyncio.create_task(other.acquire(timeout=0.2)) is False
        assert time.monotonic() - started >= 0.2
