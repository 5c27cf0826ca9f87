"""Numbers the scripts write as text: times, tokens and records, on a real redis-server.

The scripts turn whole numbers into text with ``digits()`` (the prelude), and the acquire's
fast path builds its record from the strings of the server's clock; both must write exactly
what the slow path's ``record()`` and the readers of records expect.
"""

from __future__ import annotations

import dataclasses
import re
from importlib.resources import files

import pytest
import redis as redis_py

from django_redis_lock import lock, locks
from django_redis_lock.backends.base import AcquireRequest, holder_metadata

RECORD = re.compile(rb"^(\d+) (\d+) (\d+) (\d+) (\d+) (\S*) (.*)$")


@pytest.mark.parametrize(
    "number",
    [0, 7, 999_999_999, 1_000_000_000, 1_000_000_007, 1_795_870_212_810, 1_795_870_182_000_055],
)
def test_digits_writes_a_whole_number_exactly(raw_redis: redis_py.Redis, number: int) -> None:
    # Below 10**9 in one part; above it in two, the lower one zero-padded to nine digits.
    prelude = files("django_redis_lock.backends._redis").joinpath("lua", "_prelude.lua")
    script = prelude.read_text("utf-8") + "\nreturn digits(tonumber(ARGV[1]))"
    assert raw_redis.eval(script, 0, str(number)) == str(number).encode()


def _record(raw_redis: redis_py.Redis, prefix: str, name: str) -> tuple[int, ...]:
    key = f"{prefix}:{{={name}}}:h"
    (value,) = raw_redis.hgetall(key).values()
    found = RECORD.match(value)
    assert found, value
    ends, holds, fence, at, limit = (int(group) for group in found.groups()[:5])
    # TIME and PTTL in one transaction: read at one instant, however loaded the machine is.
    pipe = raw_redis.pipeline(transaction=True)
    pipe.time()
    pipe.pttl(key)
    (seconds, microseconds), left = pipe.execute()
    expires = seconds * 1000 + microseconds // 1000 + left
    return ends, holds, fence, at, limit, expires


@pytest.mark.parametrize("fair", [False, True], ids=["fast-path", "slow-path"])
def test_a_free_lock_is_recorded_alike_by_the_fast_and_the_slow_path(
    raw_redis: redis_py.Redis, prefix: str, fair: bool
) -> None:
    # fair=True takes the slow path (record()); the default, the fast path's own strings.
    handle = lock(f"numbers-{fair}", ttl=7.5, fair=fair)
    assert handle.acquire(blocking=False)
    ends, holds, fence, at, limit, expires = _record(raw_redis, prefix, f"numbers-{fair}")
    assert (holds, limit) == (1, 1)
    assert ends - at == 7500
    assert fence // 1000 == at  # the server's clock in us, and the acquire's time in ms
    assert handle.fencing_token == fence
    assert ends - 3 <= expires <= ends - 1  # the holders key ends with the lease, not after
    assert locks["default"].ttl(f"numbers-{fair}") == pytest.approx(7.5, abs=0.5)
    handle.release()


@pytest.mark.parametrize("holds", [0, None])
def test_a_claim_is_recorded_alike_by_the_fast_and_the_slow_path(
    raw_redis: redis_py.Redis, prefix: str, holds: int | None
) -> None:
    # holds=0, as Lock sends it, takes the claim's fast path; None (count on the server), the
    # slow path's record(). The grant becomes the lease asked for, and nothing else changes.
    backend, name = locks["default"], f"numbers-claim-{holds}"
    meta = holder_metadata(host="waiting-host", pid=2, thread="t")
    assert backend.acquire(name, "holder", AcquireRequest(ttl=30)).acquired
    waiting = AcquireRequest(ttl=7.5, metadata=meta, wait=10, holds=0, attempt="1a.2b")
    assert not backend.acquire(name, "waiter", waiting).acquired
    assert backend.release(name, "holder") == 0
    key = f"{prefix}:{{={name}}}:h"
    granted = raw_redis.hget(key, "waiter")
    claim = dataclasses.replace(waiting, claim=True, holds=holds)
    raw_redis.config_resetstat()
    claimed = backend.acquire(name, "waiter", claim)
    slow = "cmdstat_hgetall" in raw_redis.info("commandstats")  # settle() reads every holder
    assert slow is (holds is None)
    ends, count, fence, _at, _limit, expires = _record(raw_redis, prefix, name)
    assert claimed.acquired
    assert (claimed.fencing_token, claimed.holds) == (fence, count) == (fence, 1)
    assert claimed.lease == pytest.approx(7.5, abs=0.1)
    seconds, microseconds = raw_redis.time()
    assert ends == pytest.approx(seconds * 1000 + microseconds // 1000 + 7500, abs=100)
    assert ends - 3 <= expires <= ends - 1
    record = raw_redis.hget(key, "waiter")
    assert record.split(b" ", 1)[1] == granted.split(b" ", 1)[1], "only the lease end changed"
    backend.force_release(name)
