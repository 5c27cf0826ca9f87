"""Uncontended acquire+release cycles, timed in a loop in this process, against a PING floor.

The blocking scenarios are compared with a blocking PING and redis-py's ``Lock``; the asyncio
ones (``asyncio=True``), run on one event loop, with an awaited PING and redis-py's asyncio
``Lock``. django-redis-lock's other locks (``rwlock``'s two sides, ``lock_all`` over 2 and 3
names) follow its ``lock``, under a heading of their own, and are compared with the same floor
and reference. To add an uncontended scenario, append a :class:`Scenario` to :data:`SCENARIOS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.asyncio
from libraries import DJANGO_REDIS_LOCK, FORMS, LEASE, PYTHON_REDIS_LOCK, REDIS_PY, Form

Op = Callable[[], object]
AsyncOp = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Env:
    """What scenarios share: the server's URL, plain redis-py clients of it, one event loop.

    The asyncio scenarios all run on ``loop``; ``aclient`` is a ``redis.asyncio`` client.
    """

    url: str
    client: redis.Redis[bytes]
    loop: asyncio.AbstractEventLoop
    aclient: redis.asyncio.Redis


@contextlib.contextmanager
def environment(url: str, client: redis.Redis[bytes]) -> Iterator[Env]:
    """Yield the :class:`Env` of the server at ``url``; close its loop and clients after."""
    loop = asyncio.new_event_loop()
    aclient = redis.asyncio.Redis.from_url(url)
    try:
        yield Env(url, client, loop, aclient)
    finally:
        loop.run_until_complete(aclient.aclose())
        # django-redis-lock closes its client of this loop when the loop's generators end.
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


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
    cycle: 2, whatever it locks), used to compare it with the PING floor. With ``asyncio``,
    ``make_op`` returns a coroutine function, awaited in a loop on ``Env.loop``, and the
    scenario is compared with the asyncio floor and reference. The table prints ``group``
    as a heading above the first of consecutive scenarios of one group.
    """

    key: str
    label: str
    make_op: Callable[[Env], Op]
    round_trips: int
    asyncio: bool = False
    group: str = ""


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


async def atime_loop(op: AsyncOp, seconds: float, batch: int = 64) -> Sample:
    """Await ``op()`` in batches until ``seconds`` have passed; return what was done."""
    ops = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(batch):
            await op()
        ops += batch
        now = time.perf_counter()
        if now >= deadline:
            return Sample(ops, now - started)


def timer(scenario: Scenario, env: Env) -> Callable[[float], Sample]:
    """Build the scenario's operation; return what times it for a number of seconds."""
    op = scenario.make_op(env)
    if not scenario.asyncio:
        return lambda seconds: time_loop(op, seconds)
    aop = cast(AsyncOp, op)
    # Each call runs as one task on the one loop, a new owner for django-redis-lock.
    return lambda seconds: env.loop.run_until_complete(atime_loop(aop, seconds))


# Scenarios: each library's own handle, reused, called with its own defaults ------------------


def ping(env: Env) -> Op:
    """Return PING on a plain redis-py client: the round-trip floor."""
    return env.client.ping


def cycle_of(handle: Any) -> Op:
    """Return one acquire and release of ``handle``, reused: each library's own, its defaults."""

    def cycle() -> None:
        handle.acquire()
        handle.release()

    return cycle


def django_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused django-redis-lock handle."""
    from django_redis_lock import lock

    return cycle_of(lock(DJANGO_REDIS_LOCK.name("uncontended"), ttl=LEASE))


def redis_py_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis.lock.Lock``."""
    return cycle_of(env.client.lock(REDIS_PY.name("uncontended"), timeout=LEASE))


def python_redis_lock_cycle(env: Env) -> Op:
    """Return one acquire and release of a reused ``redis_lock.Lock`` (python-redis-lock)."""
    import redis_lock

    name = PYTHON_REDIS_LOCK.name("uncontended")
    return cycle_of(redis_lock.Lock(env.client, name, expire=LEASE))


def form_cycle(form: Form) -> Callable[[Env], Op]:
    """Return what builds one acquire and release of a reused handle of ``form``.

    Made as ``lock()``'s row is, and with its lease: ``rwlock(...).read()``,
    ``lock_all([...])``; every name is free, so each is acquired at once.
    """

    def make_op(env: Env) -> Op:
        return cycle_of(form.make(form.name("uncontended")))

    return make_op


# The asyncio scenarios: awaited on one event loop (python-redis-lock has no asyncio lock) ----


def ping_asyncio(env: Env) -> AsyncOp:
    """Return an awaited PING on a ``redis.asyncio`` client: the asyncio round-trip floor."""
    return env.aclient.ping


def django_redis_lock_asyncio_cycle(env: Env) -> AsyncOp:
    """Return one awaited acquire and release of a reused ``alock`` handle."""
    from django_redis_lock import alock

    handle = alock(DJANGO_REDIS_LOCK.name("uncontended-asyncio"), ttl=LEASE)

    async def cycle() -> None:
        await handle.acquire()
        await handle.release()

    return cycle


def redis_py_asyncio_cycle(env: Env) -> AsyncOp:
    """Return one awaited acquire and release of a reused ``redis.asyncio.lock.Lock``."""
    handle = env.aclient.lock(REDIS_PY.name("uncontended-asyncio"), timeout=LEASE)

    async def cycle() -> None:
        await handle.acquire()
        await handle.release()

    return cycle


#: The headings of the table's groups of rows.
OTHER_LOCKS = "django-redis-lock's other locks, reused:"
ASYNCIO = "asyncio, on one event loop:"

FLOOR = Scenario("ping", "PING (round-trip floor)", ping, round_trips=1)
REFERENCE = Scenario(REDIS_PY.key, REDIS_PY.label, redis_py_cycle, round_trips=2)
ASYNC_FLOOR = Scenario(
    "ping_asyncio", "asyncio PING (floor)", ping_asyncio, 1, asyncio=True, group=ASYNCIO
)
ASYNC_REFERENCE = Scenario(
    f"{REDIS_PY.key}_asyncio",
    "redis-py asyncio Lock",
    redis_py_asyncio_cycle,
    2,
    asyncio=True,
    group=ASYNCIO,
)
SCENARIOS: tuple[Scenario, ...] = (
    FLOOR,
    Scenario(DJANGO_REDIS_LOCK.key, DJANGO_REDIS_LOCK.label, django_redis_lock_cycle, 2),
    REFERENCE,
    Scenario(PYTHON_REDIS_LOCK.key, PYTHON_REDIS_LOCK.label, python_redis_lock_cycle, 2),
    *(
        Scenario(key, form.label, form_cycle(form), 2, group=OTHER_LOCKS)
        for key, form in FORMS.items()
    ),
    ASYNC_FLOOR,
    Scenario(
        f"{DJANGO_REDIS_LOCK.key}_asyncio",
        "django-redis-lock alock",
        django_redis_lock_asyncio_cycle,
        2,
        asyncio=True,
        group=ASYNCIO,
    ),
    ASYNC_REFERENCE,
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
    timers = [timer(scenario, env) for scenario in scenarios]
    for time_for in timers:
        time_for(warmup)
    results = [Result(scenario) for scenario in scenarios]
    slices = max(1, round(seconds / slice_seconds))
    for round_index in range(rounds):
        totals = [Sample(0, 0.0) for _ in timers]
        for slice_index in range(slices):
            # Rotate who goes first, so none always runs right after the same neighbour.
            shift = (round_index * slices + slice_index) % len(timers)
            for index in [*range(shift, len(timers)), *range(shift)]:
                totals[index] += timers[index](seconds / slices)
        for result, total in zip(results, totals, strict=True):
            result.samples.append(total)
            print(
                f"round {round_index + 1}/{rounds}  {result.scenario.label:<24}"
                f"{total.rate:>10,.0f} ops/s",
                file=sys.stderr,
            )
    return results


def summarise(results: Sequence[Result]) -> list[dict[str, Any]]:
    """Return one row per scenario, with its rate compared to the floor and to redis-py.

    Blocking scenarios are compared with the blocking PING and ``Lock``, asyncio scenarios
    with the asyncio ones.
    """
    by_key = {result.scenario.key: result for result in results}
    rows = []
    for result in results:
        scenario = result.scenario
        floor_scenario, reference_scenario = (
            (ASYNC_FLOOR, ASYNC_REFERENCE) if scenario.asyncio else (FLOOR, REFERENCE)
        )
        floor, reference = by_key[floor_scenario.key], by_key[reference_scenario.key]
        is_floor = scenario is floor_scenario
        rows.append(
            {
                "scenario": scenario.key,
                "label": scenario.label,
                "asyncio": scenario.asyncio,
                "group": scenario.group,
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
    for index, row in enumerate(rows):
        if row["group"] and (index == 0 or rows[index - 1]["group"] != row["group"]):
            lines.append(row["group"])
        lines.append(
            f"{row['label']:<24}{row['ops_per_s']:>10,.0f}{row['us_per_op']:>9.1f}"
            f"{row['round_trips_implied']:>7.2f}{ratio(row['vs_redis_py']):>13}"
            f"{ratio(row['vs_floor']):>10}{row['spread']:>8.1%}"
        )
    lines += [
        "",
        "RTTs: us/op divided by PING's us/op. vs floor: rate / (PING rate / round trips"
        " needed), a cycle needing 2 (lock_all too: what one script a side would take).",
        "asyncio rows: against the asyncio PING and redis-py's asyncio Lock"
        " (redis.asyncio.lock.Lock).",
    ]
    return "\n".join(lines)
