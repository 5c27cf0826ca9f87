"""Code the leader-election tests run in spawned processes (each a fresh interpreter).

Each process reports to Redis lists under the test's prefix, with its term number and a
monotonic time in ns (one clock for every process of the machine).
"""

from __future__ import annotations

import os
import time

from .workers import setup_django


def lead_in_turns(url: str, prefix: str, name: str, worker: int, seconds: float) -> None:
    """For ``seconds`` once started, campaign, act for 50 ms while the term holds, then resign.

    Each term is logged as "<worker> <term> <start ns> <end ns>": the test checks that no two
    terms overlapped and that their numbers grow in time order.
    """
    setup_django(url, prefix)
    import redis

    from django_redis_lock import leader

    client = redis.Redis.from_url(url)
    campaign = leader(name, ttl=2, timeout=30)
    # Counted from here, not from the start of the test: a slow start takes none of it.
    until_ns = time.monotonic_ns() + int(seconds * 1e9)
    while time.monotonic_ns() < until_ns:
        with campaign as term:
            start = time.monotonic_ns()
            term.check()
            time.sleep(0.05)
            term.check()
            end = time.monotonic_ns()
        client.rpush(f"{prefix}:terms", f"{worker} {term.number} {start} {end}")


def lead_and_act(url: str, prefix: str, name: str, ttl: float) -> None:
    """Wait to be elected; report; then act every 10 ms for as long as the term lasts.

    Each act is logged with the time it was decided ("<ns>" on "<prefix>:acts"), after asking
    ``term.lost``; a term found lost is reported as "<term> <ns>" on "<prefix>:lost".
    """
    setup_django(url, prefix)
    import redis

    from django_redis_lock import LockLostError, leader

    client = redis.Redis.from_url(url)
    term = leader(name, ttl=ttl).acquire()
    assert term is not None
    client.rpush(f"{prefix}:elected", f"{os.getpid()} {term.number} {time.monotonic_ns()}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = time.monotonic_ns()
        try:
            term.check()
        except LockLostError:
            client.rpush(f"{prefix}:lost", f"{term.number} {time.monotonic_ns()}")
            return
        client.rpush(f"{prefix}:acts", str(now))
        time.sleep(0.01)
