"""``rate_limit()``: at most N hits in any window of a period, on every backend that keeps them.

Periods are 1 s (the shortest a rate has) or a few seconds; on LocMem the ``clock`` fixture
passes them at once, elsewhere a test really waits. Redlock refuses rate limits by design
(tests/backends/test_redlock.py).
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from django_redis_lock import (
    InvalidLockArgumentError,
    RateLimitExceededError,
    arate_limit,
    locks,
    rate_limit,
)
from django_redis_lock.backends.base import Rate
from django_redis_lock.signals import rate_limited
from tests.support.clock import Clock

pytestmark = pytest.mark.needs("rate_limits")


def admitted(name: str, using: str, rate: str | list[str], hits: int, cost: int = 1) -> int:
    """Return how many of ``hits`` tries at once ``rate`` admits."""
    handle = rate_limit(name, rate, using=using, blocking=False, cost=cost)
    return sum(handle.acquire() for _ in range(hits))


def test_rate_limit__admits_n_per_period_then_refuses(using: str, clock: Clock) -> None:
    assert admitted("rl:n", using, "5/s", 8) == 5
    clock.sleep(1.05)
    assert admitted("rl:n", using, "5/s", 8) == 5


def test_rate_limit__a_refusal_says_when_a_slot_frees(using: str, clock: Clock) -> None:
    handle = rate_limit("rl:when", "3/2s", using=using, blocking=False)
    assert all(handle.acquire() for _ in range(3))
    clock.sleep(0.5)
    refused = handle.admit()
    assert not refused.admitted
    assert 1.0 <= refused.retry_after <= 1.51
    assert refused.rate == Rate(3, 2.0)


def test_rate_limit__every_rate_of_a_list_must_admit(using: str, clock: Clock) -> None:
    rates = ["3/s", "4/3s"]
    assert admitted("rl:list", using, rates, 5) == 3
    clock.sleep(1.05)
    # The second rate has one slot left in its 3 s window.
    assert admitted("rl:list", using, rates, 5) == 1
    refused = rate_limit("rl:list", rates, using=using, blocking=False).admit()
    assert refused.rate == Rate(4, 3.0)
    assert 1.2 <= refused.retry_after <= 2.0


def test_rate_limit__a_refused_hit_counts_against_no_rate(using: str) -> None:
    assert admitted("rl:none", using, ["2/s", "100/d"], 10) == 2
    (day,) = [info for info in locks[using].iter_rate_limits("rl:none") if info.rate.period > 1]
    assert day.used == 2


def test_rate_limit__cost_weighs_a_hit(using: str, clock: Clock) -> None:
    assert admitted("rl:cost", using, "10/s", 4, cost=3) == 3
    assert admitted("rl:cost", using, "10/s", 1, cost=1) == 1
    refused = rate_limit("rl:cost", "10/s", using=using, blocking=False).admit(cost=1)
    assert not refused.admitted


def test_rate_limit__names_are_separate(using: str) -> None:
    assert admitted("rl:a", using, "2/s", 3) == 2
    assert admitted("rl:b", using, "2/s", 3) == 2


def test_rate_limit__blocking_waits_until_a_slot_frees(using: str) -> None:
    handle = rate_limit("rl:wait", "2/s", using=using)
    started = time.monotonic()
    for _ in range(3):
        handle.acquire()
    waited = time.monotonic() - started
    assert 0.9 <= waited <= 3


def test_rate_limit__a_timeout_shorter_than_the_wait_is_refused_at_once(using: str) -> None:
    handle = rate_limit("rl:short", "1/5s", using=using, timeout=1)
    assert handle.acquire()
    started = time.monotonic()
    with pytest.raises(RateLimitExceededError) as raised:
        with handle:
            pass
    assert time.monotonic() - started < 1.0
    assert 4 <= raised.value.retry_after <= 5.01
    assert raised.value.lock_name == "rl:short"
    assert "rl:short" in str(raised.value)


def test_rate_limit__as_a_decorator(using: str) -> None:
    calls: list[int] = []

    @rate_limit("rl:decorated", "2/5s", using=using, blocking=False)
    def work(number: int) -> int:
        calls.append(number)
        return number * 2

    assert work(1) == 2
    assert work(2) == 4
    with pytest.raises(RateLimitExceededError):
        work(3)
    assert calls == [1, 2]


def test_arate_limit__shares_the_limit_with_blocking_code(using: str) -> None:
    @arate_limit("rl:async", "3/5s", using=using, blocking=False)
    async def work() -> str:
        return "done"

    async def main() -> list[object]:
        return await asyncio.gather(work(), work(), return_exceptions=True)

    assert admitted("rl:async", using, "3/5s", 1) == 1
    results = asyncio.run(main())
    assert results == ["done", "done"]
    assert not asyncio.run(arate_limit("rl:async", "3/5s", using=using).acquire(blocking=False))


def test_arate_limit__waits_without_blocking_the_loop(using: str) -> None:
    async def main() -> tuple[float, int]:
        handle = arate_limit("rl:await", "1/s", using=using)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        await handle.acquire()
        await handle.acquire()
        ticker.cancel()
        return time.monotonic() - started, ticks

    waited, ticks = asyncio.run(main())
    assert 0.9 <= waited <= 3
    assert ticks > 20


def test_rate_limit__a_refusal_sends_the_signal(using: str) -> None:
    received: list[dict[str, object]] = []

    def receiver(**kwargs: object) -> None:
        received.append(kwargs)

    rate_limited.connect(receiver)
    try:
        assert admitted("rl:signal", using, "1/5s", 2) == 1
    finally:
        rate_limited.disconnect(receiver)
    (sent,) = received
    assert sent["name"] == "rl:signal"
    assert sent["using"] == using
    assert sent["cost"] == 1
    assert 4 <= float(sent["retry_after"]) <= 5.01  # type: ignore[arg-type]


def test_rate_limit__listing_shows_use_and_the_next_free_slot(using: str) -> None:
    assert admitted("rl:seen", using, ["2/10s", "5/m"], 2) == 2
    infos = sorted(locks[using].iter_rate_limits("rl:seen"), key=lambda info: info.rate.period)
    assert [(str(info.rate), info.used) for info in infos] == [("2/10s", 2), ("5/m", 2)]
    assert 5 <= infos[0].free_in <= 10.01
    assert infos[1].free_in == 0
    assert list(locks[using].iter_rate_limits("other*")) == []


def test_rate_limit__nothing_is_listed_after_a_period_idle(using: str, clock: Clock) -> None:
    assert admitted("rl:idle", using, "2/s", 1) == 1
    clock.sleep(1.05)
    assert list(locks[using].iter_rate_limits("rl:idle")) == []


@pytest.mark.parametrize(
    ("rate", "problem"),
    [
        ("0/s", "from 1 to"),
        ("-1/m", "from 1 to"),
        ("10/fortnight", "unknown unit 'fortnight'"),
        ("ten per second", "is not of the form"),
        ("10/0s", "period from 1 second"),
        ("1" + "0" * 5000 + "/s", "from 1 to"),
        ("10/" + "9" * 5000 + "s", "period from 1 second"),
        ("\u0661\u0660/s", "is not of the form"),  # Arabic-Indic digits: int() takes them
        ([], "at least one rate"),
    ],
)
def test_rate_limit__a_bad_rate_is_refused_naming_it(rate: object, problem: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match=problem):
        rate_limit("rl:bad", rate)  # type: ignore[arg-type]


def test_rate_limit__a_cost_above_the_limit_is_refused() -> None:
    with pytest.raises(InvalidLockArgumentError, match=r"cost must be from 1 to the smallest "):
        rate_limit("rl:bad", ["10/s", "5/m"], cost=6)
    handle = rate_limit("rl:bad", "10/s")
    with pytest.raises(InvalidLockArgumentError, match="got 11"):
        handle.acquire(cost=11)


@pytest.mark.parametrize("value", [10, None, ["10/s", 3]])
def test_rate_limit__a_rate_of_the_wrong_type_is_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="rate must be a str"):
        rate_limit("rl:bad", value)  # type: ignore[arg-type]


def test_schedule_retry__spaces_the_retries_a_period_over_the_limit_apart(using: str) -> None:
    backend, rate = locks[using], Rate(5, 1.0)
    waits = [backend.schedule_retry("rl:retry", rate, 0.5) for _ in range(6)]
    assert 0.45 <= waits[0] <= 0.5
    gaps = [later - earlier for earlier, later in itertools.pairwise(waits)]
    assert all(0.15 <= gap <= 0.2 for gap in gaps), gaps
    # A slot further away than the queue of retries: the retry waits for the slot.
    assert 2.9 <= backend.schedule_retry("rl:retry", rate, 3.0) <= 3.0
    # Each rate limit, and each rate, spaces its own.
    assert backend.schedule_retry("rl:other", rate, 0.1) <= 0.1
    assert backend.schedule_retry("rl:retry", Rate(100, 60.0), 0.1) <= 0.1
