"""Worker processes for tests/backends/test_rwlock_processes.py (spawned, fresh interpreters).

Every worker uses the read-write lock :data:`NAME`. Each log line is a JSON object on a Redis
list of the test's prefix; times are ``time.monotonic_ns()``, a clock every process of the
machine shares.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

from .workers import setup_django

#: The read-write lock every worker takes a side of.
NAME = "report:42"

#: How long a worker of the contention test waits for its side before it logs a refusal.
TIMEOUT = 20.0


def _client(url: str, prefix: str) -> Any:
    setup_django(url, prefix)
    import redis

    return redis.Redis.from_url(url, socket_timeout=None)


def contend(
    url: str, prefix: str, worker: int, seconds: float, mode: str, asynchronous: bool
) -> None:
    """Take the ``mode`` side ("read" or "write") again and again for ``seconds``.

    All workers start at once, when the test pushes one "go" for each. Each hold is logged
    ("held": mode, fencing token, when the acquire was called, start and end inside the
    hold), and so is each acquire that timed out ("refused").
    """
    client = _client(url, prefix)
    client.rpush(f"{prefix}:ready", str(worker))
    client.blpop([f"{prefix}:go"], timeout=120)
    log: list[dict[str, Any]] = []
    if asynchronous:
        asyncio.run(_acontend(mode, worker, seconds, log))
    else:
        _contend(mode, worker, seconds, log)
    client.rpush(f"{prefix}:log", *(json.dumps(entry) for entry in log))


def side_of(rw: Any, mode: str) -> Any:
    """Return the ``mode`` side ("read" or "write") of the read-write lock ``rw``."""
    return rw.read() if mode == "read" else rw.write()


def _hold(rng: random.Random, mode: str) -> float:
    # Readers hold long enough to overlap one another; a writer's work is short.
    return rng.uniform(0.01, 0.05) if mode == "read" else rng.uniform(0.002, 0.005)


def _pause(rng: random.Random, mode: str) -> float:
    # Writers come back every 0.1 to 0.3 s, leaving readers room between them.
    return rng.uniform(0, 0.02) if mode == "read" else rng.uniform(0.1, 0.3)


def _contend(mode: str, worker: int, seconds: float, log: list[dict[str, Any]]) -> None:
    from django_redis_lock import rwlock

    rw = rwlock(NAME, ttl=5, timeout=TIMEOUT)
    side = side_of(rw, mode)
    rng, until = random.Random(worker), time.monotonic() + seconds
    while time.monotonic() < until:
        asked = time.monotonic_ns()
        if side.acquire():
            start = time.monotonic_ns()
            time.sleep(_hold(rng, mode))
            log.append(_held(mode, side.fencing_token, asked, start))
            side.release()
        else:
            log.append(_refused(mode, asked))
        time.sleep(_pause(rng, mode))


async def _acontend(mode: str, worker: int, seconds: float, log: list[dict[str, Any]]) -> None:
    from django_redis_lock import arwlock

    rw = arwlock(NAME, ttl=5, timeout=TIMEOUT)
    side = side_of(rw, mode)
    rng, until = random.Random(worker), time.monotonic() + seconds
    while time.monotonic() < until:
        asked = time.monotonic_ns()
        if await side.acquire():
            start = time.monotonic_ns()
            await asyncio.sleep(_hold(rng, mode))
            log.append(_held(mode, side.fencing_token, asked, start))
            await side.release()
        else:
            log.append(_refused(mode, asked))
        await asyncio.sleep(_pause(rng, mode))


def _held(mode: str, token: int | None, asked: int, start: int) -> dict[str, Any]:
    return {
        "event": "held",
        "mode": mode,
        "pid": os.getpid(),
        "token": token,
        "asked": asked,
        "start": start,
        "end": time.monotonic_ns(),
    }


def _refused(mode: str, asked: int) -> dict[str, Any]:
    return {"event": "refused", "mode": mode, "pid": os.getpid(), "asked": asked,
            "gave_up": time.monotonic_ns()}  # fmt: skip


def hold_until_killed(url: str, prefix: str, mode: str, ttl: float) -> None:
    """Hold the ``mode`` side with renewal, report its fencing token, and wait to be killed."""
    client = _client(url, prefix)
    from django_redis_lock import rwlock

    rw = rwlock(NAME, ttl=ttl)
    with side_of(rw, mode) as side:
        client.rpush(f"{prefix}:holding", str(side.fencing_token))
        time.sleep(120)  # the test kills this process meanwhile


def wait_to_write(url: str, prefix: str) -> None:
    """Wait for the write side; log if it is ever taken (the test kills this process first)."""
    client = _client(url, prefix)
    from django_redis_lock import rwlock

    with rwlock(NAME, ttl=30, timeout=60).write():
        client.rpush(f"{prefix}:wrote", str(os.getpid()))


def take_in_turn(url: str, prefix: str, tag: str, mode: str, hold: float) -> None:
    """Take the ``mode`` side in fair order once the test says "go:<tag>"; log the hold."""
    client = _client(url, prefix)
    from django_redis_lock import rwlock

    rw = rwlock(NAME, ttl=30, timeout=60, fair=True)
    client.rpush(f"{prefix}:ready", tag)
    client.blpop([f"{prefix}:go:{tag}"], timeout=120)
    with side_of(rw, mode) as side:
        start = time.monotonic_ns()
        time.sleep(hold)
        entry = {"tag": tag, "mode": mode, "token": side.fencing_token, "start": start,
                 "end": time.monotonic_ns()}  # fmt: skip
    client.rpush(f"{prefix}:log", json.dumps(entry))
