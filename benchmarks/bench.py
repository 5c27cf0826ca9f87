"""Measure django-redis-lock against redis-py's Lock and python-redis-lock, on one server.

Run it outside pytest, from the repository root::

    python benchmarks/bench.py [--seconds 3] [--rounds 3] [--warmup 0.5] [--slice 0.25] [--json]

It starts a throw-away ``redis-server`` (never a developer's Redis) and configures Django in
this process. Each scenario is warmed up, then timed for ``--seconds`` per round, ``--rounds``
times; the median round is reported. Within a round the scenarios take turns in short slices
(``--slice``), so a burst of load from elsewhere on the machine falls on all of them alike.
Progress goes to stderr, the table (or JSON) to stdout.

To add an uncontended scenario, append a :class:`Scenario` to :data:`SCENARIOS`. Scenarios
that are not one call timed in a loop (several processes contending, handoff latency,
fairness) will get their own runner, returning :class:`Result` rows for the same table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

#: Every key django-redis-lock writes here starts with this prefix (checked after the run).
KEY_PREFIX = "bench"
#: The lease every library takes, in seconds: long enough never to end during a run.
LEASE = 30

Op = Callable[[], object]


@dataclass(frozen=True)
class Env:
    """What scenarios share: the server's URL and a plain redis-py client of it."""

    url: str
    client: redis.Redis[bytes]


@dataclass(frozen=True)
class Sample:
    """One timed run of one scenario: ``ops`` operations in ``seconds``."""

    ops: int
    seconds: float

    @property
    def rate(self) -> float:
        """Return operations per second."""
        return self.ops / self.seconds

    def __add__(self, other: Sample) -> Sample:
        return Sample(self.ops + other.ops, self.seconds + other.seconds)


@dataclass(frozen=True)
class Scenario:
    """One operation timed in a tight loop; ``make_op`` builds it once, before the rounds.

    ``round_trips`` is the fewest round trips the operation can take (PING: 1, a lock
    cycle: 2), used to compare it with the PING floor.
    """

    key: str
    label: str
    make_op: Callable[[Env], Op]
    round_trips: int


@dataclass
class Result:
    """The samples of one scenario over every round."""

    scenario: Scenario
    samples: list[Sample] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Return the median rate over the rounds, in operations per second."""
        return statistics.median(sample.rate for sample in self.samples)

    @property
    def micros(self) -> float:
        """Return microseconds per operation at the median rate."""
        return 1e6 / self.rate

    @property
    def spread(self) -> float:
        """Return (fastest - slowest round) / median, a rough measure of noise."""
        rates = [sample.rate for sample in self.samples]
        return (max(rates) - min(rates)) / self.rate


def time_loop(op: Op, seconds: float, batch: int = 64) -> Sample:
    """Call ``op`` in batches until ``seconds`` have passed; return what was done."""
    ops = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(batch):
            op()
        ops += batch
        now = time.perf_counter()
        if now >= deadline:
            return Sample(ops, now - started)


# Scenarios ------------------------------------------------------------------------------------


def ping(env: Env) -> Op:
    """Return PING on a plain redis-py client: the round-trip floor."""
    return env.client.ping


def django_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused django-redis-lock handle."""
    from django_redis_lock import lock

    handle = lock("uncontended", ttl=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


def redis_py_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis.lock.Lock``."""
    handle = env.client.lock("redis-py:uncontended", timeout=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


def python_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis_lock.Lock`` (python-redis-lock)."""
    import redis_lock

    # Its keys are "lock:<name>" and "lock-signal:<name>", apart from ours ("bench:...").
    handle = redis_lock.Lock(env.client, "python-redis-lock:uncontended", expire=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


FLOOR = Scenario("ping", "PING (round-trip floor)", ping, round_trips=1)
REFERENCE = Scenario("redis_py", "redis-py Lock", redis_py_cycle, round_trips=2)
SCENARIOS: tuple[Scenario, ...] = (
    FLOOR,
    Scenario("django_redis_lock", "django-redis-lock", django_redis_lock_cycle, round_trips=2),
    REFERENCE,
    Scenario("python_redis_lock", "python-redis-lock", python_redis_lock_cycle, round_trips=2),
)


# Running --------------------------------------------------------------------------------------


def configure_django(url: str) -> None:
    """Configure Django in this process, with one lock backend on ``url``."""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django_redis_lock"],
        LOCKS={
            "default": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"url": url, "key_prefix": KEY_PREFIX},
            }
        },
    )
    django.setup()


def run(
    scenarios: Sequence[Scenario],
    env: Env,
    *,
    seconds: float,
    rounds: int,
    warmup: float,
    slice_seconds: float,
) -> list[Result]:
    """Time every scenario for ``seconds`` per round, taking turns in short slices."""
    ops = [scenario.make_op(env) for scenario in scenarios]
    for op in ops:
        time_loop(op, warmup)
    results = [Result(scenario) for scenario in scenarios]
    slices = max(1, round(seconds / slice_seconds))
    for round_index in range(rounds):
        totals = [Sample(0, 0.0) for _ in ops]
        for slice_index in range(slices):
            # Rotate who goes first, so none always runs right after the same neighbour.
            shift = (round_index * slices + slice_index) % len(ops)
            for index in [*range(shift, len(ops)), *range(shift)]:
                totals[index] += time_loop(ops[index], seconds / slices)
        for result, total in zip(results, totals, strict=True):
            result.samples.append(total)
            print(
                f"round {round_index + 1}/{rounds}  {result.scenario.label:<24}"
                f"{total.rate:>10,.0f} ops/s",
                file=sys.stderr,
            )
    return results


def leftover_keys(client: redis.Redis[bytes], prefix: str) -> dict[str, int]:
    """Count the keys under ``prefix``: fencing counters (``:f``) and any others."""
    counts = {"fencing": 0, "other": 0}
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        counts["fencing" if key.endswith(b":f") else "other"] += 1
    return counts


def cpu_model() -> str:
    """Return the CPU's model name where the system tells it, else the platform's guess."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe_machine(client: redis.Redis[bytes]) -> dict[str, Any]:
    """Return the versions and hardware a reader needs to judge the numbers."""
    from redis.utils import HIREDIS_AVAILABLE

    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "redis_server": client.info("server")["redis_version"],
        "redis_py": redis.__version__,
        "hiredis": HIREDIS_AVAILABLE,
        "django": metadata.version("django"),
        "django_redis_lock": metadata.version("django-redis-lock"),
        "python_redis_lock": metadata.version("python-redis-lock"),
        "connection": "TCP loopback, one connection per client, one thread",
    }


def summarise(results: Sequence[Result]) -> list[dict[str, Any]]:
    """Return one row per scenario, with its rate compared to the floor and to redis-py."""
    by_key = {result.scenario.key: result for result in results}
    floor = by_key[FLOOR.key]
    reference = by_key[REFERENCE.key]
    rows = []
    for result in results:
        scenario = result.scenario
        is_floor = scenario is FLOOR
        rows.append(
            {
                "scenario": scenario.key,
                "label": scenario.label,
                "ops_per_s": round(result.rate, 1),
                "us_per_op": round(result.micros, 2),
                "round_trips_implied": round(result.micros / floor.micros, 2),
                "vs_redis_py": None if is_floor else round(result.rate / reference.rate, 3),
                # A cycle needs `round_trips` PINGs' worth of time at the very least.
                "vs_floor": None
                if is_floor
                else round(result.rate / (floor.rate / scenario.round_trips), 3),
                "spread": round(result.spread, 3),
                "rounds": [round(sample.rate, 1) for sample in result.samples],
            }
        )
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return ``rows`` as a plain-text table."""

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    header = (
        f"{'scenario':<24}{'ops/s':>10}{'us/op':>9}{'RTTs':>7}"
        f"{'vs redis-py':>13}{'vs floor':>10}{'spread':>8}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['label']:<24}{row['ops_per_s']:>10,.0f}{row['us_per_op']:>9.1f}"
            f"{row['round_trips_implied']:>7.2f}{ratio(row['vs_redis_py']):>13}"
            f"{ratio(row['vs_floor']):>10}{row['spread']:>8.1%}"
        )
    return "\n".join(lines)


def format_report(report: dict[str, Any]) -> str:
    """Return the whole report as plain text."""
    machine, params, left = report["machine"], report["parameters"], report["leftover_keys"]
    lines = [
        f"Python {machine['python']} on {machine['platform']}",
        f"CPU: {machine['cpu']} ({machine['cpu_count']} CPUs)",
        f"Redis server {machine['redis_server']}, redis-py {machine['redis_py']}"
        f" (hiredis: {'yes' if machine['hiredis'] else 'no'}),"
        f" Django {machine['django']}",
        f"django-redis-lock {machine['django_redis_lock']},"
        f" python-redis-lock {machine['python_redis_lock']}; {machine['connection']}",
        f"Uncontended acquire+release cycles, lease {params['lease']} s; median of"
        f" {params['rounds']} round(s) of {params['seconds']:g} s, in {params['slice']:g} s"
        f" turns, after {params['warmup']:g} s warm-up.",
        "",
        format_table(report["results"]),
        "",
        "RTTs: us/op divided by PING's us/op. vs floor: rate / (PING rate / round trips"
        " needed), a cycle needing 2.",
        "",
        f"Keys left under {report['key_prefix']!r}: {left['fencing'] + left['other']}"
        f" (fencing counters ':f': {left['fencing']}, other: {left['other']})",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed run (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, median kept (default 3)")
    parser.add_argument("--warmup", type=float, default=0.5, help="warm-up (default 0.5)")
    parser.add_argument(
        "--slice", type=float, default=0.25, help="turn of each scenario (default 0.25)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rounds < 1 or args.warmup < 0 or args.slice <= 0:
        parser.error("--seconds and --slice must be > 0, --rounds >= 1 and --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and print the report."""
    args = parse_args(argv)
    from django_redis_lock.testing import RedisServer

    with RedisServer() as server:
        configure_django(server.url)
        client = redis.Redis.from_url(server.url)
        try:
            env = Env(server.url, client)
            results = run(
                SCENARIOS,
                env,
                seconds=args.seconds,
                rounds=args.rounds,
                warmup=args.warmup,
                slice_seconds=args.slice,
            )
            report = {
                "machine": describe_machine(client),
                "parameters": {
                    "seconds": args.seconds,
                    "rounds": args.rounds,
                    "warmup": args.warmup,
                    "slice": args.slice,
                    "lease": LEASE,
                },
                "results": summarise(results),
                "key_prefix": KEY_PREFIX,
                "leftover_keys": leftover_keys(client, KEY_PREFIX),
            }
        finally:
            from django_redis_lock import locks

            locks.close_all()
            client.close()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
