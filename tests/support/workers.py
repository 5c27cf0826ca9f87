"""Code run in separate worker processes (spawned, so each is a fresh interpreter)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any


def setup_django(url: str, prefix: str, cluster_nodes: Sequence[str] = ()) -> None:
    """Configure Django in a spawned process, with LOCKS on the test's server and prefix.

    Given ``cluster_nodes``, the 'cluster' alias is on that Redis Cluster; 'valkey_client' is
    the test's server through the valkey client, as in the contract's parent process.
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.test import override_settings

    from .helpers import locks_setting

    django.setup()
    setting = locks_setting(url, prefix, cluster_nodes=cluster_nodes, valkey_client=True)
    override_settings(LOCKS=setting).enable()


def wait_for_lock(
    url: str,
    prefix: str,
    cluster_nodes: Sequence[str],
    using: str,
    name: str,
    tag: str,
    fair: bool,
) -> None:
    """Wait for ``name`` on alias ``using``, recording ``tag``; log the tag once served."""
    setup_django(url, prefix, cluster_nodes)
    import redis

    from django_redis_lock import lock

    with lock(name, using=using, fair=fair, timeout=60, metadata={"worker": tag}):
        redis.Redis.from_url(url, socket_timeout=None).rpush(f"{prefix}:served", tag)


def count_under_lock(url: str, prefix: str, worker: int, rounds: int) -> None:
    """Do ``rounds`` read-modify-write increments of a shared counter, each under the lock.

    Each hold is logged as "worker start end" (monotonic ns, a system-wide clock) so the
    test can check that no two holds overlapped.
    """
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    counter, log = f"{prefix}:counter", f"{prefix}:holds"
    guard = lock("shared-counter", ttl=10, timeout=60)
    for _ in range(rounds):
        with guard:
            start = time.monotonic_ns()
            value = int(client.get(counter) or 0)
            time.sleep(0.001)  # widen the window in which a lost update would happen
            client.set(counter, value + 1)
            end = time.monotonic_ns()
        client.rpush(log, f"{worker} {start} {end}")


def take_over_after_expiry(url: str, prefix: str, name: str) -> None:
    """Wait for ``name`` to be free, report the fencing token, hold until told to release."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    with lock(name, ttl=30, timeout=30) as held:
        client.rpush(f"{prefix}:taken", str(held.fencing_token))
        client.blpop([f"{prefix}:may-release"], timeout=30)
    client.rpush(f"{prefix}:released", "1")


def run(target: Any, *args: Any) -> None:
    """Entry point for spawned processes: call ``target`` with ``args``."""
    target(*args)


def wait_in_line(url: str, prefix: str, name: str, number: int) -> None:
    """Queue for ``name`` fairly; record the arrival order of acquisitions."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    with lock(name, fair=True, timeout=60):
        client.rpush(f"{prefix}:order", str(number))


def hold_a_slot(url: str, prefix: str, name: str, worker: int, rounds: int) -> None:
    """Take one of a semaphore's slots ``rounds`` times, logging each hold's interval."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    slot = lock(name, limit=3, ttl=10, timeout=60)
    client.rpush(f"{prefix}:ready", str(worker))
    client.blpop([f"{prefix}:go:{worker}"], timeout=60)
    for _ in range(rounds):
        with slot:
            start = time.monotonic_ns()
            time.sleep(0.02)
            end = time.monotonic_ns()
        client.rpush(f"{prefix}:slots", f"{start} {end}")


def hold_then_stall(url: str, prefix: str, name: str) -> None:
    """Hold ``name`` with renewal, report, then (after being frozen) leave the block."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import LockLostError, lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    outcome = "kept"
    try:
        with lock(name, ttl=0.5) as held:
            client.rpush(f"{prefix}:holding", str(held.fencing_token))
            # The test freezes this process now (SIGSTOP), past the lease, then resumes it.
            client.blpop([f"{prefix}:resumed"], timeout=60)
    except LockLostError as exc:
        outcome = f"lost: {exc}"
    client.rpush(f"{prefix}:outcome", outcome)


def hold_until_told(url: str, prefix: str, name: str) -> None:
    """Hold ``name`` with the blocking lock; report the token; release when told to.

    Just before releasing, push the time (monotonic ns, a system-wide clock) to
    "<prefix>:releasing", so the test can check that nobody acquired before it.
    """
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    with lock(name, ttl=30) as held:
        client.rpush(f"{prefix}:holding", str(held.fencing_token))
        client.blpop([f"{prefix}:may-release"], timeout=60)
        client.rpush(f"{prefix}:releasing", str(time.monotonic_ns()))


def try_then_wait(url: str, prefix: str, name: str) -> None:
    """Try ``name`` once without waiting (report "1"/"0"), then wait for it and report
    "<fencing token> <acquired at, monotonic ns>" before releasing it."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url, socket_timeout=None)
    probe = lock(name, blocking=False)
    got = probe.acquire()
    client.rpush(f"{prefix}:tried", "1" if got else "0")
    if got:
        probe.release()
    with lock(name, ttl=30, timeout=30) as held:
        client.rpush(f"{prefix}:taken", f"{held.fencing_token} {time.monotonic_ns()}")


def acount_under_lock(url: str, prefix: str, worker: str, tasks: int, rounds: int) -> None:
    """``count_under_lock`` with ``alock``: ``tasks`` asyncio tasks, ``rounds`` holds each.

    Each task is its own owner, so the tasks of this process exclude each other too. Holds
    are logged as "<worker>.<task> start end" on the same list as count_under_lock's.
    """
    setup_django(url, prefix)
    import asyncio

    import redis.asyncio

    from django_redis_lock import alock

    counter, log = f"{prefix}:counter", f"{prefix}:holds"

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        guard = alock("shared-counter", ttl=10, timeout=60)

        async def count(task: int) -> None:
            for _ in range(rounds):
                async with guard:
                    start = time.monotonic_ns()
                    value = int(await client.get(counter) or 0)
                    await asyncio.sleep(0.001)  # let the other tasks run meanwhile
                    await client.set(counter, value + 1)
                    end = time.monotonic_ns()
                await client.rpush(log, f"{worker}.{task} {start} {end}")

        try:
            await asyncio.gather(*(count(task) for task in range(tasks)))
        finally:
            await client.aclose()

    asyncio.run(main())
