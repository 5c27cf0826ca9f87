"""What keeping many locks alive costs: renewal round trips and Redis server time per renewal.

One process holds ``count`` django-redis-lock locks with ``auto_renew=True`` and a lease of
:data:`TTL` seconds, renewed every third of it (the interval). The backend's ``renew`` (which
sends every lease in one pipeline) is wrapped, in this process only, to record each call: when
it was sent, how long it took, how many leases it carried, and what it cost the server, read
from ``INFO commandstats`` (the commands renewal sends at top level, found under ``MONITOR``
as in ``servertime.py``) and ``INFO cpu`` just before and after it.

Once the acquisitions are done and a renewal has brought every lease into step, the calls of
:data:`INTERVALS` intervals are kept. Every lease is renewed once per round, so the leases
they carried, over the locks held, count the rounds; each figure is then given per round: one
round per interval, for every lease.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import servertime

#: The lease of every lock held, in seconds (renewed every third of it).
TTL = 3.0
#: How many renewal intervals are watched.
INTERVALS = 3


@dataclass(frozen=True)
class Call:
    """One renew call: when it was sent, its seconds and leases, what it cost the server."""

    sent: float
    seconds: float
    leases: int
    cost: servertime.Spent


@contextlib.contextmanager
def watching_renewals(
    client: redis.Redis[bytes], commands: Collection[str] | None
) -> Iterator[list[Call]]:
    """Wrap the default backend's ``renew`` to record its calls; yield the record.

    With ``commands`` None, no ``INFO`` is sent: the server's cost is not recorded.
    """
    from django_redis_lock import locks

    backend = locks["default"]
    calls: list[Call] = []
    renew = backend.renew

    def watched_renew(leases: Sequence[tuple[str, str, float]]) -> Any:
        before = None if commands is None else servertime.snapshot(client)
        sent = time.monotonic()
        try:
            return renew(leases)
        finally:
            took = time.monotonic() - sent
            cost = servertime.Spent()
            if before is not None and commands is not None:
                after = servertime.snapshot(client, closing=True)
                cost = servertime.spent(before, after, commands)
            calls.append(Call(sent, took, len(leases), cost))

    backend.renew = watched_renew  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        del backend.renew


def next_call(calls: list[Call], after: float, timeout: float) -> Call:
    """Wait for a renew call sent after ``after`` to be recorded (done); return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [call for call in calls if call.sent > after]
        if found:
            return found[0]
        time.sleep(0.005)
    raise RuntimeError(f"no lease was renewed within {timeout:g} s")


def renewal_commands(client: redis.Redis[bytes]) -> frozenset[str]:
    """Return the commands renewal sends at top level: one lock renewed under MONITOR."""
    from django_redis_lock import lock

    ttl = 0.6
    with watching_renewals(client, None) as calls:
        handle = lock("renew:commands", ttl=ttl, auto_renew=True)
        if not handle.acquire():
            raise RuntimeError("could not acquire the free lock 'renew:commands'")
        try:
            since = time.monotonic()
            return servertime.top_level_commands(
                client, lambda: next_call(calls, since, timeout=ttl * 2), times=1
            )
        finally:
            handle.release()


def measure(
    client: redis.Redis[bytes], count: int, commands: frozenset[str], overhead: float
) -> dict[str, Any]:
    """Hold ``count`` locks with auto_renew; measure what renewing them costs per round.

    ``overhead`` is the CPU the ``INFO`` commands around each call count (taken off).
    """
    from django_redis_lock import LockError, lock

    interval = TTL / 3
    handles = [lock(f"renew:{count}:{index}", ttl=TTL, auto_renew=True) for index in range(count)]
    held = []
    with watching_renewals(client, commands) as calls:
        try:
            began = time.monotonic()
            for handle in handles:
                if not handle.acquire():
                    raise RuntimeError(f"could not acquire the free lock {handle.name!r}")
                held.append(handle)
            acquired = time.monotonic()
            start = next_call(calls, acquired, timeout=TTL).sent + interval / 2
            end = start + INTERVALS * interval
            time.sleep(max(0.0, end - time.monotonic()))
            next_call(calls, end, timeout=TTL)  # the last call of the window has answered
            window = [call for call in calls if start <= call.sent < end]
            lost = sum(handle.lost for handle in held)
            still_owned = sum(handle.owned() for handle in held)
        finally:
            for handle in held:
                with contextlib.suppress(LockError):
                    handle.release()
    cost = sum((call.cost for call in window), servertime.Spent())
    rounds = sum(call.leases for call in window) / max(1, len(held))
    per_round = max(rounds, 1e-9)
    gaps = [later.sent - earlier.sent for earlier, later in itertools.pairwise(window)]
    row: dict[str, Any] = {
        "locks": count,
        "held": len(held),
        "ttl_s": TTL,
        "interval_s": round(interval, 3),
        "acquire_s": round(acquired - began, 2),
        "watched_s": round(end - start, 2),
        "renew_calls": len(window),
        "rounds": round(rounds, 2),
        "round_trips_per_round": round(len(window) / per_round, 2),
        "leases_per_call": sorted({call.leases for call in window}),
        "mean_gap_s": round(statistics.mean(gaps), 3) if gaps else None,
        "renew_ms": round(statistics.median(call.seconds for call in window) * 1e3, 2)
        if window
        else None,
        "commands": sorted(commands),
        "commands_per_round": round(cost.calls / per_round, 1),
        "usec_per_round": round(cost.usec / per_round, 1),
        "cpu_us_per_round": round((cost.cpu - len(window) * overhead) * 1e6 / per_round, 1),
        "lost": lost,
        "still_owned": still_owned,
    }
    row["usec_per_lock"] = round(row["usec_per_round"] / max(1, len(held)), 2)
    row["cpu_us_per_lock"] = round(row["cpu_us_per_round"] / max(1, len(held)), 2)
    print(
        f"renewal     {count:>7,} locks: {row['round_trips_per_round']} round trips,"
        f" {row['usec_per_round']:,.0f} us commands, {row['cpu_us_per_round']:,.0f} us CPU"
        " per round",
        file=sys.stderr,
    )
    return row


def curve(client: redis.Redis[bytes], counts: Sequence[int]) -> list[dict[str, Any]]:
    """Return :func:`measure` for each count of locks held."""
    commands = renewal_commands(client)
    overhead = servertime.bracket_cpu(client)
    return [measure(client, count, commands, overhead) for count in counts]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the renewal curve as a plain-text table."""
    header = (
        f"{'locks':>8}{'RTTs/round':>12}{'leases/RTT':>12}{'RTT ms':>9}{'every':>9}"
        f"{'commands':>10}{'cmd us':>10}{'per lock':>10}{'CPU us':>10}{'per lock':>10}{'lost':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        leases = "/".join(f"{n:,}" for n in row["leases_per_call"]) or "-"
        renew_ms = "-" if row["renew_ms"] is None else f"{row['renew_ms']:.1f}"
        gap = "-" if row["mean_gap_s"] is None else f"{row['mean_gap_s']:.2f} s"
        lines.append(
            f"{row['held']:>8,}{row['round_trips_per_round']:>12.2f}{leases:>12}{renew_ms:>9}"
            f"{gap:>9}{row['commands_per_round']:>10,.0f}{row['usec_per_round']:>10,.0f}"
            f"{row['usec_per_lock']:>10.2f}{row['cpu_us_per_round']:>10,.0f}"
            f"{row['cpu_us_per_lock']:>10.2f}{row['lost']:>6}"
        )
    commands = " ".join(rows[0]["commands"]) if rows else "-"
    lines += [
        "",
        f"Per renewal round (every lease renewed once; due every {TTL / 3:g} s with ttl"
        f" {TTL:g} s), over {INTERVALS} intervals. every: mean time between round trips.",
        f"commands: top-level commands renewal sent ({commands}); cmd us: their usec in INFO"
        " commandstats; CPU us: the Redis process's",
        "user+sys CPU (less what reading INFO costs), both read just before and after each round"
        " trip. lost: leases lost while watched.",
    ]
    return "\n".join(lines)
