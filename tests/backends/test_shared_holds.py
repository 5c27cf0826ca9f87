"""Readers and a semaphore's holders on Redis: joining and leaving cost the same at any count.

A reader that joins readers (or a holder that joins a semaphore's) with nobody waiting reads
one holder's record, drawn at random, not every holder's; its release drops its own record
alone. (The rule that makes one record enough, holders sharing only under one limit, is in
the contract suite: test_lock_contract.py.)
"""

from __future__ import annotations

import time

import redis as redis_py

from django_redis_lock.backends.base import (
    SHARED,
    AcquireRequest,
    ReleaseRequest,
    holder_metadata,
)
from django_redis_lock.backends.redis import RedisBackend

META = holder_metadata(host="h", pid=1, thread="t")
READ = AcquireRequest(ttl=30, metadata=META, limit=SHARED)
LAST = ReleaseRequest(holds=1)


def commands_run(stats: redis_py.Redis) -> dict[str, int]:
    """Return the calls of each command since the last reset, scripts' own calls included."""
    return {
        name.removeprefix("cmdstat_"): int(row["calls"])
        for name, row in stats.info("commandstats").items()
    }


def test_a_reader_among_readers__reads_no_record_but_one(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # A read acquire and release among 2, 15 and 200 readers: the same commands. (Among 1,
    # its release also sets the key to end with the lease of the reader it leaves alone.)
    assert own_backend.acquire("shared:warm-up", "me", READ).acquired
    assert own_backend.release("shared:warm-up", "me", LAST) == 0  # the server has the scripts
    commands: list[dict[str, int]] = []
    for others in (2, 15, 200):
        name = f"shared:readers-{others}"
        for n in range(others):
            assert own_backend.acquire(name, f"other-{n}", READ).acquired
        stats.config_resetstat()
        joined = own_backend.acquire(name, "me", READ)
        assert joined.acquired
        assert own_backend.release(name, "me", LAST) == 0
        run = commands_run(stats)
        commands.append({c: n for c, n in run.items() if c not in ("config", "info")})
        tokens = [info.fencing_token for info in own_backend.lock_info(name)]
        assert len(tokens) == others
        assert joined.fencing_token is not None
        assert joined.fencing_token > max(tokens)
    assert commands[0]["evalsha"] == 2
    assert "hgetall" not in commands[0], "every record read"
    assert commands[0] == commands[1] == commands[2]


def test_a_reader_joins_above_a_token_ahead_of_the_clock(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # The server's clock stepped back since the other reader took its token.
    name = "shared:ahead"
    assert own_backend.acquire(name, "other", READ).acquired
    key = own_backend.key(name)
    ends, holds, token, rest = stats.hget(key, "other").split(b" ", 3)
    ahead = int(token) + 3_600_000_000
    stats.hset(key, "other", b" ".join([ends, holds, b"%d" % ahead, rest]))
    joined = own_backend.acquire(name, "me", READ)
    assert joined.fencing_token is not None
    assert joined.fencing_token > ahead


def test_a_reader_whose_lease_ended__is_told_so_at_its_release(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    name = "shared:ended"
    assert own_backend.acquire(name, "other", READ).acquired
    short = AcquireRequest(ttl=0.1, metadata=META, limit=SHARED)
    assert own_backend.acquire(name, "me", short).acquired
    time.sleep(0.3)
    assert own_backend.release(name, "me", LAST) is None, "an ended lease is reported, not dropped"
    assert [info.owner for info in own_backend.lock_info(name)] == ["other"]


def test_a_reader_left_alone__its_key_ends_with_its_lease(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # The reader with the longer lease leaves; the one left alone is told, at its release,
    # that its lease ended (the key no longer outlives it).
    name = "shared:left-alone"
    assert own_backend.acquire(name, "long", AcquireRequest(ttl=10, metadata=META, limit=SHARED))
    short = AcquireRequest(ttl=0.2, metadata=META, limit=SHARED)
    assert own_backend.acquire(name, "short", short).acquired
    assert own_backend.release(name, "long", LAST) == 0
    assert stats.pttl(own_backend.key(name)) <= 200
    time.sleep(0.4)
    assert own_backend.ttl(name, "short") is None
    assert own_backend.release(name, "short", LAST) is None, "an ended lease is reported"
    assert stats.exists(own_backend.key(name)) == 0


def test_a_reader_leaves__a_longer_lease_keeps_the_key_alive(
    own_backend: RedisBackend, stats: redis_py.Redis
) -> None:
    # Joining never shortens the key's expiry below another holder's lease.
    name = "shared:expiry"
    assert own_backend.acquire(name, "long", AcquireRequest(ttl=60, metadata=META, limit=SHARED))
    assert own_backend.acquire(name, "short", AcquireRequest(ttl=5, metadata=META, limit=SHARED))
    assert stats.pttl(own_backend.key(name)) > 55_000
    assert own_backend.release(name, "long", LAST) == 0
    assert [info.owner for info in own_backend.lock_info(name)] == ["short"]
    # A writer waits for the reader left, and takes the lock once it is gone.
    writer = AcquireRequest(ttl=30, metadata=META)
    assert not own_backend.acquire(name, "writer", writer).acquired
    assert own_backend.release(name, "short", LAST) == 0
    assert own_backend.acquire(name, "writer", writer).acquired


def test_a_semaphore_full__the_next_holder_is_refused(own_backend: RedisBackend) -> None:
    name = "shared:semaphore"
    three = AcquireRequest(ttl=30, metadata=META, limit=3)
    assert all(own_backend.acquire(name, f"h{n}", three).acquired for n in range(3))
    assert not own_backend.acquire(name, "fourth", three).acquired
    assert own_backend.release(name, "h0", LAST) == 0
    assert own_backend.acquire(name, "fourth", three).acquired
    assert sorted(info.owner for info in own_backend.lock_info(name)) == ["fourth", "h1", "h2"]
