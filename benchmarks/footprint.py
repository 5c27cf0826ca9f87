"""What locks leave on the server: the keys and memory many distinct lock names cost.

Each library acquires and releases ``count`` locks of distinct names, each through a fresh lock
object; the keys it left are the keys of its keyspace (``Library.keyspace``) that were not there
before. For them the benchmark reports how many there are, their ``MEMORY USAGE``, whether any
has no expiry or outlives the lease (expires later than a lease taken now would), and, for the
whole server, the growth of ``INFO memory`` ``used_memory``, which also counts what the keys
cost in Redis's own tables. Nothing is assumed about what a key is for.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import redis
from libraries import LEASE, LIBRARIES, Library

#: Memory growth is reported per this many names (the target's unit).
PER_NAMES = 10_000
#: The most ``used_memory`` may grow per :data:`PER_NAMES` names (django-redis-lock's target).
TARGET_GROWTH = 100_000


def keys_of(client: redis.Redis[bytes], library: Library) -> set[bytes]:
    """Return every key of ``library`` on the server (SCAN)."""
    return {
        key for pattern in library.keyspace for key in client.scan_iter(match=pattern, count=1000)
    }


def _each(
    client: redis.Redis[bytes], keys: Sequence[bytes], add: Callable[[Any, bytes], object]
) -> list[Any]:
    """Return the replies of one command per key, ``add(pipeline, key)``, sent in pipelines."""
    replies: list[Any] = []
    for start in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            add(pipe, key)
        replies += pipe.execute()
    return replies


def describe(client: redis.Redis[bytes], keys: Collection[bytes]) -> dict[str, Any]:
    """Return how many ``keys`` exist, their memory, and how long they will live."""
    ordered = sorted(keys)
    ttls = _each(client, ordered, lambda pipe, key: pipe.pttl(key))
    sizes = _each(client, ordered, lambda pipe, key: pipe.memory_usage(key, samples=0))
    alive = [(ttl, size) for ttl, size in zip(ttls, sizes, strict=True) if ttl != -2]
    lasting = [ttl for ttl, _ in alive if ttl >= 0]
    return {
        "keys": len(alive),
        "key_bytes": sum(size or 0 for _, size in alive),
        "without_expiry": sum(ttl == -1 for ttl, _ in alive),
        "max_ttl_s": round(max(lasting) / 1000, 1) if lasting else None,
        # Still there after a lease taken now would have ended (no expiry counts too).
        "outliving_lease": sum(ttl == -1 or ttl > LEASE * 1000 for ttl, _ in alive),
    }


def used_memory(client: redis.Redis[bytes]) -> int:
    """Return ``INFO memory`` ``used_memory``, in bytes."""
    return int(client.info("memory")["used_memory"])


def distinct_names(client: redis.Redis[bytes], library: Library, count: int) -> dict[str, Any]:
    """Acquire and release ``count`` distinct locks of ``library``; describe what they left."""
    before_keys = keys_of(client, library)
    before = used_memory(client)
    started = time.monotonic()
    for index in range(count):
        handle = library.handle(client, f"distinct:{index}")
        if not handle.acquire():
            raise RuntimeError(f"{library.label} could not acquire a free lock")
        handle.release()
    elapsed = time.monotonic() - started
    growth = used_memory(client) - before
    left = keys_of(client, library) - before_keys
    row: dict[str, Any] = {"library": library.key, "label": library.label, "locks": count}
    row |= describe(client, left)
    row |= {
        "used_memory_growth": growth,
        "growth_per_10k_names": round(growth * PER_NAMES / count),
        "key_bytes_per_10k_names": round(row["key_bytes"] * PER_NAMES / count),
        "seconds": round(elapsed, 2),
    }
    print(
        f"memory      {library.label:<30}{count:,} locks in {elapsed:.1f} s,"
        f" {row['keys']:,} keys left, used_memory {growth:+,} B",
        file=sys.stderr,
    )
    return row


def whole_run(client: redis.Redis[bytes]) -> dict[str, Any]:
    """Describe every key on the server at the end of the run, by library."""
    rows = {key: describe(client, keys_of(client, library)) for key, library in LIBRARIES.items()}
    counted = sum(row["keys"] for row in rows.values())
    return {"libraries": rows, "other_keys": int(client.dbsize()) - counted}


def _ttl(row: dict[str, Any]) -> str:
    return "-" if row["max_ttl_s"] is None else f"{row['max_ttl_s']:,.0f} s"


def format_table(rows: Sequence[dict[str, Any]], end: dict[str, Any]) -> str:
    """Return the distinct-names rows and the end-of-run count as plain text."""
    header = (
        f"{'library':<20}{'locks':>8}{'keys left':>11}{'key bytes':>11}{'used_memory':>13}"
        f"{'per 10k names':>15}{'no expiry':>11}{'max TTL':>11}{'outlive lease':>15}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row['label']:<20}{row['locks']:>8,}{row['keys']:>11,}{row['key_bytes']:>11,}"
            f"{row['used_memory_growth']:>+13,}{row['growth_per_10k_names']:>+15,}"
            f"{row['without_expiry']:>11,}{_ttl(row):>11}{row['outliving_lease']:>15,}"
        )
    lines += [
        "",
        "key bytes: MEMORY USAGE summed over the keys left; used_memory: growth of INFO memory"
        " used_memory (bytes),",
        f"also per {PER_NAMES:,} names. outlive lease: keys left with no expiry or a TTL above"
        f" the {LEASE} s lease.",
        "",
        "All keys at the end of the run:",
    ]
    for key, row in end["libraries"].items():
        lines.append(
            f"  {LIBRARIES[key].label:<20}{row['keys']:>8,} keys, {row['key_bytes']:,} bytes,"
            f" {row['without_expiry']:,} without expiry, max TTL {_ttl(row)}"
        )
    lines.append(f"  {'other':<20}{end['other_keys']:>8,} keys")
    return "\n".join(lines)
