"""What ``rate.lua`` keeps of a rate, on a real redis-server: long lives and stepped clocks.

Each test writes the list a rate would hold after a long life, or after the server's clock
stepped back, then hits it through the backend as any caller does.
"""

from __future__ import annotations

import pytest
import redis as redis_py

from django_redis_lock import locks, rate_limit
from django_redis_lock.backends import locmem
from django_redis_lock.backends._redis.windows import PAGE
from django_redis_lock.backends.base import Rate
from django_redis_lock.backends.locmem import LocMemBackend
from tests.support.clock import ManualClock


def _server_us(raw_redis: redis_py.Redis) -> int:
    seconds, microseconds = raw_redis.time()
    return int(seconds) * 1_000_000 + int(microseconds)


def _totals(raw_redis: redis_py.Redis, key: str) -> list[int]:
    return [int(entry.split()[1]) for entry in raw_redis.lrange(key, 0, -1)]


@pytest.mark.parametrize("total", [2**50 + 1, 2**53], ids=["past-2**50", "at-2**53"])
def test_a_long_busy_life__weights_past_lua_precision_still_count_exactly(
    prefix: str, raw_redis: redis_py.Redis, total: int
) -> None:
    # Cumulative weights only grow while a rate is never idle a period; from 2**53 on, Lua's
    # numbers could not tell one more hit apart, and every hit would be admitted.
    key = f"{prefix}:{{=rl:long-life}}:r:1000"
    now = _server_us(raw_redis)
    raw_redis.rpush(key, f"{now - 2_000_000} {total} 10", f"{now - 10} {total + 2} 10")
    raw_redis.pexpire(key, 1000)
    handle = rate_limit("rl:long-life", "10/s", blocking=False)
    admitted = sum(handle.acquire() for _ in range(50))
    assert admitted == 8, "two of ten were already in the window"
    assert max(_totals(raw_redis, key)) <= 10, "the weights are counted from the base again"


def test_a_clock_stepped_back__a_list_of_the_base_alone_still_counts_its_hits(
    prefix: str, raw_redis: redis_py.Redis
) -> None:
    # The rate's last bucket left the window and became the base; then the server's clock
    # stepped back past it. A hit merged into the base would never be counted.
    key = f"{prefix}:{{=rl:stepped}}:r:1000"
    now = _server_us(raw_redis)
    raw_redis.rpush(key, f"{now + 2_000_000} 7 10")
    raw_redis.pexpire(key, 5000)
    handle = rate_limit("rl:stepped", "10/s", blocking=False)
    admitted = sum(handle.acquire() for _ in range(50))
    assert admitted == 10


def test_locmem__nothing_is_kept_of_rate_limits_idle_a_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a key expires on Redis: a name per user must not pile up in a long-lived process.
    clock = ManualClock()
    monkeypatch.setattr(locmem, "time", clock)
    backend = LocMemBackend()
    for user in range(1000):
        assert backend.admit(f"rl:user:{user}", [Rate(5, 1.0)]).admitted
        assert backend.schedule_retry(f"rl:user:{user}", Rate(5, 1.0), 0.0) == 0.0
    clock.sleep(1.5)  # a period after the latest hit, and after the latest retry's moment
    assert backend.admit("rl:user:new", [Rate(5, 1.0)]).admitted
    assert [info.name for info in backend.iter_rate_limits()] == ["rl:user:new"]
    kept = backend._rates
    assert list(kept._windows) == ["rl:user:new"]
    assert kept._next_retry == {}


def test_listing__reads_page_after_page_and_misses_none() -> None:
    backend = locks["default"]
    names = [f"rl:page:{n}" for n in range(2 * PAGE + 1)]
    for name in names:
        assert backend.admit(name, [Rate(5, 60.0)]).admitted
    listed = backend.iter_rate_limits("rl:page:*")
    first = next(listed)
    assert (first.used, str(first.rate)) == (1, "5/m")
    assert sorted([first.name, *(info.name for info in listed)]) == sorted(names)
