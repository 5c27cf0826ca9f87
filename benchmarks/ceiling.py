"""One Redis core's ceiling: how many lock cycles per second one server core can serve.

:data:`PROCESSES` processes each loop acquire+release on a lock name of its own (no
contention, no hold, no critical section), for each library in turn. Each run is bracketed by
two ``INFO`` snapshots (``servertime.py``): the Redis process's CPU per cycle under that load,
and how busy that kept its one core. The ceiling is one second of that CPU divided by the CPU
of a cycle: the cycles per second one core would serve with clients enough to keep it busy.
On a machine whose clients share the server's cores (two of them here), the server is not
kept busy, so the cycles measured are fewer than the ceiling, which is the figure to size a
server by.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import libraries
import redis
import servertime
from libraries import DJANGO_REDIS_LOCK, REDIS_PY, WAIT_LIMIT, Library
from workers import Job, Pool

#: How many processes cycle at once, each on its own name.
PROCESSES = 64


def cycle_own_name(job: Job, *, library: str, name: str, seconds: float) -> int:
    """Loop acquire+release on ``name`` for ``seconds``; return the cycles (a worker's job)."""
    lib = libraries.library(library)
    handle = lib.handle(job.client, name)
    cycles = 0
    end = job.wait_for_start() + seconds
    while time.monotonic() < end:
        if not handle.acquire():
            raise RuntimeError(f"{lib.label} did not acquire {name!r} within {WAIT_LIMIT} s")
        handle.release()
        cycles += 1
    return cycles


def run(
    pool: Pool, client: redis.Redis[bytes], seconds: float, processes: int = PROCESSES
) -> list[dict[str, Any]]:
    """Run each library's distinct-name cycles in ``processes`` workers; return their rows."""
    overhead = servertime.bracket_cpu(client)
    rows = []
    for library in (DJANGO_REDIS_LOCK, REDIS_PY):
        params = [
            {"library": library.key, "name": f"ceiling:{library.key}:{i}", "seconds": seconds}
            for i in range(processes)
        ]
        before = servertime.snapshot(client)
        cycles = sum(pool.run(cycle_own_name, params, timeout=seconds + WAIT_LIMIT + 30))
        cpu = servertime.spent(before, servertime.snapshot(client, closing=True), ()).cpu
        rows.append(_row(library, processes, seconds, cycles, cpu - overhead))
        print(
            f"ceiling     {library.label:<30}{processes:>3} processes"
            f"{rows[-1]['cycles_per_s']:>10,.0f} cycles/s",
            file=sys.stderr,
        )
    ours, theirs = rows
    ours["ceiling_vs_redis_py"] = round(ours["ceiling_per_s"] / theirs["ceiling_per_s"], 2)
    return rows


def _row(
    library: Library, processes: int, seconds: float, cycles: int, cpu: float
) -> dict[str, Any]:
    cpu_us = cpu * 1e6 / cycles
    return {
        "library": library.key,
        "label": library.label,
        "processes": processes,
        "cycles_per_s": round(cycles / seconds, 1),
        "cpu_us_per_cycle": round(cpu_us, 1),
        "redis_busy": round(cpu / seconds, 3),
        "ceiling_per_s": round(1e6 / cpu_us),
    }


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the rows as a table, with how the ceiling is reckoned."""
    lines = [
        f"{'library':<24}{'processes':>10}{'cycles/s':>11}{'Redis busy':>12}"
        f"{'CPU us':>9}{'ceiling/s':>12}{'vs redis-py':>13}"
    ]
    for row in rows:
        ratio = row.get("ceiling_vs_redis_py")
        lines.append(
            f"{row['label']:<24}{row['processes']:>10}{row['cycles_per_s']:>11,.0f}"
            f"{row['redis_busy']:>11.0%} {row['cpu_us_per_cycle']:>9.1f}"
            f"{row['ceiling_per_s']:>12,}{'' if ratio is None else f'{ratio:>12.2f}x'}"
        )
    lines.append(
        "Redis busy: the share of one core the server used; CPU us: its CPU per cycle;"
        " ceiling/s: 1 s / CPU us, the cycles one busy core serves."
    )
    return "\n".join(lines)
