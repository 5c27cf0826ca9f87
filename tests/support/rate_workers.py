"""Worker processes for tests/backends/test_rate_limit_processes.py (spawned, fresh
interpreters).

Each worker logs the server's time of every hit its rate limit admitted (seconds, to the
microsecond, as the script read it) to a Redis list of the test's prefix.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

from .workers import setup_django

#: The rate limit every worker hits.
NAME = "partner-api"


def _client(url: str, prefix: str) -> Any:
    setup_django(url, prefix)
    import redis

    return redis.Redis.from_url(url, socket_timeout=None)


def hammer(url: str, prefix: str, rate: str, seconds: float, asynchronous: bool) -> None:
    """Hit ``rate`` as fast as it admits, for ``seconds``; log every admission's server time.

    Each admitted hit is followed by 5 to 20 ms of work, as a call to a partner's API would
    be. All workers start at once, when the test pushes one "go" for each.
    """
    client = _client(url, prefix)
    client.rpush(f"{prefix}:ready", "1")
    client.blpop([f"{prefix}:go"], timeout=120)
    if asynchronous:
        times = asyncio.run(_ahammer(rate, seconds))
    else:
        from django_redis_lock import rate_limit

        handle, times = rate_limit(NAME, rate), []
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            admission = handle.admit()
            assert admission.admitted, admission
            times.append(admission.at)
            time.sleep(random.uniform(0.005, 0.02))
    client.rpush(f"{prefix}:log", json.dumps(times))


async def _ahammer(rate: str, seconds: float) -> list[float | None]:
    from django_redis_lock import arate_limit

    handle, times = arate_limit(NAME, rate), []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        admission = await handle.admit()
        assert admission.admitted, admission
        times.append(admission.at)
        await asyncio.sleep(random.uniform(0.005, 0.02))
    return times


def wait_for_a_slot(url: str, prefix: str, rate: str) -> None:
    """Take the one slot of ``rate``, then wait for the next (the test kills it meanwhile)."""
    client = _client(url, prefix)
    from django_redis_lock import rate_limit

    handle = rate_limit(NAME, rate)
    assert handle.acquire()
    client.rpush(f"{prefix}:waiting", "1")
    handle.acquire()
    client.rpush(f"{prefix}:admitted twice", "1")
