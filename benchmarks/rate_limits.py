"""Rate limits: the Redis server time of one admission, one core's ceiling, bytes per key.

1. The server time of one admitted hit and of one refused hit (``rate.lua``, the top-level
   ``EVALSHA`` usec in ``INFO commandstats``, and the server's CPU), beside one
   acquire+release cycle of ``lock()``, over ``cycles`` of each in one process.
2. A hot key: :data:`PROCESSES` processes hitting one rate limit whose limit is never
   reached, for ``seconds``: admissions per second, how busy the server was, its CPU per
   admission, and the admissions per second one busy core would serve (one second of CPU
   over the CPU of an admission).
3. The memory of one rate limit's key (``MEMORY USAGE``) at the most it holds: ``"10/s"``
   after ten hits in ten buckets, and ``"50000/d"`` with every one of its 65 buckets in the
   window (a day of traffic, written as the script writes it), and what is left once a key
   has been idle a period (nothing).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import redis
import servertime
from workers import Job, Pool

#: How many processes hit the hot key at once.
PROCESSES = 16

#: A rate no run reaches, for the hot key and for the admitted hit's server time.
UNREACHED = "1000000000/s"


def hit_hot_key(job: Job, *, seconds: float) -> int:
    """Hit the hot key for ``seconds``; return the admissions (a worker's job)."""
    from django_redis_lock import rate_limit

    handle = rate_limit("bench:hot", UNREACHED, blocking=False)
    admitted = 0
    end = job.wait_for_start() + seconds
    while time.monotonic() < end:
        admitted += handle.acquire()
    return admitted


def server_time(client: redis.Redis[bytes], cycles: int) -> dict[str, Any]:
    """Return the server's usec and CPU per admitted hit, refused hit, and lock cycle."""
    from django_redis_lock import lock, rate_limit

    admitted = rate_limit("bench:admitted", UNREACHED, blocking=False)
    refused = rate_limit("bench:refused", "1/d", blocking=False)
    refused.acquire()
    held = lock("bench:cycle")

    def cycle() -> None:
        held.acquire()
        held.release()

    ops = {
        "admitted": admitted.acquire,
        "refused": refused.acquire,
        "lock_cycle": cycle,
    }
    overhead = servertime.bracket_cpu(client)
    found: dict[str, Any] = {}
    for key, op in ops.items():
        op()  # loaded, connected
        spent = servertime.measured(client, ("evalsha",), lambda op=op: _repeat(op, cycles))
        found[key] = {
            "usec": round(spent.usec / cycles, 2),
            "cpu_us": round((spent.cpu - overhead) * 1e6 / cycles, 2),
        }
    found["admitted_vs_lock_cycle"] = round(
        found["admitted"]["usec"] / found["lock_cycle"]["usec"], 2
    )
    return found


def _repeat(op: Any, times: int) -> None:
    for _ in range(times):
        op()


def hot_key(pool: Pool, client: redis.Redis[bytes], seconds: float) -> dict[str, Any]:
    """Run :data:`PROCESSES` processes on one key; return admissions/s and the ceiling."""
    overhead = servertime.bracket_cpu(client)
    before = servertime.snapshot(client)
    params = [{"seconds": seconds} for _ in range(PROCESSES)]
    admitted = sum(pool.run(hit_hot_key, params, timeout=seconds + 60))
    cpu = servertime.spent(before, servertime.snapshot(client, closing=True), ()).cpu - overhead
    cpu_us = cpu * 1e6 / admitted
    row = {
        "processes": PROCESSES,
        "admitted_per_s": round(admitted / seconds),
        "redis_busy": round(cpu / seconds, 3),
        "cpu_us_per_admission": round(cpu_us, 1),
        "ceiling_per_s": round(1e6 / cpu_us),
    }
    print(
        f"rate limit  hot key, {PROCESSES} processes {row['admitted_per_s']:>10,} /s",
        file=sys.stderr,
    )
    return row


def memory(client: redis.Redis[bytes]) -> dict[str, Any]:
    """Return the bytes of one rate limit's key at its fullest, and what an idle one leaves."""
    from django_redis_lock import locks, rate_limit
    from django_redis_lock.backends.base import Rate

    backend = locks["default"]
    ten = Rate(10, 1.0)
    (small,) = backend.rate_keys("bench:10/s", [ten])
    handle = rate_limit("bench:10/s", "10/s", blocking=False)
    for _ in range(10):
        handle.acquire()
        time.sleep(ten.granule_us / 1e6)  # a bucket of its own for each hit
    small_bytes = client.memory_usage(small)
    small_entries = client.llen(small)
    day = Rate(50000, 86400.0)
    (large,) = backend.rate_keys("bench:50000/d", [day])
    now = int(time.time() * 1e6)
    buckets = day.period_us // day.granule_us + 1
    entries = ["0 0 50000"] + [
        f"{now - day.period_us + 1 + i * day.granule_us} {50000 * (i + 1) // buckets} 50000"
        for i in range(buckets)
    ]
    client.delete(large)
    client.rpush(large, *entries)
    large_bytes = client.memory_usage(large)
    client.delete(large)
    idle = rate_limit("bench:idle", "5/s", blocking=False)
    idle.acquire()
    time.sleep(1.05)
    left = len(list(client.scan_iter(match=f"{backend.key_prefix}:{{=bench:idle}}*")))
    return {
        "10/s": {"entries": small_entries, "bytes": small_bytes},
        "50000/d": {"entries": len(entries), "bytes": large_bytes},
        "keys_left_after_an_idle_period": left,
    }


def run(pool: Pool, client: redis.Redis[bytes], seconds: float, cycles: int) -> dict[str, Any]:
    """Run the three measures; return their data."""
    return {
        "server_time": server_time(client, cycles),
        "hot_key": hot_key(pool, client, seconds),
        "memory": memory(client),
    }


def format_table(data: dict[str, Any]) -> str:
    """Return the rate-limit figures as plain text."""
    times, hot, mem = data["server_time"], data["hot_key"], data["memory"]
    return "\n".join(
        [
            "  server time per call        EVALSHA usec   server CPU us",
            *(
                f"  {label:<28}{times[key]['usec']:>12.2f}{times[key]['cpu_us']:>16.2f}"
                for key, label in (
                    ("admitted", "rate_limit, admitted hit"),
                    ("refused", "rate_limit, refused hit"),
                    ("lock_cycle", "lock() acquire+release"),
                )
            ),
            f"  an admission costs {times['admitted_vs_lock_cycle']:.2f}x a lock cycle's"
            " server time",
            "",
            f"  hot key, {hot['processes']} processes: {hot['admitted_per_s']:,} admissions/s,"
            f" Redis {hot['redis_busy']:.0%} busy, {hot['cpu_us_per_admission']} us CPU per"
            f" admission: one busy core serves about {hot['ceiling_per_s']:,} admissions/s",
            "",
            f'  memory per key: "10/s" {mem["10/s"]["bytes"]} bytes ({mem["10/s"]["entries"]}'
            f' entries), "50000/d" at its fullest {mem["50000/d"]["bytes"]:,} bytes'
            f" ({mem['50000/d']['entries']} entries); keys left after an idle period:"
            f" {mem['keys_left_after_an_idle_period']}",
        ]
    )
