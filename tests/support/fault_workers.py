"""Code the fault tests run in spawned processes (each a fresh interpreter).

Every worker reports what it did to Redis lists under the test's prefix, with the fencing
token and a monotonic timestamp in ns (one clock for every process of the machine), so the
test can see from outside what ran when.
"""

from __future__ import annotations

import time

from .workers import setup_django


def hold_and_log(url: str, prefix: str, name: str, ttl: float, hold: float) -> None:
    """Acquire ``name`` (waiting as long as it takes), log entry and exit, hold ``hold`` s."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import LockLostError, lock

    client = redis.Redis.from_url(url)
    handle = lock(name, ttl=ttl, timeout=120, auto_renew=False)
    client.rpush(f"{prefix}:ready", "1")
    try:
        with handle:
            client.rpush(f"{prefix}:entered", f"{handle.fencing_token} {time.monotonic_ns()}")
            client.rpush(f"{prefix}:lease", str(handle.ttl()))
            time.sleep(hold)
            client.rpush(f"{prefix}:left", str(time.monotonic_ns()))
    except LockLostError:
        client.rpush(f"{prefix}:lost", "1")


def take_and_release(url: str, prefix: str, name: str, hold: float) -> None:
    """Take ``name`` once the caller's lease has ended, hold it ``hold`` s, release it."""
    setup_django(url, prefix)
    import redis

    from django_redis_lock import lock

    client = redis.Redis.from_url(url)
    with lock(name, ttl=30, timeout=30) as held:
        client.rpush(f"{prefix}:taken", str(held.fencing_token))
        time.sleep(hold)
    client.rpush(f"{prefix}:released", "1")
