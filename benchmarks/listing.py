"""How long ``manage.py locks list`` takes over many held locks, and how much memory it needs.

Run through ``bench.py --listing N`` (it starts the throw-away server and configures Django).
It holds ``N`` locks on the ``default`` alias, each with a Celery-like holder record, then:

1. times ``call_command("locks", "list", "--json")`` and the table form, writing to a stream
   that throws the text away (median of ``rounds`` runs);
2. measures the peak of Python allocations (``tracemalloc``) during each listing, in a run of
   its own (tracing slows the code it watches), and the growth of the process's peak RSS;
3. times ``--limit 10`` (which must stop early) and ``locks show`` of one lock (which, like
   ``locks release``, finds the lock by ``SCAN`` over the keyspace) and, for contrast, the peak
   of materialising every holder with ``list(backend.iter_locks())``, which the command never
   does;

then frees the locks and deletes their keys.
"""

from __future__ import annotations

import io
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import redis
from libraries import KEY_PREFIX

#: Every benchmark lock is named ``listing:<n>``.
NAME = "listing:"
#: Locks are held this long: far longer than a run, and never renewed.
LEASE = 3600.0


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
        self.rows += text.count('"alias": ') or text.startswith(("default ", "locmem "))
        return len(text)


def hold_locks(count: int) -> float:
    """Hold ``count`` locks on the default alias, one owner each; return the seconds taken."""
    from django_redis_lock import locks
    from django_redis_lock.backends.base import AcquireRequest, holder_metadata

    backend = locks["default"]
    host, pid = os.uname().nodename, os.getpid()
    started = time.perf_counter()
    for index in range(count):
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
        request = AcquireRequest(ttl=LEASE, metadata=metadata)
        result = backend.acquire(f"{NAME}{index}", task_id, request)
        if not result.acquired:
            raise RuntimeError(f"could not acquire the free lock {NAME}{index}")
        if index and index % 20_000 == 0:
            print(f"listing     {index:,} locks held", file=sys.stderr)
    return time.perf_counter() - started


def _list(*args: str) -> NullStream:
    from django.core.management import call_command

    stream = NullStream()
    call_command("locks", "list", "--using", "default", *args, stdout=stream)
    return stream


def _show(name: str) -> NullStream:
    from django.core.management import call_command

    stream = NullStream()
    call_command("locks", "show", "--using", "default", name, stdout=stream)
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


def _maxrss_kib() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS.
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value // 1024 if sys.platform == "darwin" else value


def measure(client: redis.Redis[bytes], count: int, rounds: int) -> dict[str, Any]:
    """Hold ``count`` locks, measure listing them, free them; return the figures."""
    from django_redis_lock import locks

    held_s = hold_locks(count)
    print(f"listing     {count:,} locks held in {held_s:.1f} s", file=sys.stderr)
    try:
        rss_before = _maxrss_kib()
        json_s, stream = _timed(lambda: _list("--json"), rounds)
        rss_growth = _maxrss_kib() - rss_before
        if stream.rows != count:
            raise RuntimeError(f"locks list --json listed {stream.rows} locks, not {count}")
        print(f"listing     --json: {json_s:.2f} s", file=sys.stderr)
        table_s, table = _timed(_list, rounds)
        if table.rows != count:
            raise RuntimeError(f"locks list listed {table.rows} locks, not {count}")
        limit_s, _ = _timed(lambda: _list("--json", "--limit", "10"), rounds)
        show_s, _ = _timed(lambda: _show(f"{NAME}{count // 2}"), rounds)
        json_peak = _peak(lambda: _list("--json"))
        table_peak = _peak(_list)
        backend = locks["default"]
        materialised_peak = _peak(lambda: list(backend.iter_locks(f"{NAME}*")))
    finally:
        deleted = delete_keys(client)
    return {
        "locks": count,
        "rounds": rounds,
        "hold_seconds": round(held_s, 2),
        "json": {
            "seconds": round(json_s, 3),
            "locks_per_second": round(count / json_s),
            "output_bytes": stream.chars,
            "peak_python_bytes": json_peak,
            "maxrss_growth_kib": rss_growth,
        },
        "table": {
            "seconds": round(table_s, 3),
            "locks_per_second": round(count / table_s),
            "output_bytes": table.chars,
            "peak_python_bytes": table_peak,
        },
        "limit_10_seconds": round(limit_s, 4),
        "show_seconds": round(show_s, 4),
        "materialised_peak_python_bytes": materialised_peak,
        "keys_deleted": deleted,
    }


def delete_keys(client: redis.Redis[bytes]) -> int:
    """Delete every key of the benchmark's locks (fencing counters included)."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{KEY_PREFIX}:{{={NAME}*", count=1000):
        batch.append(key)
        if len(batch) == 1000:
            deleted += client.unlink(*batch)
            batch = []
    if batch:
        deleted += client.unlink(*batch)
    return deleted


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def format_report(data: dict[str, Any]) -> str:
    """Return the listing figures as text."""
    count, json_, table = data["locks"], data["json"], data["table"]
    return "\n".join(
        [
            f"manage.py locks list over {count:,} held locks (median of {data['rounds']} runs,"
            " output thrown away)",
            f"  --json       {json_['seconds']:.2f} s ({json_['locks_per_second']:,} locks/s),"
            f" {_mib(json_['output_bytes'])} written, peak Python memory"
            f" {_mib(json_['peak_python_bytes'])}, peak RSS growth"
            f" {json_['maxrss_growth_kib'] / 1024:.1f} MiB",
            f"  table        {table['seconds']:.2f} s ({table['locks_per_second']:,} locks/s),"
            f" {_mib(table['output_bytes'])} written, peak Python memory"
            f" {_mib(table['peak_python_bytes'])}",
            f"  --limit 10   {data['limit_10_seconds'] * 1000:.1f} ms",
            f"  show NAME    {data['show_seconds'] * 1000:.1f} ms (a SCAN of the keyspace)",
            f"  for contrast, list(iter_locks()) holds every holder at once: peak"
            f" {_mib(data['materialised_peak_python_bytes'])}",
            f"  {count:,} locks held in {data['hold_seconds']:.1f} s;"
            f" {data['keys_deleted']:,} keys deleted afterwards",
        ]
    )
