"""Readers sharing a lock: processes cycling ``rwlock``'s read side on one name, beside ``lock``.

At each count of processes (:data:`READERS`), the processes loop as in ``contention.py``, all
on one name and starting together: acquire, a critical section, hold ``hold`` seconds,
release. Once on the read side of ``rwlock(name)``, which readers hold together, then on a
plain ``lock(name)``, which one process holds at a time. The critical section counts the
processes inside (``contention.GAUGE``: ``INCR`` on entering, ``DECR`` at the end of the
hold, two round trips as contention's read-modify-write): the most inside at once shows
whether the readers shared the name, and must be 1 for the lock. Read cycles per second, in
total and per process, are compared with the lock's cycles at as many processes. The same
loop with no lock at all (acquire and release do nothing) comes first: the most cycles the
machine allows that many processes, a floor for the readers. Each run is bracketed by two
``INFO`` snapshots (``servertime.py``): the Redis process's CPU per cycle, and how busy that
kept its one core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import contention
import redis
import servertime
from contention import GAUGE, Case
from libraries import DJANGO_REDIS_LOCK, NO_LOCK, READ
from workers import Pool

#: How many processes cycle, in turn: each time with no lock, on the read side, on a lock.
READERS = (1, 4, 16)


def cases(process_counts: Sequence[int]) -> list[Case]:
    """Return no lock, the read side and the lock at each count, counting those inside."""
    sides = (NO_LOCK, READ.library, DJANGO_REDIS_LOCK)
    return [Case(side, n, section=GAUGE) for n in process_counts for side in sides]


def run(
    pool: Pool,
    client: redis.Redis[bytes],
    process_counts: Sequence[int],
    seconds: float,
    hold: float,
) -> list[dict[str, Any]]:
    """Run every case for ``seconds``; return their rows, each compared with the lock's."""
    overhead = servertime.bracket_cpu(client)
    rows = []
    for case in cases(process_counts):
        before = servertime.snapshot(client)
        row = contention.run_case(pool, client, case, seconds, hold)
        cpu = servertime.spent(before, servertime.snapshot(client, closing=True), ()).cpu
        cpu_us = (cpu - overhead) * 1e6 / row["cycles"]
        row["per_process_per_s"] = round(row["acquisitions_per_s"] / row["processes"], 1)
        row["cpu_us_per_cycle"] = round(cpu_us, 1)
        row["redis_busy"] = round(cpu_us * row["acquisitions_per_s"] / 1e6, 3)
        rows.append(row)
    contention.add_ratios(rows, DJANGO_REDIS_LOCK, "vs_lock")
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the readers rows as a plain-text table."""
    header = (
        f"{'lock':<20}{'procs':>6}{'cycles/s':>10}{'per proc':>10}{'vs lock':>9}"
        f"{'wait p50':>10}{'wait p99':>10}{'Jain':>7}{'most inside':>13}{'left':>6}"
        f"{'CPU us':>8}{'Redis busy':>12}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['label']:<20}{row['processes']:>6}{row['acquisitions_per_s']:>10,.0f}"
            f"{row['per_process_per_s']:>10,.0f}{row['vs_lock']:>8.2f}x"
            f"{row['wait_p50_ms']:>8.2f}ms{row['wait_p99_ms']:>8.1f}ms{row['jain']:>7.3f}"
            f"{row['most_inside']:>13}{row['left_inside']:>6}{row['cpu_us_per_cycle']:>8.1f}"
            f"{row['redis_busy']:>12.0%}"
        )
    lines += [
        "",
        "cycles/s: acquire + critical section + hold + release, all processes; per proc: that"
        " / processes. vs lock: against the lock's cycles/s at as many processes.",
        "most inside: the most processes holding the name at once (INCR on entering, DECR at"
        " the end of the hold); 1 for the lock. left: counted in, never out (0).",
        "CPU us: the Redis process's user+sys CPU per cycle (every command of the run);"
        " Redis busy: that x cycles/s, the share of its one core.",
        "no lock (floor): the same loop, acquire and release doing nothing: what the machine"
        " allows as many processes.",
    ]
    return "\n".join(lines)
