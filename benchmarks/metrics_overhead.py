"""The cost of the Prometheus metrics on the uncontended path: the same cycle, metrics off and on.

django-redis-lock's uncontended acquire+release cycle (blocking, and ``alock`` on one event
loop) is timed with ``django_redis_lock.contrib.prometheus`` disabled and enabled, the two
taking turns in short slices (the order alternating), for ``rounds`` rounds; the median
round's rates are compared. The overhead is the extra time per cycle with metrics on.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import uncontended
from uncontended import Env, Sample, Scenario

#: The cycles measured: django-redis-lock's own uncontended scenarios.
CYCLES = tuple(
    scenario for scenario in uncontended.SCENARIOS if scenario.key.startswith("django_redis_lock")
)


def measure(
    env: Env, *, seconds: float, rounds: int, warmup: float, slice_seconds: float
) -> list[dict[str, Any]]:
    """Time each cycle with metrics off and on; return one row per cycle."""
    from django_redis_lock.contrib.prometheus import disable, enable

    switch = {False: disable, True: enable}
    rows = []
    for scenario in CYCLES:
        time_for = uncontended.timer(scenario, env)
        for on in (False, True):
            switch[on]()
            time_for(warmup)
        rates: dict[bool, list[float]] = {False: [], True: []}
        slices = max(1, round(seconds / slice_seconds))
        for round_index in range(rounds):
            totals = {False: Sample(0, 0.0), True: Sample(0, 0.0)}
            for slice_index in range(slices):
                for on in (False, True) if slice_index % 2 == 0 else (True, False):
                    switch[on]()
                    totals[on] += time_for(seconds / slices)
            disable()
            for on, total in totals.items():
                rates[on].append(total.rate)
            print(
                f"round {round_index + 1}/{rounds}  {scenario.label:<24}"
                f"{totals[False].rate:>10,.0f} ops/s off {totals[True].rate:>10,.0f} on",
                file=sys.stderr,
            )
        rows.append(_row(scenario, rates))
    return rows


def _row(scenario: Scenario, rates: dict[bool, list[float]]) -> dict[str, Any]:
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    # Per round, so the rounds' drift (the machine is shared) cancels out of each ratio.
    per_round = [a / b - 1 for a, b in zip(rates[False], rates[True], strict=True)]
    return {
        "scenario": scenario.key,
        "label": scenario.label,
        "off_us": round(1e6 / off, 2),
        "on_us": round(1e6 / on, 2),
        "overhead": round(statistics.median(per_round), 4),
        "rounds": [round(value, 4) for value in per_round],
    }


def format_report(rows: list[dict[str, Any]], target: float) -> str:
    """Return the rows as a table, and whether each met the ``target`` overhead."""
    header = f"{'cycle':<26}{'off us':>9}{'on us':>9}{'overhead':>10}  target < {target:.0%}"
    lines = [header, "-" * len(header)]
    for row in rows:
        met = "met" if row["overhead"] < target else "MISSED"
        lines.append(
            f"{row['label']:<26}{row['off_us']:>9.1f}{row['on_us']:>9.1f}"
            f"{row['overhead']:>10.1%}  {met}"
        )
    lines.append(
        "overhead: median over rounds of (rate off / rate on - 1), the extra time per cycle"
        " with django_redis_lock.contrib.prometheus enabled."
    )
    return "\n".join(lines)
