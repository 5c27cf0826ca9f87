"""What locks leave on the server: keys after many distinct locks, renewal round trips."""

from __future__ import annotations

import contextlib
import itertools
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import redis
from libraries import DJANGO_REDIS_LOCK, LIBRARIES, Library

#: What django-redis-lock's keys are for, by the suffix after the hash tag.
DJANGO_KINDS = {
    "h": "holders",
    "d": "data",
    "f": "fencing",
    "q": "queue",
    "w": "waiters",
    "s": "wake-up",
}


def census(client: redis.Redis[bytes], library: Library, name: str = "") -> dict[str, Any]:
    """Count ``library``'s keys of the locks named ``name*``, by kind and expiry (SCAN)."""
    keys = [
        key
        for pattern in library.patterns(name)
        for key in client.scan_iter(match=pattern, count=1000)
    ]
    ttls: list[int] = []
    for start in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            pipe.pttl(key)
        ttls += pipe.execute()
    kinds: dict[str, dict[str, Any]] = {}
    for key, ttl in zip(keys, ttls, strict=True):
        kind = library.kind(key.decode())
        kind = DJANGO_KINDS.get(kind, kind) if library is DJANGO_REDIS_LOCK else kind
        entry = kinds.setdefault(kind, {"keys": 0, "without_expiry": 0, "max_ttl_s": 0.0})
        entry["keys"] += 1
        if ttl == -1:
            entry["without_expiry"] += 1
        else:
            entry["max_ttl_s"] = max(entry["max_ttl_s"], round(ttl / 1000, 1))
    design = {DJANGO_KINDS.get(kind, kind) for kind in library.by_design}
    return {
        "keys": len(keys),
        "kinds": kinds,
        "lock_state_keys": sum(v["keys"] for k, v in kinds.items() if k not in design),
        "by_design_keys": sum(v["keys"] for k, v in kinds.items() if k in design),
        "without_expiry": sum(v["without_expiry"] for v in kinds.values()),
    }


def distinct_names(client: redis.Redis[bytes], library: Library, count: int) -> dict[str, Any]:
    """Acquire and release ``count`` distinct locks of ``library``; count the keys left."""
    started = time.monotonic()
    for index in range(count):
        handle = library.handle(client, f"distinct:{index}")
        if not handle.acquire():
            raise RuntimeError(f"{library.label} could not acquire a free lock")
        handle.release()
    elapsed = time.monotonic() - started
    row = {"library": library.key, "label": library.label, "locks": count}
    row |= census(client, library, "distinct:")
    row["seconds"] = round(elapsed, 2)
    print(
        f"keys        {library.label:<30}{count:,} locks in {elapsed:.1f} s,"
        f" {row['keys']:,} keys left",
        file=sys.stderr,
    )
    return row


def whole_run(client: redis.Redis[bytes]) -> dict[str, Any]:
    """Count every key on the server at the end of the run, by library."""
    rows = {key: census(client, library) for key, library in LIBRARIES.items()}
    counted = sum(row["keys"] for row in rows.values())
    return {"libraries": rows, "other_keys": int(client.dbsize()) - counted}


def _describe(kinds: dict[str, dict[str, Any]], only: set[str] | None) -> str:
    parts = [
        f"{entry['keys']:,} {kind}"
        + (f" (expire within {entry['max_ttl_s']:,.0f} s)" if entry["max_ttl_s"] else "")
        for kind, entry in sorted(kinds.items())
        if only is None or kind in only
    ]
    return ", ".join(parts) or "-"


def format_table(rows: Sequence[dict[str, Any]], end: dict[str, Any]) -> str:
    """Return the distinct-names rows and the end-of-run count as plain text."""
    header = (
        f"{'library':<20}{'locks':>8}{'keys left':>11}{'lock state':>12}{'no expiry':>11}"
        "  kept by design"
    )
    lines = [header, "-" * (len(header) + 30)]
    for row in rows:
        design = {DJANGO_KINDS.get(k, k) for k in LIBRARIES[row["library"]].by_design}
        lines.append(
            f"{row['label']:<20}{row['locks']:>8,}{row['keys']:>11,}{row['lock_state_keys']:>12,}"
            f"{row['without_expiry']:>11,}  {_describe(row['kinds'], design)}"
        )
    lines += [
        "",
        "lock state: keys that say a lock is held or waited for (must be 0 after release).",
        "",
        "All keys at the end of the run:",
    ]
    for key, row in end["libraries"].items():
        lines.append(
            f"  {LIBRARIES[key].label:<20}{row['keys']:>8,}  {_describe(row['kinds'], None)}"
        )
    lines.append(f"  {'other':<20}{end['other_keys']:>8,}")
    return "\n".join(lines)


def command_calls(client: redis.Redis[bytes]) -> dict[str, int]:
    """Return how many EVALSHA and SCRIPT commands the server has run."""
    stats = client.info("commandstats")
    return {
        name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "script")
    }


def renewal_cost(
    client: redis.Redis[bytes], count: int, ttl: float, observe: float
) -> dict[str, Any]:
    """Hold ``count`` locks with auto_renew for ``observe`` seconds; count renewal round trips.

    The backend's ``renew`` (which sends every lease in one pipeline: one round trip) is
    wrapped, in this process only, to count its calls and the leases each carries.
    """
    from django_redis_lock import LockError, lock, locks

    backend = locks["default"]
    calls: list[tuple[float, float, int]] = []  # (sent, seconds, leases)
    renew = backend.renew

    def counting_renew(leases: Sequence[tuple[str, str, float]]) -> list[float | None]:
        sent = time.monotonic()
        try:
            return renew(leases)
        finally:
            calls.append((sent, time.monotonic() - sent, len(leases)))

    backend.renew = counting_renew  # type: ignore[method-assign]
    handles = [lock(f"renew:{index}", ttl=ttl, auto_renew=True) for index in range(count)]
    held = []
    try:
        began = time.monotonic()
        for handle in handles:
            if not handle.acquire():
                raise RuntimeError(f"could not acquire the free lock {handle.name!r}")
            held.append(handle)
        acquired = time.monotonic()
        before = command_calls(client)
        time.sleep(observe)
        after = command_calls(client)
        window = [call for call in calls if call[0] >= acquired]
        lost = sum(handle.lost for handle in held)
        still_owned = sum(handle.owned() for handle in held)
    finally:
        for handle in held:
            with contextlib.suppress(LockError):
                handle.release()
        del backend.renew
    interval = ttl / 3
    sent = [call[0] for call in window]
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    row = {
        "locks": count,
        "held": len(held),
        "ttl_s": ttl,
        "interval_s": round(interval, 3),
        "acquire_s": round(acquired - began, 2),
        "observed_s": observe,
        "renew_calls": len(window),
        "renew_calls_before_observing": len(calls) - len(window),
        "leases_per_call": sorted({call[2] for call in window}),
        "mean_gap_s": round(statistics.mean(gaps), 3) if gaps else None,
        "round_trips_per_interval": round(interval / statistics.mean(gaps), 2) if gaps else None,
        "renew_ms": round(statistics.median(call[1] for call in window) * 1e3, 1)
        if window
        else None,
        "evalsha_in_window": after["evalsha"] - before["evalsha"],
        "renewals_in_window": sum(call[2] for call in window),
        "script_loads_in_window": after["script"] - before["script"],
        "lost": lost,
        "still_owned": still_owned,
    }
    print(f"renewal     {row['renew_calls']} renew calls in {observe:g} s", file=sys.stderr)
    return row


def format_renewal(row: dict[str, Any]) -> str:
    """Return the renewal figures as plain text."""
    leases = "/".join(f"{n:,}" for n in row["leases_per_call"]) or "-"
    gap = "-" if row["mean_gap_s"] is None else f"{row['mean_gap_s']:.3f} s"
    per_interval = row["round_trips_per_interval"]
    return "\n".join(
        [
            f"locks held with auto_renew        {row['held']:,} of {row['locks']:,}"
            f" (ttl {row['ttl_s']:g} s, so renewed every {row['interval_s']:g} s;"
            f" acquired in {row['acquire_s']:g} s)",
            f"renew round trips in {row['observed_s']:g} s          {row['renew_calls']}"
            f" (plus {row['renew_calls_before_observing']} while acquiring)",
            f"leases per round trip             {leases}",
            f"mean time between round trips     {gap}",
            f"round trips per renewal interval  {'-' if per_interval is None else per_interval}",
            f"one round trip takes (median)     {row['renew_ms']} ms",
            f"EVALSHA run by the server         {row['evalsha_in_window']:,}"
            f" ({row['renewals_in_window']:,} renewals sent, SCRIPT LOAD"
            f" {row['script_loads_in_window']}x)",
            f"locks still owned / lost          {row['still_owned']:,} / {row['lost']:,}",
        ]
    )
