"""Uncontended acquire+release cycles, timed in a loop in this process, against a PING floor.

To add an uncontended scenario, append a :class:`Scenario` to :data:`SCENARIOS`.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from libraries import DJANGO_REDIS_LOCK, LEASE, PYTHON_REDIS_LOCK, REDIS_PY

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


# Scenarios: each library's own handle, reused, called with its own defaults ------------------


def ping(env: Env) -> Op:
    """Return PING on a plain redis-py client: the round-trip floor."""
    return env.client.ping


def django_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused django-redis-lock handle."""
    from django_redis_lock import lock

    handle = lock(DJANGO_REDIS_LOCK.name("uncontended"), ttl=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


def redis_py_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis.lock.Lock``."""
    handle = env.client.lock(REDIS_PY.name("uncontended"), timeout=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


def python_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis_lock.Lock`` (python-redis-lock)."""
    import redis_lock

    handle = redis_lock.Lock(env.client, PYTHON_REDIS_LOCK.name("uncontended"), expire=LEASE)

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


FLOOR = Scenario("ping", "PING (round-trip floor)", ping, round_trips=1)
REFERENCE = Scenario(REDIS_PY.key, REDIS_PY.label, redis_py_cycle, round_trips=2)
SCENARIOS: tuple[Scenario, ...] = (
    FLOOR,
    Scenario(DJANGO_REDIS_LOCK.key, DJANGO_REDIS_LOCK.label, django_redis_lock_cycle, 2),
    REFERENCE,
    Scenario(PYTHON_REDIS_LOCK.key, PYTHON_REDIS_LOCK.label, python_redis_lock_cycle, 2),
)


# Running and reporting ------------------------------------------------------------------------


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
    """Return the rows of :func:`summarise` as a plain-text table."""

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
    lines += [
        "",
        "RTTs: us/op divided by PING's us/op. vs floor: rate / (PING rate / round trips"
        " needed), a cycle needing 2.",
    ]
    return "\n".join(lines)
