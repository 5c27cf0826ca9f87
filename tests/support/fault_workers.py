"""Code the fault tests run in spawned processes (each a fresh interpreter).

Every worker reports what it did to Redis lists under the test's prefix, with the fencing
token and a monotonic timestamp in ns (one clock for every process of the machine), so the
test can see from outside what ran when.
"""

from __future__ import annotations

import os
import time
from typing import Any

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


def hold_with_min_hold(
    setting: dict[str, Any],
    alias: str,
    url: str,
    prefix: str,
    name: str,
    ttl: float,
    min_hold: float,
) -> None:
    """Hold ``name`` on ``alias`` of ``setting`` (LOCKS) with ``min_hold``, renewed, until killed.

    Reports "<prefix>:holding" (on the Redis at ``url``) once it holds the lock.
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    import redis
    from django.test import override_settings

    django.setup()
    override_settings(LOCKS=setting).enable()
    from django_redis_lock import lock

    client = redis.Redis.from_url(url)
    with lock(name, using=alias, ttl=ttl, min_hold=min_hold):
        client.rpush(f"{prefix}:holding", "1")
        time.sleep(120)  # the test kills this process now
