"""What the demo's processes share in Redis: key names, a plain client, and start signals.

The lock itself lives in ``django_redis_lock``; everything here is the demo's own data, kept
under ``<key_prefix>:demo:`` so one run can clear what the previous one left.
"""

from __future__ import annotations

import redis
from django.conf import settings
from django.core.management import CommandError

#: The one lock every worker contends for.
LOCK_NAME = "invoice:42"

#: Seconds a worker waits for the lock, or for a signal, before giving up.
ACQUIRE_TIMEOUT = 5.0
SIGNAL_TIMEOUT = 15.0


def redis_url() -> str:
    """Return the URL of the Redis the ``default`` lock backend uses."""
    url: str = settings.LOCKS["default"]["OPTIONS"]["url"]
    return url


def redis_client() -> redis.Redis:
    """Return a plain redis-py client of that Redis, answering str."""
    return redis.Redis.from_url(redis_url(), decode_responses=True, socket_timeout=None)


def demo_key(name: str) -> str:
    """Return the Redis key of the demo's value ``name``."""
    prefix = settings.LOCKS["default"]["OPTIONS"]["key_prefix"]
    return f"{prefix}:demo:{name}"


def clear(client: redis.Redis) -> None:
    """Delete every value a previous run of the demo left."""
    keys = list(client.scan_iter(match=demo_key("*")))
    if keys:
        client.delete(*keys)


def signal(client: redis.Redis, event: str, times: int = 1) -> None:
    """Tell ``times`` waiters of ``event`` that it happened."""
    client.rpush(demo_key(f"event:{event}"), *[event] * times)


def wait_for(client: redis.Redis, event: str) -> None:
    """Block until ``event`` is signalled; give up after ``SIGNAL_TIMEOUT`` seconds."""
    if client.blpop([demo_key(f"event:{event}")], timeout=SIGNAL_TIMEOUT) is None:
        raise CommandError(f"Gave up waiting for {event!r} after {SIGNAL_TIMEOUT:g}s.")
