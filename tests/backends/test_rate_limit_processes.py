"""Rate limits across real processes: never over in any window, not under, faults.

The hits are timed by the Redis server itself: each admission returns the server's clock as
the script read it, so the check does not depend on any client's clock.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, rate_limit
from django_redis_lock.testing import RedisServer
from tests.support import rate_workers
from tests.support.helpers import eventually, most_in_a_window, own_locks, running

spawn = multiprocessing.get_context("spawn")

SECONDS = float(os.environ.get("RATE_SECONDS", "10"))


def test_most_in_a_window__counts_a_sliding_window() -> None:
    assert most_in_a_window([0.0, 0.5, 0.999, 1.0, 1.2], 1.0) == 4
    assert most_in_a_window([0.0, 1.0, 2.0], 1.0) == 1
    assert most_in_a_window([], 1.0) == 0


@pytest.mark.serial
def test_rate_limit__6_processes_on_20_per_s_never_exceed_it_and_reach_it(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    children = [
        spawn.Process(
            target=rate_workers.hammer,
            args=(redis_url, prefix, "20/s", SECONDS, n in (2, 5)),  # two of them asyncio
        )
        for n in range(6)
    ]
    with running(children):
        eventually(lambda: raw_redis.llen(f"{prefix}:ready") == len(children), 120)
        raw_redis.rpush(f"{prefix}:go", *["1"] * len(children))
        for child in children:
            child.join(SECONDS + 60)
    assert [c.exitcode for c in children] == [0] * len(children), "a process hung or failed"
    logs = [json.loads(line) for line in raw_redis.lrange(f"{prefix}:log", 0, -1)]
    times = sorted(t for log in logs for t in log)
    per_process = sorted(len(log) for log in logs)
    whole_windows = int(times[-1] - times[0])
    steady = [
        sum(1 for t in times if times[0] + k <= t < times[0] + k + 1) for k in range(whole_windows)
    ]
    summary = (
        f"{len(times)} hits in {times[-1] - times[0]:.2f} s; per process {per_process}; "
        f"per whole second {steady}"
    )
    print(summary)
    assert most_in_a_window(times, 1.0) <= 20, summary
    assert whole_windows >= SECONDS - 2, summary
    assert min(steady) >= 19, f"under 0.95 N in a second: {summary}"
    assert min(per_process) >= SECONDS, f"a process was starved: {summary}"


def test_rate_limit__a_waiter_killed_while_waiting_leaves_nothing_behind(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    child = spawn.Process(target=rate_workers.wait_for_a_slot, args=(redis_url, prefix, "1/20s"))
    with running([child]):
        eventually(lambda: raw_redis.llen(f"{prefix}:waiting") == 1, 60)
        keys_before = sorted(raw_redis.scan_iter(f"{prefix}:{{*"))
        lists_before = [raw_redis.lrange(key, 0, -1) for key in keys_before]
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(10)
    assert child.exitcode == -signal.SIGKILL
    keys_after = sorted(raw_redis.scan_iter(f"{prefix}:{{*"))
    assert keys_after == keys_before
    assert [raw_redis.lrange(key, 0, -1) for key in keys_after] == lists_before
    assert raw_redis.llen(f"{prefix}:admitted twice") == 0


def test_rate_limit__a_frozen_server_fails_a_hit_within_the_socket_timeout() -> None:
    with RedisServer() as server, override_settings(LOCKS=own_locks(server)):
        handle = rate_limit("rl:frozen", "10/s")
        assert handle.acquire()
        server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError, match="unavailable") as raised:
                handle.acquire()
            elapsed = time.monotonic() - started
        finally:
            server.resume()
        assert raised.value.lock_name == "rl:frozen"
        assert elapsed < 0.5 + 0.5
        assert handle.acquire()


def test_rate_limit__the_key_ends_a_period_after_the_latest_hit(
    prefix: str, raw_redis: redis_py.Redis
) -> None:
    handle = rate_limit("rl:expiry", ["5/s", "50000/d"], blocking=False)
    assert handle.acquire()
    day, second = f"{prefix}:{{=rl:expiry}}:r:86400000", f"{prefix}:{{=rl:expiry}}:r:1000"
    assert 86_390_000 < raw_redis.pttl(day) <= 86_400_001
    assert 900 < raw_redis.pttl(second) <= 1001
    eventually(lambda: not raw_redis.exists(second), 3)
    assert raw_redis.exists(day)
