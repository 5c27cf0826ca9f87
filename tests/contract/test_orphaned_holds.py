"""Renewal never outlives its holder, and ``max_hold`` may be an alias's default.

A thread that ends holding a renewed lock (it raised before its release, say) can never
release it: the renewal thread releases it instead, at once, and reports the hold lost. A
holder that lives but is stuck is bounded by ``max_hold``, which OPTIONS may set for every
lock of an alias.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_redis_lock import LockLostError, lock, locks
from django_redis_lock._core.holds import held
from django_redis_lock._core.owner import current_owner
from django_redis_lock._core.renewal import renewer
from django_redis_lock.backends.base import BaseLockBackend
from django_redis_lock.signals import lock_lost
from tests.support.helpers import eventually


@pytest.fixture
def lost_signals() -> Iterator[list[dict[str, Any]]]:
    """Collect the ``lock_lost`` signals sent during the test."""
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_lost.connect(receiver)
    try:
        yield received
    finally:
        lock_lost.disconnect(receiver)


def with_alias_option(using: str, **options: Any) -> override_settings:
    """Return LOCKS as it is, with ``options`` added to the OPTIONS of ``using``."""
    setting = copy.deepcopy(settings.LOCKS)
    setting[using]["OPTIONS"].update(options)
    return override_settings(LOCKS=setting)


def test_renewal__a_thread_that_ends_holding_the_lock_loses_it_and_frees_it(
    using: str,
    backend: BaseLockBackend,
    lost_signals: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ttl = 0.5
    lost_calls: list[Any] = []
    handle = lock(
        "orphan:thread", ttl=ttl, using=using, auto_renew=True, on_lost=lost_calls.append
    )
    taken: list[str] = []
    baseline = len(renewer)

    def take_twice_and_end() -> None:
        # Reentrant holds, none released: the thread ends as one that raised would.
        if handle.acquire() and handle.acquire():
            taken.append(current_owner())

    with caplog.at_level(logging.WARNING, "django_redis_lock"):
        thread = threading.Thread(target=take_twice_and_end)
        thread.start()
        thread.join()
        assert taken, "the thread did not acquire"
        other = lock("orphan:thread", ttl=ttl, using=using, blocking=False)
        eventually(other.acquire, timeout=ttl + 1)
        other.release()
        eventually(lambda: bool(lost_calls), timeout=2)
    assert lost_calls == [handle]
    assert [signal["owner"] for signal in lost_signals] == taken
    assert "the thread holding it ended without releasing it" in lost_signals[0]["reason"]
    assert "Released it on the server" in caplog.text
    assert f"Lock {handle.name!r} was lost by owner {taken[0]}" in caplog.text
    assert len(renewer) == baseline, "the orphaned lease must leave the renewal registry"
    assert (backend, handle.name, taken[0]) not in held, "nobody is left to release it"
    assert taken[0] not in handle._lost, "nor to ask about it: no record kept per ended thread"


def test_renewal__a_token_of_ones_own_outlives_the_thread_that_took_it(using: str) -> None:
    handle = lock("orphan:owner", ttl=0.3, using=using, auto_renew=True, owner="job-17")
    thread = threading.Thread(target=handle.acquire)
    thread.start()
    thread.join()
    seen = {"left": handle.ttl() or 0.0, "renewals": 0}

    def renewed_twice() -> bool:
        left = handle.ttl()
        assert left is not None, "the lease of a live owner token ended"
        if left > seen["left"]:
            seen["renewals"] += 1
        seen["left"] = left
        return seen["renewals"] >= 2

    try:
        eventually(renewed_twice, timeout=3)
    finally:
        handle.release()
    assert not handle.lost


def test_max_hold_option__bounds_renewal_of_every_lock_of_the_alias(using: str) -> None:
    with with_alias_option(using, max_hold=0.3):
        assert locks[using].default_max_hold == 0.3
        handle = lock("orphan:max-hold-option", ttl=0.2, using=using)
        with pytest.raises(LockLostError, match="max_hold"):
            with handle:
                eventually(lambda: handle.lost, timeout=5)
        assert not handle.locked()


def test_max_hold_option__a_lock_that_passes_max_hold_overrides_it(using: str) -> None:
    with with_alias_option(using, max_hold=0.2):
        handle = lock("orphan:max-hold-own", ttl=0.2, max_hold=60, using=using)
        with handle:
            assert handle._max_hold_on(locks[using]) == 60
        assert not handle.lost


def test_max_hold_option__none_means_no_bound(using: str) -> None:
    with with_alias_option(using, max_hold=None):
        assert locks[using].default_max_hold is None
