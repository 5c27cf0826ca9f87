"""How long ``manage.py locks list`` takes over many held locks, and how much memory it needs.

The locks are held on the ``listing`` alias, a database of their own on the one server, each by
an owner of its own with a Celery-like holder record. Worker processes of the pool acquire them
in parallel through the backend's ``acquire`` (:func:`hold`), so a million take minutes, not
an hour. Each count of locks held is listed in a worker of its own, from the pool's last one
down (a process that holds none of them and has not listed yet, so its memory says what
listing needs):

1. ``call_command("locks", "list", "--json")`` is timed, writing to a stream that throws the
   text away (median of ``rounds`` runs), with the growth of the process's peak RSS over
   those runs (Linux resets the peak through ``/proc/self/clear_refs``; elsewhere the
   lifetime peak can only grow);
2. the peak of Python allocations (``tracemalloc``) during a listing, in a run of its own
   (tracing slows the code it watches);
3. with ``full``, the same for the table form, and times ``--limit 10`` (which must stop
   early), ``locks show`` of one lock (a ``SCAN`` over the keyspace) and, for contrast, the
   peak of materialising every holder with ``list(backend.iter_locks())``, which the command
   never does.

The curve holds more locks for each count (those already held stay); at the end the listing
database is flushed.
"""

from __future__ import annotations

import io
import itertools
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import redis
from libraries import LISTING_ALIAS, LISTING_DB, database_url
from workers import Job, Pool

#: Every benchmark lock is named ``listing:<n>``.
NAME = "listing:"
#: Locks are held this long: far longer than a run, and never renewed.
LEASE = 3600.0
#: How many worker processes acquire the locks, in parallel (more than the cores: each spends
#: most of an acquire waiting for its reply).
HOLDERS = 6
#: From this many locks on, listing is timed once, not ``rounds`` times: a long run averages
#: its own noise.
ONE_ROUND_FROM = 100_000


class NullStream(io.TextIOBase):
    """A text stream that keeps nothing but counts of what was written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0
        self.rows = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.chars += len(text)
        self.rows += text.count('"alias": ') or text.startswith(f"{LISTING_ALIAS} ")
        return len(text)


def hold(job: Job, *, start: int, stop: int) -> int:
    """Hold the locks ``listing:<start>`` to ``listing:<stop - 1>`` (a job run in a worker)."""
    from django_redis_lock import locks
    from django_redis_lock.backends.base import AcquireRequest, holder_metadata

    backend = locks[LISTING_ALIAS]
    host, pid = os.uname().nodename, os.getpid()
    job.wait_for_start()
    for index in range(start, stop):
        task_id = f"{index:08x}-0000-4000-8000-000000000000"
        metadata = holder_metadata(
            host=host,
            pid=pid,
            thread="MainThread",
            data={
                "task_id": task_id,
                "task_name": "billing.bill",
                "hostname": f"celery@{host}",
                "worker_pid": pid,
                "args": f"customer_id={index}",
                "started_at": "2026-01-31T09:30:00+00:00",
            },
        )
        result = backend.acquire(
            f"{NAME}{index}", task_id, AcquireRequest(ttl=LEASE, metadata=metadata)
        )
        if not result.acquired:
            raise RuntimeError(f"could not acquire the free lock {NAME}{index}")
        if job.index == 0 and (index - start + 1) % 50_000 == 0:
            print(
                f"listing     holder 0: {index - start + 1:,} of {stop - start:,}", file=sys.stderr
            )
    return stop - start


def hold_locks(pool: Pool, start: int, stop: int) -> float:
    """Hold the locks ``start`` to ``stop - 1``, split among the holders; return the seconds."""
    holders = min(HOLDERS, pool.size - 1, stop - start)
    bounds = [start + (stop - start) * k // holders for k in range(holders + 1)]
    params = [{"start": a, "stop": b} for a, b in itertools.pairwise(bounds)]
    started = time.perf_counter()
    pool.run(hold, params, timeout=60 + (stop - start) * 0.005)
    return time.perf_counter() - started


def _list(*args: str) -> NullStream:
    from django.core.management import call_command

    stream = NullStream()
    call_command("locks", "list", "--using", LISTING_ALIAS, *args, stdout=stream)
    return stream


def _show(name: str) -> NullStream:
    from django.core.management import call_command

    stream = NullStream()
    call_command("locks", "show", "--using", LISTING_ALIAS, name, stdout=stream)
    return stream


def _timed(run: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def _peak(run: Callable[[], Any]) -> int:
    """Return the peak bytes Python allocated while ``run`` ran (beyond what was live before)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        run()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise LookupError(field)


def _maxrss_kib() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value


def rss_growth(run: Callable[[], Any]) -> tuple[Any, int]:
    """Return what ``run()`` returns, and how far the peak RSS rose above the RSS before, KiB."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")  # the peak RSS (VmHWM) becomes the current RSS
        before = _status_kib("VmRSS")
    except (OSError, LookupError):  # not Linux: the lifetime peak, which can only grow
        before = _maxrss_kib()
        return run(), _maxrss_kib() - before
    result = run()
    return result, _status_kib("VmHWM") - before


def measure(count: int, rounds: int, *, full: bool) -> dict[str, Any]:
    """Measure listing the ``count`` locks held (more figures with ``full``)."""
    from django_redis_lock import locks

    (json_s, stream), growth = rss_growth(lambda: _timed(lambda: _list("--json"), rounds))
    if stream.rows != count:
        raise RuntimeError(f"locks list --json listed {stream.rows} locks, not {count}")
    row: dict[str, Any] = {
        "locks": count,
        "rounds": rounds,
        "json": {
            "seconds": round(json_s, 3),
            "locks_per_second": round(count / json_s),
            "output_bytes": stream.chars,
            "peak_python_bytes": _peak(lambda: _list("--json")),
            "peak_rss_growth_kib": growth,
        },
    }
    print(f"listing     {count:,} locks: --json in {json_s:.2f} s", file=sys.stderr)
    if full:
        table_s, table = _timed(_list, rounds)
        if table.rows != count:
            raise RuntimeError(f"locks list listed {table.rows} locks, not {count}")
        backend = locks[LISTING_ALIAS]
        row |= {
            "table": {
                "seconds": round(table_s, 3),
                "locks_per_second": round(count / table_s),
                "output_bytes": table.chars,
                "peak_python_bytes": _peak(_list),
            },
            "limit_10_seconds": round(
                _timed(lambda: _list("--json", "--limit", "10"), rounds)[0], 4
            ),
            "show_seconds": round(_timed(lambda: _show(f"{NAME}{count // 2}"), rounds)[0], 4),
            "materialised_peak_python_bytes": _peak(lambda: list(backend.iter_locks(f"{NAME}*"))),
        }
    return row


def measure_job(job: Job, *, count: int, rounds: int, full: bool) -> dict[str, Any]:
    """Run :func:`measure` (a job run in a worker)."""
    job.wait_for_start()
    return measure(count, rounds, full=full)


def curve(
    pool: Pool, url: str, counts: Sequence[int], rounds: int, *, full: bool = False
) -> dict[str, Any]:
    """Hold each count of locks in turn and measure listing them; flush them after.

    ``pool`` needs two workers at least: the holders, and those that list (the last one
    lists again when there are too few).
    """
    client = redis.Redis.from_url(database_url(url, LISTING_DB))
    points, held = [], 0
    try:
        for count in sorted(counts):
            began = time.perf_counter()
            hold_s = hold_locks(pool, held, count) if count > held else 0.0
            print(f"listing     {count:,} locks held ({hold_s:.1f} s)", file=sys.stderr)
            row = {"added": count - held, "hold_seconds": round(hold_s, 2)}
            held = count
            runs = rounds if full or count < ONE_ROUND_FROM else 1
            params = {"count": count, "rounds": runs, "full": full}
            timeout = 120 + count * 0.005 * (runs + 8)
            lister = max(pool.size - 1 - len(points), min(HOLDERS, pool.size - 1))
            row |= pool.run(measure_job, [params], timeout, first=lister)[0]
            row["point_seconds"] = round(time.perf_counter() - began, 1)
            points.append(row)
    finally:
        keys = int(client.dbsize())
        client.flushdb(asynchronous=True)  # a million locks take Redis seconds to free
        client.close()
    return {"points": points, "keys_deleted": keys}


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def format_table(data: dict[str, Any]) -> str:
    """Return the listing curve as a plain-text table."""
    header = (
        f"{'locks held':>11}{'--json s':>10}{'runs':>6}{'locks/s':>10}{'output':>11}"
        f"{'peak Python':>13}{'peak RSS':>11}{'held in':>10}{'point took':>12}"
    )
    lines = [header, "-" * len(header)]
    for row in data["points"]:
        json_ = row["json"]
        lines.append(
            f"{row['locks']:>11,}{json_['seconds']:>10.2f}{row['rounds']:>6}"
            f"{json_['locks_per_second']:>10,}"
            f"{_mib(json_['output_bytes']):>11}{_mib(json_['peak_python_bytes']):>13}"
            f"{_mib(json_['peak_rss_growth_kib'] * 1024):>11}{row['hold_seconds']:>9.1f}s"
            f"{row['point_seconds']:>11.1f}s"
        )
    lines += [
        "",
        "--json s: manage.py locks list --json, median of the runs, output thrown away; peak"
        " Python: tracemalloc; peak RSS: its growth,",
        "in a worker that holds none of the locks listed.",
        f"held in: acquiring the locks added for that point ({HOLDERS} processes); point"
        f" took: that and the listing. {data['keys_deleted']:,} keys flushed afterwards.",
    ]
    return "\n".join(lines)


def format_report(data: dict[str, Any]) -> str:
    """Return the figures of one count of locks (``--listing N``) as text."""
    row = data["points"][0]
    count, json_, table = row["locks"], row["json"], row["table"]
    return "\n".join(
        [
            f"manage.py locks list over {count:,} held locks (median of {row['rounds']} runs,"
            " output thrown away)",
            f"  --json       {json_['seconds']:.2f} s ({json_['locks_per_second']:,} locks/s),"
            f" {_mib(json_['output_bytes'])} written, peak Python memory"
            f" {_mib(json_['peak_python_bytes'])}, peak RSS growth"
            f" {_mib(json_['peak_rss_growth_kib'] * 1024)}",
            f"  table        {table['seconds']:.2f} s ({table['locks_per_second']:,} locks/s),"
            f" {_mib(table['output_bytes'])} written, peak Python memory"
            f" {_mib(table['peak_python_bytes'])}",
            f"  --limit 10   {row['limit_10_seconds'] * 1000:.1f} ms",
            f"  show NAME    {row['show_seconds'] * 1000:.1f} ms (a SCAN of the keyspace)",
            f"  for contrast, list(iter_locks()) holds every holder at once: peak"
            f" {_mib(row['materialised_peak_python_bytes'])}",
            f"  {count:,} locks held in {row['hold_seconds']:.1f} s ({HOLDERS} processes);"
            f" {data['keys_deleted']:,} keys flushed afterwards",
        ]
    )
