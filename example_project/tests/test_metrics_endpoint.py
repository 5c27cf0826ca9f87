"""The example project's ``/metrics``: a scrape shows the locks its views took and refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families
from shop import views

from django_redis_lock import lock
from django_redis_lock.contrib.prometheus import disable, enable

PAY = "view:shop.views.pay"


@pytest.fixture(autouse=True)
def _example_urls_and_metrics(redis_locks: dict[str, Any]) -> Iterator[None]:
    # The example's settings install the metrics app; the test suite's enable them here.
    enable()
    with override_settings(ROOT_URLCONF="example.urls", STATIC_URL="static/"):
        yield
    disable()


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics; return every sample, by name and labels."""
    response = Client().get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def sample(scraped: dict[Any, float], name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def acquisitions(scraped: dict[Any, float], outcome: str) -> float:
    return sample(
        scraped,
        "django_redis_lock_acquisitions_total",
        alias="default",
        family=PAY,
        outcome=outcome,
    )


def test_metrics__a_scrape_shows_a_payment_taken_and_one_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = scrape()
    started, finish = threading.Event(), threading.Event()

    def charge(order_id: int) -> str:
        started.set()
        assert finish.wait(10)
        return "payment-1"

    monkeypatch.setattr(views, "charge", charge)
    first = threading.Thread(target=lambda: Client().post("/orders/7/pay/"))
    first.start()
    assert started.wait(10)
    during = scrape()
    assert Client().post("/orders/7/pay/").status_code == 409
    finish.set()
    first.join(10)
    after = scrape()

    assert sample(during, "django_redis_lock_holds", alias="default", family=PAY) == 1
    assert sample(after, "django_redis_lock_holds", alias="default", family=PAY) == 0
    assert acquisitions(after, "acquired") == acquisitions(before, "acquired") + 1
    assert acquisitions(after, "refused") == acquisitions(before, "refused") + 1
    held = "django_redis_lock_hold_seconds_count"
    assert sample(after, held, alias="default", family=PAY) == (
        sample(before, held, alias="default", family=PAY) + 1
    )
    assert not any("order_id" in str(labels) for _, labels in after)


def test_metrics__a_scrape_shows_a_timeout() -> None:
    before = scrape()
    with lock("reports:daily", owner="the-nightly-run"):
        assert not lock("reports:daily", timeout=0.1).acquire()
    after = scrape()
    labels = {"alias": "default", "family": "reports", "outcome": "timeout"}
    name = "django_redis_lock_acquisitions_total"
    assert sample(after, name, **labels) == sample(before, name, **labels) + 1
