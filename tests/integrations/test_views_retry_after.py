"""``Retry-After`` of a locked view's conflict: the holder's lease left, or the view's value."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import AsyncRequestFactory, RequestFactory, override_settings
from django.views import View

from django_redis_lock import InvalidLockArgumentError, lock
from django_redis_lock.backends.base import LockInfo
from django_redis_lock.decorators import lock_view
from django_redis_lock.mixins import LockMixin
from tests.integrations.test_views import LOCMEM_TEMPLATES

rf = RequestFactory()
arf = AsyncRequestFactory()


def ok_view(**options: Any) -> Any:
    @lock_view("path", name="ra", **options)
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    return view


def async_ok_view(**options: Any) -> Any:
    @lock_view("path", name="ra", **options)
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    return view


# The default: the holder's lease left --------------------------------------------------------


def test_default__the_holders_lease_left_not_the_views_lease(using: str) -> None:
    # The view's own lease is 30 s; the holder's has 2.5 s left: the client may retry in 3.
    view = ok_view(ttl=30, using=using)
    with lock("view:ra:path=/x/", ttl=2.5, using=using, auto_renew=False):
        response = view(rf.post("/x/"))
    assert response.status_code == 409
    assert response["Retry-After"] == "3"


# The view's own value --------------------------------------------------------------------------


def test_a_number__is_sent_whatever_the_lease_left(using: str) -> None:
    view = ok_view(retry_after=2, using=using)
    with lock("view:ra:path=/x/", ttl=30, using=using):
        text = view(rf.post("/x/"))
        as_json = view(rf.post("/x/", HTTP_ACCEPT="application/json"))
    assert text.status_code == as_json.status_code == 409
    assert text["Retry-After"] == as_json["Retry-After"] == "2"
    assert json.loads(as_json.content)["retry_after"] == 2


def test_a_callable__gets_the_request_and_holders_and_is_rounded_up() -> None:
    calls: list[tuple[HttpRequest, list[LockInfo]]] = []

    def expected_wait(request: HttpRequest, holders: list[LockInfo]) -> float:
        calls.append((request, holders))
        return 1.2

    view = ok_view(retry_after=expected_wait)
    request = rf.post("/x/")
    with lock("view:ra:path=/x/", ttl=30, metadata={"job": 1}):
        response = view(request)
    assert response["Retry-After"] == "2"
    [(got, holders)] = calls
    assert got is request
    assert [(h.name, h.metadata) for h in holders] == [("view:ra:path=/x/", {"job": 1})]


@pytest.mark.parametrize("value", [0, 0.0, -3])
def test_a_callable__is_sent_as_at_least_one_second(value: float) -> None:
    view = ok_view(retry_after=lambda request, holders: value)
    with lock("view:ra:path=/x/", ttl=30):
        assert view(rf.post("/x/"))["Retry-After"] == "1"


async def test_an_async_view__sends_the_views_value() -> None:
    view = async_ok_view(retry_after=lambda request, holders: 4)
    holder = lock("view:ra:path=/x/", ttl=30)
    with holder:
        response = await view(arf.post("/x/"))
    assert response.status_code == 409
    assert response["Retry-After"] == "4"


@override_settings(TEMPLATES=LOCMEM_TEMPLATES)
def test_a_template__gets_the_views_value() -> None:
    view = ok_view(retry_after=2, template_name="busy.html")
    with lock("view:ra:path=/x/", ttl=30):
        response = view(rf.post("/x/"))
    assert response["Retry-After"] == "2"
    assert response.content.decode().startswith("busy 409 retry=2 ")


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True, [2]])
def test_a_bad_value__fails_when_the_view_is_defined(value: Any) -> None:
    with pytest.raises(InvalidLockArgumentError, match=r"retry_after must be a whole number"):
        ok_view(retry_after=value)


# LockMixin -------------------------------------------------------------------------------------


class Fixed(LockMixin, View):
    lock_key = "path"
    lock_name = "ra"
    lock_retry_after = 2

    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("post")


class Computed(Fixed):
    def get_lock_retry_after(self, holders: list[LockInfo]) -> float | None:
        assert [h.name for h in holders] == ["view:ra:path=/x/"]
        return 4.5 if self.request.headers.get("X-Slow") else None


def test_mixin__lock_retry_after_is_sent() -> None:
    with lock("view:ra:path=/x/", ttl=30):
        response = Fixed.as_view()(rf.post("/x/"))
    assert response.status_code == 409
    assert response["Retry-After"] == "2"


def test_mixin__get_lock_retry_after_per_request_none_is_the_lease_left() -> None:
    with lock("view:ra:path=/x/", ttl=7):
        slow = Computed.as_view()(rf.post("/x/", HTTP_X_SLOW="1"))
        default = Computed.as_view()(rf.post("/x/"))
    assert slow["Retry-After"] == "5"
    assert default["Retry-After"] == "7"


def test_mixin__a_bad_lock_retry_after_fails_when_the_class_is_defined() -> None:
    with pytest.raises(InvalidLockArgumentError, match=r"LockMixin on .*Bad: retry_after must be"):

        class Bad(Fixed):
            lock_retry_after = 0
