"""The shop's locked views, with a real Redis: a second payment of one order is refused."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client, override_settings
from shop import views

from django_redis_lock import locks


@pytest.fixture(autouse=True)
def _shop_urls(redis_locks: dict[str, Any]) -> Iterator[None]:
    # The test suite's settings, with the example's URLs and a throw-away Redis for LOCKS.
    with override_settings(ROOT_URLCONF="example.urls", STATIC_URL="static/"):
        yield


class Gate:
    """Stand-in for slow work: tells when it started, and ends when the test says so."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls: list[Any] = []

    def __call__(self, arg: Any) -> Any:
        self.calls.append(arg)
        self.started.set()
        assert self.release.wait(10), "the test never let the work finish"
        return self.result


def in_background(request: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Send ``request`` from another thread; its response lands in the returned list."""
    responses: list[Any] = []
    thread = threading.Thread(target=lambda: responses.append(request()))
    thread.start()
    return thread, responses


def test_pay__two_concurrent_posts_for_one_order__one_200_one_409(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate("payment-1")
    monkeypatch.setattr(views, "charge", gate)
    thread, first = in_background(lambda: Client().post("/orders/42/pay/"))
    assert gate.started.wait(10)

    second = Client().post("/orders/42/pay/")
    gate.release.set()
    thread.join(10)

    assert first[0].status_code == 200
    assert first[0].content == b"Order 42 paid: payment-1.\n"
    assert second.status_code == 409
    assert 1 <= int(second["Retry-After"]) <= 10  # the rest of the 10 s lease, rounded up
    assert gate.calls == [42], "the customer was charged once"
    assert not locks["default"].locked("view:shop.views.pay:order_id=42")


def test_pay__a_json_client_gets_the_conflict_in_json(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate("payment-1")
    monkeypatch.setattr(views, "charge", gate)
    thread, _ = in_background(lambda: Client().post("/orders/42/pay/"))
    assert gate.started.wait(10)

    second = Client().post("/orders/42/pay/", HTTP_ACCEPT="application/json")
    gate.release.set()
    thread.join(10)

    assert second.status_code == 409
    assert second.json() == {
        "error": "locked",
        "detail": "This request is already being processed. Try again later.",
        "retry_after": int(second["Retry-After"]),
    }


def test_pay__other_orders_and_gets_are_not_held_up(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate("payment-1")
    monkeypatch.setattr(views, "charge", gate)
    thread, first = in_background(lambda: Client().post("/orders/42/pay/"))
    assert gate.started.wait(10)

    monkeypatch.setattr(views, "charge", lambda order_id: f"payment-{order_id}")
    other = Client().post("/orders/7/pay/")
    form = Client().get("/orders/42/pay/")
    gate.release.set()
    thread.join(10)

    assert other.status_code == 200
    assert form.status_code == 200
    assert b'<form method="post">' in form.content
    assert first[0].status_code == 200


def test_pay__one_after_the_other_both_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "charge", lambda order_id: "payment")
    client = Client()

    assert client.post("/orders/42/pay/").status_code == 200
    assert client.post("/orders/42/pay/").status_code == 200


def test_catalog_import__a_second_import_is_told_who_runs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate(1000)
    monkeypatch.setattr(views, "import_catalog", gate)
    thread, first = in_background(lambda: Client().post("/catalogs/acme/import/"))
    assert gate.started.wait(10)

    second = Client().post("/catalogs/acme/import/")
    monkeypatch.setattr(views, "import_catalog", lambda supplier: 500)
    other = Client().post("/catalogs/globex/import/")  # another supplier: its own lock
    gate.release.set()
    thread.join(10)

    assert first[0].status_code == 200
    assert first[0].content == b"Imported 1000 rows from acme.\n"
    assert other.status_code == 200
    assert second.status_code == 409
    assert second["Retry-After"] == "5"
    body = second.json()
    assert body["error"] == "import running"
    assert body["started_by"] is None  # an anonymous request
    assert body["running_for"] >= 0
    assert other.content == b"Imported 500 rows from globex.\n"
    assert gate.calls == ["acme"]
