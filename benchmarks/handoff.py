"""Handoff latency: from a holder's release to the acquire of the process waiting for it.

Two processes play ping-pong on one lock. In each round the holder waits until the other
process is about to call ``acquire``, keeps the lock a little longer (``HOLD``, plus a random
part as long as redis-py's 0.1 s poll, so a polling waiter is caught at every phase of its
sleep), reads ``time.monotonic()`` and releases; the waiter reads ``time.monotonic()`` as
soon as its acquire returns. ``CLOCK_MONOTONIC`` is one clock for the whole machine on Linux,
so the two readings compare. The process that just released waits until the other has the
lock before it asks again, so every round measures a handoff, never a re-acquire.

The first row is a floor no lock can beat: a token passed through a Redis list (``RPUSH`` to
release, ``BLPOP`` to acquire), so one command wakes a process blocked on Redis, as a lock
handoff must.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from contention import percentile
from libraries import DJANGO_REDIS_LOCK, LIBRARIES, WAIT_LIMIT, Handle
from workers import Job, Pool

#: The least time a holder keeps the lock once the waiter is about to wait, in seconds.
HOLD = 0.002
#: The random part added to it (uniform), as long as redis-py's default poll interval.
HOLD_JITTER = 0.1


@dataclass(frozen=True)
class Contender:
    """A row of the table: a library's lock (None: the token floor) with some options."""

    key: str
    label: str
    library: str | None
    options: dict[str, Any] = field(default_factory=dict)


FLOOR = Contender("floor", "RPUSH/BLPOP token (floor)", None)
CONTENDERS: tuple[Contender, ...] = (
    FLOOR,
    *(Contender(key, library.label, key) for key, library in LIBRARIES.items()),
    # A lease no longer than what a handoff grants: no second round trip to lengthen it.
    Contender(
        "django_redis_lock_ttl5", "django-redis-lock ttl=5", DJANGO_REDIS_LOCK.key, {"ttl": 5}
    ),
)


def _token(client: redis.Redis[bytes], key: str, *, holder: bool) -> Handle:
    if holder:
        client.rpush(key, 1)  # the token, for the holder's first acquire to take

    def acquire() -> bool:
        return client.blpop([key], timeout=WAIT_LIMIT) is not None

    return Handle(acquire, lambda: client.rpush(key, 1))


def handoff(
    job: Job, *, library: str | None, options: dict[str, Any], rounds: int, me: int
) -> Any:
    """Play ``rounds`` rounds of ping-pong as process ``me`` (0 or 1); a job run in a worker."""
    client, other, rng = job.client, 1 - me, random.Random(me)
    if library is None:
        handle = _token(client, job.sync_key("token"), holder=me == 0)
    else:
        handle = LIBRARIES[library].handle(client, f"handoff:{job.job_id}", **options)

    def signal(what: str, process: int) -> str:
        return job.sync_key(f"{what}:{process}")

    def wait_for(what: str) -> None:
        if client.blpop([signal(what, other)], timeout=WAIT_LIMIT) is None:
            raise RuntimeError(f"the other process did not say {what!r} within {WAIT_LIMIT} s")

    holding = me == 0 and handle.acquire()
    releases: dict[int, float] = {}
    acquisitions: dict[int, float] = {}
    job.wait_for_start()
    try:
        for k in range(rounds):
            if k % 2 == me:  # this process holds the lock, and hands it over
                wait_for("waiting")
                time.sleep(HOLD + rng.random() * HOLD_JITTER)
                releases[k] = time.monotonic()
                handle.release()
                holding = False
                wait_for("acquired")
            else:
                client.rpush(signal("waiting", me), k)
                if not handle.acquire():
                    raise RuntimeError(f"the lock was not handed over in {WAIT_LIMIT} s")
                acquisitions[k] = time.monotonic()
                holding = True
                client.rpush(signal("acquired", me), k)
    finally:
        if holding:
            handle.release()
    return {"releases": releases, "acquisitions": acquisitions}


def run_contender(pool: Pool, contender: Contender, rounds: int) -> dict[str, Any]:
    """Measure ``rounds`` handoffs of one contender; return the latencies, in µs."""
    params = [
        {"library": contender.library, "options": contender.options, "rounds": rounds, "me": me}
        for me in (0, 1)
    ]
    timeout = rounds * (HOLD + HOLD_JITTER + 0.5) + 60
    results = pool.run(handoff, params, timeout=timeout)
    releases = {k: t for result in results for k, t in result["releases"].items()}
    acquisitions = {k: t for result in results for k, t in result["acquisitions"].items()}
    latencies = [(acquisitions[k] - releases[k]) * 1e6 for k in range(rounds)]
    row = {
        "contender": contender.key,
        "library": contender.library,
        "options": contender.options,
        "label": contender.label,
        "handoffs": rounds,
        "p50_us": round(percentile(latencies, 50), 1),
        "p99_us": round(percentile(latencies, 99), 1),
        "max_us": round(max(latencies), 1),
        "mean_us": round(sum(latencies) / rounds, 1),
    }
    print(
        f"handoff     {contender.label:<30}p50 {row['p50_us']:>10,.0f} us"
        f"  p99 {row['p99_us']:>10,.0f} us",
        file=sys.stderr,
    )
    return row


def add_ratios(rows: Sequence[dict[str, Any]], ping_us: float) -> None:
    """Add each latency as a multiple of one PING round trip, and of the token floor."""
    floor = next(row for row in rows if row["contender"] == FLOOR.key)
    for row in rows:
        row["ping_us"] = ping_us
        for stat in ("p50", "p99"):
            row[f"{stat}_rtts"] = round(row[f"{stat}_us"] / ping_us, 2)
            row[f"{stat}_vs_floor"] = round(row[f"{stat}_us"] / floor[f"{stat}_us"], 2)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the handoff rows as a plain-text table."""
    header = (
        f"{'lock':<28}{'p50 us':>9}{'p99 us':>9}{'max us':>9}{'p50 RTTs':>10}{'p99 RTTs':>10}"
        f"{'p50 vs floor':>14}{'p99 vs floor':>14}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['label']:<28}{row['p50_us']:>9,.0f}{row['p99_us']:>9,.0f}{row['max_us']:>9,.0f}"
            f"{row['p50_rtts']:>10.1f}{row['p99_rtts']:>10.1f}{row['p50_vs_floor']:>13.2f}x"
            f"{row['p99_vs_floor']:>13.2f}x"
        )
    lines += [
        "",
        f"{rows[0]['handoffs']} handoffs each. RTTs: latency / one PING round trip"
        f" ({rows[0]['ping_us']:.1f} us, from table 1).",
        f"The holder keeps the lock {HOLD * 1e3:g} ms + uniform(0, {HOLD_JITTER * 1e3:g} ms)"
        " after the waiter starts waiting.",
    ]
    return "\n".join(lines)
