"""Measure django-redis-lock against redis-py's Lock and python-redis-lock, on one server.

Run it outside pytest, from the repository root::

    python benchmarks/bench.py [--quick] [--json]

It starts a throw-away ``redis-server`` (never a developer's Redis), configures Django in this
process and in sixteen worker processes (started with ``spawn``), and measures, for each
library on its own lock names:

1. uncontended acquire+release cycles per second in one process, against a PING floor, and
   the same for the asyncio locks (django-redis-lock's ``alock``, redis-py's asyncio
   ``Lock``) on one event loop, against an awaited PING (``uncontended.py``; each scenario
   timed ``--rounds`` times for ``--seconds``, the scenarios taking turns in ``--slice``
   second slices, the median round kept);
2. 4 and 16 processes contending for one lock for ``--contention-seconds``: acquisitions per
   second, time spent waiting, Jain's fairness index, FIFO order, mutual exclusion (and
   django-redis-lock with ``fair=True`` at 16) (``contention.py``);
3. handoff latency from a release to the waiting process's acquisition, ``--handoffs``
   times (``handoff.py``);
4. the keys left after ``--distinct`` distinct locks were acquired and released, and the
   round trips that renewing 1,000 held locks costs (``footprint.py``).

Then it checks django-redis-lock's targets (``report.py``). Progress goes to stderr, the
report (or ``--json``) to stdout. ``--listing N`` runs instead one benchmark left out by
default: ``manage.py locks list`` over ``N`` held locks, its time and peak memory
(``listing.py``). The default run takes about 3 minutes; ``--quick`` about
half a minute. Worker processes and the server are stopped on any error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import contention
import footprint
import handoff
import listing
import redis
import report
import uncontended
from libraries import LEASE, LIBRARIES, configure_django
from workers import Pool

#: How many processes contend for one lock, in turn.
PROCESSES = (4, 16)
#: The renewal scenario: locks held, their lease (renewed every third of it), time watched.
RENEW_LOCKS = 1000
RENEW_TTL = 3.0
RENEW_OBSERVE = 3.5

QUICK = {
    "seconds": 0.5,
    "rounds": 1,
    "warmup": 0.2,
    "contention_seconds": 1.0,
    "handoffs": 40,
    "distinct": 1000,
}


def measure(args: argparse.Namespace, url: str, client: redis.Redis[bytes]) -> dict[str, Any]:
    """Run every benchmark on the server at ``url``; return the report's data."""
    with uncontended.environment(url, client) as env:
        results = uncontended.run(
            uncontended.SCENARIOS,
            env,
            seconds=args.seconds,
            rounds=args.rounds,
            warmup=args.warmup,
            slice_seconds=args.slice,
        )
    summary = uncontended.summarise(results)
    ping_us = next(row["us_per_op"] for row in summary if row["scenario"] == uncontended.FLOOR.key)
    distinct = [footprint.distinct_names(client, lib, args.distinct) for lib in LIBRARIES.values()]
    renewal = footprint.renewal_cost(client, RENEW_LOCKS, RENEW_TTL, RENEW_OBSERVE)
    with Pool(max(PROCESSES), url) as pool:
        contended = [
            contention.run_case(pool, client, case, args.contention_seconds)
            for case in contention.cases(PROCESSES)
        ]
        handoffs = [handoff.run_contender(pool, c, args.handoffs) for c in handoff.CONTENDERS]
    handoff.add_ratios(handoffs, ping_us)
    data: dict[str, Any] = {
        "machine": report.describe_machine(client),
        "parameters": {
            "seconds": args.seconds,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "slice": args.slice,
            "lease": LEASE,
            "contention_seconds": args.contention_seconds,
            "processes": list(PROCESSES),
            "handoffs": args.handoffs,
            "distinct": args.distinct,
        },
        "uncontended": summary,
        "contention": contended,
        "handoff": handoffs,
        "keys": {"distinct": distinct, "end": footprint.whole_run(client)},
        "renewal": renewal,
    }
    data["targets"] = report.targets(data)
    return data


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about 35 s)")
    parser.add_argument("--seconds", type=float, default=3.0, help="uncontended timed run (3)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="uncontended rounds, median kept (3)"
    )
    parser.add_argument("--warmup", type=float, default=0.5, help="uncontended warm-up (0.5)")
    parser.add_argument("--slice", type=float, default=0.25, help="uncontended turns (0.25)")
    parser.add_argument(
        "--contention-seconds", type=float, default=3.0, help="each contention run (3)"
    )
    parser.add_argument("--handoffs", type=int, default=200, help="handoffs per library (200)")
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct locks (10000)")
    parser.add_argument(
        "--listing",
        type=int,
        metavar="N",
        help="instead of the rest, time `manage.py locks list` over N held locks (100000)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    if args.quick:
        for option, value in QUICK.items():
            if getattr(args, option) == parser.get_default(option):
                setattr(args, option, value)
    if min(args.seconds, args.slice, args.contention_seconds) <= 0 or args.warmup < 0:
        parser.error("--seconds, --slice and --contention-seconds must be > 0, --warmup >= 0")
    if min(args.rounds, args.handoffs, args.distinct) < 1:
        parser.error("--rounds, --handoffs and --distinct must be >= 1")
    if args.listing is not None and args.listing < 1:
        parser.error("--listing must be >= 1")
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
        with RedisServer() as server:
            configure_django(server.url)
            client = redis.Redis.from_url(server.url)
            try:
                if args.listing is None:
                    data = measure(args, server.url, client)
                else:
                    data = {"machine": report.describe_machine(client)}
                    data["listing"] = listing.measure(client, args.listing, args.rounds)
            finally:
                from django_redis_lock import locks

                locks.close_all()
                client.close()
    except KeyboardInterrupt:
        print("Interrupted; the worker processes and the server are stopped.", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(data, indent=2))
    elif args.listing is not None:
        print(listing.format_report(data["listing"]))
    else:
        print(report.format_report(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
