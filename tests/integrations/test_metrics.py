"""Prometheus metrics (``django_redis_lock.contrib.prometheus``), on a real redis-server.

Each test names its locks in a family of its own, so the counts it reads start at zero.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator

import pytest
from django.test import override_settings
from prometheus_client import REGISTRY, generate_latest

from django_redis_lock import LockLostError, LockNotOwnedError, lock, locks, rate_limit
from django_redis_lock._core.observe import LossReason, observers
from django_redis_lock.contrib.prometheus import LockMetrics, disable, enable
from django_redis_lock.contrib.prometheus.families import default_family, family_of
from tests.support.helpers import eventually, python_without_settings


@pytest.fixture
def metrics() -> Iterator[LockMetrics]:
    observer = enable()
    yield observer
    disable()


@pytest.fixture
def family() -> str:
    """A family of this test alone."""
    return f"f{secrets.token_hex(4)}"


def value(metric: str, **labels: str) -> float:
    """Return a sample's value in the default registry (0 when it was never set)."""
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def acquisitions(using: str, family: str, outcome: str) -> float:
    return value(
        "django_redis_lock_acquisitions_total", alias=using, family=family, outcome=outcome
    )


def test_acquire__counts_the_acquisition_its_wait_and_its_hold(
    metrics: LockMetrics, using: str, family: str
) -> None:
    holds = {"alias": using, "family": family}
    with lock(f"{family}:order:17", using=using):
        assert acquisitions(using, family, "acquired") == 1
        assert value("django_redis_lock_wait_seconds_count", **holds) == 1
        assert value("django_redis_lock_holds", **holds) == 1
        assert value("django_redis_lock_hold_seconds_count", **holds) == 0
    assert value("django_redis_lock_hold_seconds_count", **holds) == 1
    assert value("django_redis_lock_holds", **holds) == 0
    assert acquisitions(using, family, "timeout") == acquisitions(using, family, "refused") == 0


def test_acquire__reentrant_holds_count_once_as_a_hold(
    metrics: LockMetrics, using: str, family: str
) -> None:
    handle = lock(f"{family}:x", using=using)
    with handle, handle:
        assert value("django_redis_lock_holds", alias=using, family=family) == 1
        assert acquisitions(using, family, "acquired") == 2
    assert value("django_redis_lock_hold_seconds_count", alias=using, family=family) == 1


def test_acquire__timeout_is_counted_as_timeout(
    metrics: LockMetrics, using: str, family: str
) -> None:
    name = f"{family}:report"
    with lock(name, using=using, owner="someone-else"):
        assert not lock(name, using=using, timeout=0.2).acquire()
    assert acquisitions(using, family, "timeout") == 1
    assert acquisitions(using, family, "refused") == 0
    assert value("django_redis_lock_waiters", alias=using, family=family) == 0


def test_acquire__non_blocking_refusal_is_counted_as_refused(
    metrics: LockMetrics, using: str, family: str
) -> None:
    name = f"{family}:report"
    with lock(name, using=using, owner="someone-else"):
        assert not lock(name, using=using, blocking=False).acquire()
    assert acquisitions(using, family, "refused") == 1
    assert acquisitions(using, family, "timeout") == 0
    assert value("django_redis_lock_handoffs_total", alias=using, family=family) == 0


def test_release__hands_the_lock_to_a_waiting_thread_and_counts_a_handoff(
    metrics: LockMetrics, using: str, family: str
) -> None:
    name = f"{family}:sync"
    waiters = {"alias": using, "family": family}
    holder = lock(name, using=using)
    holder.acquire()
    got: list[bool] = []
    waiter = threading.Thread(
        target=lambda: got.append(lock(name, using=using).acquire(timeout=20))
    )
    waiter.start()
    try:
        eventually(lambda: value("django_redis_lock_waiters", **waiters) == 1)
        assert value("django_redis_lock_handoffs_total", **waiters) == 0
    finally:
        holder.release()
        waiter.join(30)
    assert got == [True]
    assert value("django_redis_lock_handoffs_total", **waiters) == 1
    assert value("django_redis_lock_waiters", **waiters) == 0
    assert value("django_redis_lock_holds", **waiters) == 1  # the waiter thread never released
    assert acquisitions(using, family, "acquired") == 2
    locks[using].force_release(name)


def test_lost__a_lease_that_ends_unrenewed_is_counted_at_release(
    metrics: LockMetrics, using: str, family: str
) -> None:
    handle = lock(f"{family}:short", using=using, ttl=0.1, auto_renew=False)
    assert handle.acquire()
    eventually(lambda: not handle.locked())
    with pytest.raises(LockNotOwnedError):
        handle.release()
    assert value("django_redis_lock_lost_leases_total", alias=using, family=family, reason="ended")
    assert value("django_redis_lock_hold_seconds_count", alias=using, family=family) == 0


def test_lost__force_release_while_renewed_is_counted_by_the_renewal_thread(
    metrics: LockMetrics, using: str, family: str
) -> None:
    name = f"{family}:renewed"
    lost = {"alias": using, "family": family, "reason": "renewal_refused"}
    with pytest.raises(LockLostError), lock(name, using=using, ttl=0.3):
        locks[using].force_release(name)
        eventually(lambda: value("django_redis_lock_lost_leases_total", **lost) == 1)
    assert value("django_redis_lock_lost_leases_total", **lost) == 1


def test_renewal__round_trips_and_their_latency_are_counted(
    metrics: LockMetrics, using: str, family: str
) -> None:
    ok = {"alias": using, "outcome": "ok"}
    trips = value("django_redis_lock_renewals_total", **ok)
    timed = value("django_redis_lock_renewal_seconds_count", alias=using)
    renewed = value("django_redis_lock_renewed_leases_total", alias=using)
    # Renewed every 0.5 s: a loaded machine that holds the renewal thread back for a few
    # tenths of a second does not cost the lease (as it would a 0.3 s one).
    with lock(f"{family}:long", using=using, ttl=1.5):
        eventually(lambda: value("django_redis_lock_renewals_total", **ok) >= trips + 2)
    assert value("django_redis_lock_renewal_seconds_count", alias=using) >= timed + 2
    assert value("django_redis_lock_renewed_leases_total", alias=using) >= renewed + 2
    assert value("django_redis_lock_renewals_total", alias=using, outcome="error") == 0


def test_labels__never_carry_the_raw_name(metrics: LockMetrics, family: str) -> None:
    secret = secrets.token_hex(8)
    names = [f"{family}:{secret}", f"celery:shop.tasks.bill:{secret}", f"{family}{secret}"]
    for name in names:
        with lock(name, ttl=0.3):
            assert not lock(name, blocking=False, owner="another").acquire()
            scraped = generate_latest(REGISTRY).decode()
            assert "django_redis_lock_holds" in scraped
            assert secret not in scraped
    assert secret not in generate_latest(REGISTRY).decode()
    assert acquisitions("default", family, "acquired") == 1
    assert acquisitions("default", "celery:shop.tasks.bill", "acquired") >= 1
    assert acquisitions("default", "-", "refused") >= 1


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("reports:daily", "reports"),
        ("reports", "-"),
        ("celery:shop.tasks.bill:42", "celery:shop.tasks.bill"),
        ("celery:shop.tasks.bill:sha256:ab12", "celery:shop.tasks.bill"),
        ("celery:shop.tasks.nightly", "celery:shop.tasks.nightly"),
        ("celery-queued:3f2a", "celery-queued"),
        ("task:shop.tasks.bill:42", "task:shop.tasks.bill"),
        ("tasks:x:y", "tasks"),
        ("view:shop.views.pay:order_id=42", "view:shop.views.pay"),
        ("views:x:y", "views"),
        (":x", ""),
    ],
)
def test_default_family__is_the_text_before_the_first_colon(name: str, family: str) -> None:
    assert default_family(name) == family


def by_last_part(name: str) -> str:
    return name.rpartition(":")[2][:3]


def test_family_setting__a_dotted_path_replaces_the_rule(metrics: LockMetrics) -> None:
    with override_settings(LOCKS_METRICS_FAMILY=f"{__name__}.by_last_part"):
        assert family_of("a:b:xyz123") == "xyz"
        with lock("a:b:qqq123"):
            pass
        assert acquisitions("default", "qqq", "acquired") >= 1
    assert family_of("a:b:xyz123") == "a"


def test_lost__a_thread_that_ended_holding_it_is_counted_as_owner_ended(
    metrics: LockMetrics, using: str, family: str
) -> None:
    lost = {"alias": using, "family": family, "reason": "owner_ended"}

    def take_and_end() -> None:
        assert lock(f"{family}:orphan", using=using, ttl=0.3, auto_renew=True).acquire()

    thread = threading.Thread(target=take_and_end)
    thread.start()
    thread.join()
    eventually(lambda: value("django_redis_lock_lost_leases_total", **lost) == 1)


def test_loss_reasons__each_has_a_label_of_its_own() -> None:
    labels = [reason.value for reason in LossReason]
    assert len(set(labels)) == len(labels)
    assert all(label.isidentifier() and label.islower() for label in labels)


def test_app__installing_it_enables_the_metrics() -> None:
    from django.conf import settings

    disable()
    assert not observers
    apps = [*settings.INSTALLED_APPS, "django_redis_lock.contrib.prometheus"]
    with override_settings(INSTALLED_APPS=apps):
        assert len(observers) == 1
        assert isinstance(observers[0], LockMetrics)
    disable()


def test_without_the_app__taking_a_lock_imports_no_prometheus_client() -> None:
    done = python_without_settings(
        "import os, sys\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings'\n"
        "import django; django.setup()\n"
        "from django_redis_lock import lock\n"
        "from django_redis_lock._core.observe import observers\n"
        "with lock('reports:daily', using='locmem'):\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('prometheus')), observers)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] []"


def test_rate_limit__counts_admitted_and_refused_hits_by_family(
    metrics: LockMetrics, using: str, family: str
) -> None:
    secret = secrets.token_hex(8)
    handle = rate_limit(f"{family}:{secret}", "2/5s", using=using, blocking=False)
    assert [handle.acquire() for _ in range(3)] == [True, True, False]

    def hits(outcome: str) -> float:
        return value(
            "django_redis_lock_rate_limit_hits_total", alias=using, family=family, outcome=outcome
        )

    assert (hits("admitted"), hits("refused")) == (2, 1)
    assert not rate_limit(f"{family}:{secret}", "2/5s", using=using, timeout=0.1).acquire()
    assert hits("refused") == 2
    assert secret not in generate_latest(REGISTRY).decode()
