"""Worker processes for tests/backends/test_lock_all_processes.py (spawned, fresh interpreters).

Each log line is a JSON object on the Redis list ``<prefix>:log``; times are
``time.monotonic_ns()``, a clock every process of the machine shares.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

from .workers import setup_django

#: The names every worker picks its subsets from.
NAMES = [f"acct:{n}" for n in range(1, 6)]


def contend(url: str, prefix: str, worker: int, seconds: float, asynchronous: bool) -> None:
    """Take lock_all over random subsets (2 or 3 names, random order) for ``seconds``.

    Logs each acquisition ("held": names, fencing tokens, start and end inside the hold) and
    each refusal ("refused": names, and which of them this owner still held afterwards).
    """
    setup_django(url, prefix)
    import redis

    client = redis.Redis.from_url(url, socket_timeout=None)
    client.rpush(f"{prefix}:ready", str(worker))
    client.blpop([f"{prefix}:go"], timeout=120)
    client.rpush(f"{prefix}:go", "1")  # pass the start on to the next worker
    log: list[dict[str, Any]] = []
    if asynchronous:
        asyncio.run(_acontend(worker, seconds, log))
    else:
        _contend(worker, seconds, log)
    client.rpush(f"{prefix}:log", *(json.dumps(entry) for entry in log))


def _choice(chooser: random.Random) -> tuple[list[str], float | None, float]:
    names = chooser.sample(NAMES, chooser.randint(2, 3))
    return names, chooser.choice([None, 0.2, 1.0, 3.0]), chooser.uniform(0, 0.02)


def _contend(worker: int, seconds: float, log: list[dict[str, Any]]) -> None:
    from django_redis_lock import lock, lock_all

    chooser, until = random.Random(worker), time.monotonic() + seconds
    while time.monotonic() < until:
        names, timeout, hold = _choice(chooser)
        multi = lock_all(names, ttl=5, timeout=timeout)
        if multi.acquire():
            start = time.monotonic_ns()
            time.sleep(hold)
            entry = _held(worker, names, multi.fencing_tokens, start)
            multi.release()
        else:
            kept = [name for name in names if lock(name).owned()]
            entry = {"event": "refused", "pid": os.getpid(), "names": names, "kept": kept}
        log.append(entry)


async def _acontend(worker: int, seconds: float, log: list[dict[str, Any]]) -> None:
    from django_redis_lock import alock, alock_all

    chooser, until = random.Random(worker), time.monotonic() + seconds
    while time.monotonic() < until:
        names, timeout, hold = _choice(chooser)
        multi = alock_all(names, ttl=5, timeout=timeout)
        if await multi.acquire():
            start = time.monotonic_ns()
            await asyncio.sleep(hold)
            entry = _held(worker, names, multi.fencing_tokens, start)
            await multi.release()
        else:
            kept = [name for name in names if await alock(name).owned()]
            entry = {"event": "refused", "pid": os.getpid(), "names": names, "kept": kept}
        log.append(entry)


def _held(worker: int, names: list[str], tokens: dict[str, int], start: int) -> dict[str, Any]:
    return {
        "event": "held",
        "worker": worker,
        "pid": os.getpid(),
        "names": names,
        "tokens": tokens,
        "start": start,
        "end": time.monotonic_ns(),
    }


def hold_until_killed(url: str, prefix: str, names: list[str], ttl: float) -> None:
    """Hold lock_all(names) with renewal, report its fencing tokens, and wait to be killed."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock_all

    client = redis.Redis.from_url(url, socket_timeout=None)
    with lock_all(names, ttl=ttl) as multi:
        client.rpush(f"{prefix}:holding", json.dumps(multi.fencing_tokens))
        time.sleep(120)  # the test kills this process meanwhile
