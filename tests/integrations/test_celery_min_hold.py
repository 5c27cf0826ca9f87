"""``@single_instance(min_hold=...)`` on a real worker: at most one run per window.

A run whose body takes 0.1 s keeps its lock for 3 s from its start: a duplicate sent at 1 s
is refused (by ``on_conflict`` when it starts, or when sent with ``enqueue``), one sent at
3.5 s runs. A run killed inside its window keeps the window, and no more.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_lock import InvalidLockArgumentError, locks
from django_redis_lock.listing import describe_holder
from tests.support import celery_harness

pytestmark = pytest.mark.slow

WINDOW = 3.0


@pytest.fixture
def w(celery_pair: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The package's real worker (prefork, two children), with nothing left from earlier."""
    with celery_harness.fresh(celery_pair) as worker:
        yield worker


def sleep_until(started_ns: int, seconds: float) -> None:
    """Sleep until ``seconds`` after the monotonic time ``started_ns`` a run recorded."""
    time.sleep(max(0.0, started_ns / 1e9 + seconds - time.monotonic()))


def starts(w: dict[str, Any]) -> list[Any]:
    return [e["run"] for e in celery_harness.events(w["client"], w["prefix"], "start")]


def test_on_conflict__a_duplicate_in_the_window_is_skipped_one_after_it_runs(
    w: dict[str, Any],
) -> None:
    task = w["app"].once_per_window
    assert task.delay(0).get(timeout=30) == 0
    [start] = celery_harness.events(w["client"], w["prefix"], "start")
    sleep_until(start["at"], 1.0)
    [holder] = locks["default"].lock_info(f"celery:{task.name}")
    assert holder.min_hold_of is not None
    assert "by min_hold" in describe_holder(holder)
    assert task.delay(1).get(timeout=30) is None, "skipped: the window lasts 3 s"
    sleep_until(start["at"], WINDOW + 0.5)
    assert task.delay(2).get(timeout=30) == 2
    assert starts(w) == [0, 2]


def test_enqueue__a_duplicate_in_the_window_is_not_sent(w: dict[str, Any]) -> None:
    task = w["app"].sync_per_window
    first = task.delay(1, 0)
    assert first.get(timeout=30) == 0
    [start] = celery_harness.events(w["client"], w["prefix"], "start")
    sleep_until(start["at"], 1.0)
    assert task.delay(1, 1).id == first.id, "refused when sent, inside the window"
    sleep_until(start["at"], WINDOW + 0.5)
    after = task.delay(1, 2)
    assert after.id != first.id
    assert after.get(timeout=30) == 2
    assert starts(w) == [0, 2]


def test_a_run_killed_in_its_window__keeps_the_window_and_no_more(w: dict[str, Any]) -> None:
    task = w["app"].killed_in_window  # ttl=60, min_hold=3
    task.delay(0)
    [start] = celery_harness.wait_for_events(w["client"], w["prefix"], "start", 1)
    sleep_until(start["at"], 0.3)
    os.kill(start["pid"], signal.SIGKILL)
    # The pool notices the death within a second or two; the main process then keeps the
    # window, not the 60 s lease, and not less than the window.
    kept_by_min_hold = False
    deadline = start["at"] / 1e9 + WINDOW + 5.0
    while holders := locks["default"].lock_info(f"celery:{task.name}"):
        kept_by_min_hold |= holders[0].min_hold_of is not None
        assert time.monotonic() < deadline, "still held long after the window"
        time.sleep(0.02)
    freed_after = time.monotonic() - start["at"] / 1e9
    assert freed_after >= WINDOW - 0.2, f"freed {freed_after:.2f}s after the start"
    assert kept_by_min_hold or freed_after > WINDOW, "freed within the window"


def test_min_hold_with_limit__refused_at_definition() -> None:

    from django_redis_lock.celery import single_instance

    with pytest.raises(InvalidLockArgumentError, match="min_hold"):
        single_instance(limit=2, min_hold=1)(lambda: None)
