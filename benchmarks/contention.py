"""Several processes contending for one lock: throughput, time spent waiting, fairness, order.

Every process loops for a fixed time, all starting at the same instant: acquire (blocking),
a critical section, release. The critical section reads a counter and writes it back plus one
(two round trips), a read-modify-write that loses updates if two processes are ever inside at
once, so the run also checks mutual exclusion; then it sleeps until it has held the lock for
``hold`` seconds (1 ms by default), as a short real critical section would.

A case may instead count the processes inside (:data:`GAUGE`: ``INCR`` on entering, ``DECR``
at the end of the hold, also two round trips), for locks that several may hold at once:
``readers.py`` runs ``rwlock``'s read side so, beside ``lock``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import libraries
import redis
from libraries import DJANGO_REDIS_LOCK, LIBRARIES, REDIS_PY, WAIT_LIMIT, Library
from workers import Job, Pool

#: An acquisition is out of order if its process began waiting more than this after another
#: process that was still waiting when it got the lock (the slack absorbs the time between a
#: process reading the clock and its request reaching Redis).
ORDER_SLACK = 0.001
#: How many processes contend in the ``fair=True`` case (at most).
FAIR_PROCESSES = 16


class Section(NamedTuple):
    """A critical section: ``enter`` once the lock is held, ``leave`` before releasing it.

    Each is called with the Redis client and the case's counter key; ``enter`` returns how
    many processes are inside, itself included, or 0 if it does not count them.
    """

    enter: Callable[[redis.Redis[bytes], str], int]
    leave: Callable[[redis.Redis[bytes], str], object]


def update_counter(client: redis.Redis[bytes], counter: str) -> int:
    """Read the counter and write it back plus one: lost if two are ever inside at once."""
    client.set(counter, int(client.get(counter) or 0) + 1)
    return 0


def count_in(client: redis.Redis[bytes], counter: str) -> int:
    """Count this process in; return how many are inside now, itself included."""
    return int(client.incr(counter))


def count_out(client: redis.Redis[bytes], counter: str) -> object:
    """Count this process out."""
    return client.decr(counter)


#: The critical sections, by name: a read-modify-write of a counter (checks mutual
#: exclusion: no update lost), or a count of the processes inside (the most at once).
UPDATE, GAUGE = "update", "gauge"
SECTIONS: dict[str, Section] = {
    UPDATE: Section(update_counter, lambda client, counter: None),
    GAUGE: Section(count_in, count_out),
}


@dataclass(frozen=True)
class Case:
    """One contention run: ``processes`` processes on one lock of ``library``."""

    library: Library
    processes: int
    fair: bool = False
    section: str = UPDATE

    @property
    def key(self) -> str:
        """Return an identifier, also used in the counter's name."""
        counted = "" if self.section == UPDATE else f":{self.section}"
        return f"{self.library.key}:{self.processes}{':fair' if self.fair else ''}{counted}"

    @property
    def label(self) -> str:
        """Return the library's name, with fair=True when it is."""
        return f"{self.library.label}{' fair=True' if self.fair else ''}"


def cases(process_counts: Sequence[int]) -> list[Case]:
    """Return every library at each count, and django-redis-lock fair at the largest."""
    found = [Case(library, n) for n in process_counts for library in LIBRARIES.values()]
    return [*found, Case(DJANGO_REDIS_LOCK, fair_at(process_counts), fair=True)]


def fair_at(process_counts: Sequence[int]) -> int:
    """Return how many processes contend in the ``fair=True`` case: 16, or the most below."""
    return max([n for n in process_counts if n <= FAIR_PROCESSES] or process_counts)


def contend(
    job: Job,
    *,
    library: str,
    name: str,
    fair: bool,
    seconds: float,
    hold: float,
    counter: str,
    section: str = UPDATE,
) -> Any:
    """Loop acquire, critical section, hold, release for ``seconds`` (a job run in a worker)."""
    lib = libraries.library(library)
    handle = lib.handle(job.client, name, **({"fair": True} if fair else {}))
    enter, leave = SECTIONS[section]
    client = job.client
    entered_at: list[float] = []
    acquired_at: list[float] = []
    most = 0
    start = job.wait_for_start()
    end = start + seconds
    while (entered := time.monotonic()) < end:
        if not handle.acquire():
            raise RuntimeError(f"{lib.label} did not acquire {name!r} within {WAIT_LIMIT} s")
        acquired = time.monotonic()
        most = max(most, enter(client, counter))
        time.sleep(max(0.0, acquired + hold - time.monotonic()))
        leave(client, counter)
        handle.release()
        entered_at.append(entered)
        acquired_at.append(acquired)
    return {"start": start, "entered": entered_at, "acquired": acquired_at, "most": most}


def percentile(values: Sequence[float], percent: int) -> float:
    """Return the ``percent``-th percentile of ``values`` (inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def jain(counts: Sequence[int]) -> float:
    """Return Jain's fairness index of ``counts``: 1 when all are equal, 1/n when one has all."""
    squares = sum(count * count for count in counts)
    return sum(counts) ** 2 / (len(counts) * squares) if squares else 1.0


def out_of_order(entries: Sequence[tuple[float, float]]) -> int:
    """Count the ``(entered, acquired)`` acquisitions that overtook a process still waiting.

    One overtakes another that began waiting more than :data:`ORDER_SLACK` earlier and got
    the lock later. FIFO order means none.
    """
    by_acquisition = sorted(entries, key=lambda entry: entry[1])
    earliest_later = float("inf")  # the earliest start of waiting among later acquisitions
    count = 0
    for entered, _ in reversed(by_acquisition):
        if earliest_later < entered - ORDER_SLACK:
            count += 1
        earliest_later = min(earliest_later, entered)
    return count


def run_case(
    pool: Pool, client: redis.Redis[bytes], case: Case, seconds: float, hold: float
) -> dict[str, Any]:
    """Run one contention case in ``case.processes`` workers; return its summary row."""
    name = f"contended:{case.processes}{':fair' if case.fair else ''}"
    counter = f"bench-counter:{case.key}"
    params = {
        "library": case.library.key,
        "name": name,
        "fair": case.fair,
        "seconds": seconds,
        "hold": hold,
        "counter": counter,
        "section": case.section,
    }
    results = pool.run(contend, [params] * case.processes, timeout=seconds + WAIT_LIMIT + 30)
    written = int(client.get(counter) or 0)
    client.delete(counter)
    end = results[0]["start"] + seconds
    entries = [
        pair
        for result in results
        for pair in zip(result["entered"], result["acquired"], strict=True)
    ]
    in_window = [(entered, acquired) for entered, acquired in entries if acquired < end]
    counts = [sum(acquired < end for acquired in result["acquired"]) for result in results]
    waits = [acquired - entered for entered, acquired in in_window]
    overtakes = out_of_order(entries)
    row: dict[str, Any] = {
        "case": case.key,
        "library": case.library.key,
        "label": case.label,
        "processes": case.processes,
        "fair": case.fair,
        "seconds": seconds,
        "hold_ms": hold * 1e3,
        "acquisitions": len(in_window),
        "cycles": len(entries),
        "acquisitions_per_s": round(len(in_window) / seconds, 1),
        "wait_p50_ms": round(percentile(waits, 50) * 1e3, 3),
        "wait_p99_ms": round(percentile(waits, 99) * 1e3, 3),
        "wait_max_ms": round(max(waits) * 1e3, 3),
        "jain": round(jain(counts), 4),
        "per_process": counts,
        "out_of_order": overtakes,
        "out_of_order_share": round(overtakes / len(entries), 4),
    }
    if case.section == UPDATE:
        row["lost_updates"] = len(entries) - written
    else:  # the most inside at once, and how many were left counted in (none: 0)
        row["most_inside"] = max(result["most"] for result in results)
        row["left_inside"] = written
    print(
        f"contention  {case.label:<30}{case.processes:>3} processes"
        f"{row['acquisitions_per_s']:>10,.0f} acq/s  Jain {row['jain']:.3f}",
        file=sys.stderr,
    )
    return row


def add_ratios(
    rows: Sequence[dict[str, Any]], reference: Library = REDIS_PY, field: str = "vs_redis_py"
) -> None:
    """Add each row's acquisitions per second as a multiple of ``reference``'s at as many
    processes (redis-py's, unless told), under ``field``.
    """
    bases = {
        row["processes"]: row["acquisitions_per_s"]
        for row in rows
        if row["library"] == reference.key and not row["fair"]
    }
    for row in rows:
        base = bases.get(row["processes"])
        row[field] = round(row["acquisitions_per_s"] / base, 2) if base else None


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the contention rows as a plain-text table."""
    header = (
        f"{'library':<28}{'procs':>6}{'acq/s':>8}{'vs redis-py':>13}{'wait p50':>10}"
        f"{'wait p99':>10}{'Jain':>7}{'min-max/proc':>15}{'out of order':>17}{'lost':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        spread = f"{min(row['per_process'])}-{max(row['per_process'])}"
        order = f"{row['out_of_order']} ({row['out_of_order_share']:.1%})"
        ratio = "-" if row["vs_redis_py"] is None else f"{row['vs_redis_py']:.2f}x"
        lines.append(
            f"{row['label']:<28}{row['processes']:>6}{row['acquisitions_per_s']:>8,.0f}"
            f"{ratio:>13}{row['wait_p50_ms']:>8.2f}ms{row['wait_p99_ms']:>8.1f}ms"
            f"{row['jain']:>7.3f}{spread:>15}{order:>17}{row['lost_updates']:>6}"
        )
    lines += [
        "",
        "wait: time inside acquire. Jain: (sum x)^2 / (n sum x^2) over per-process"
        " acquisitions, 1 = perfectly even.",
        "out of order: acquisitions that overtook a process waiting since more than"
        f" {ORDER_SLACK * 1e3:g} ms earlier (FIFO: 0).",
        "lost: counter updates lost by the read-modify-write critical section (mutual"
        " exclusion: 0).",
    ]
    return "\n".join(lines)
