"""``@rate_limit_view`` and ``RateLimitMixin``: N requests per period per key, on a real
redis-server.

The key kinds are tested as a matrix: every kind of key, by sync and async views, by the
decorator and the mixin. Each cell sends two requests of one key (both pass), a third (429,
with ``Retry-After``), and one of another key (it passes: keys do not share a limit).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import AsyncClient, Client, RequestFactory, override_settings
from django.views import View

from django_redis_lock import InvalidLockArgumentError, LockArgumentTypeError, locks, rate_limit
from django_redis_lock.backends.base import Admission
from django_redis_lock.decorators import rate_limit_view
from django_redis_lock.mixins import RateLimitMixin

rf = RequestFactory()


class Session(SessionBase):
    """A session with a fixed key, kept nowhere: enough for the "session" key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)


def team_of(request: HttpRequest, *args: Any, **kwargs: Any) -> str:
    return request.GET.get("team", "")


#: Each key kind, and how to build a request of key "a" or "b": (request, view kwargs).
KINDS: dict[str, tuple[Any, Callable[[str], tuple[HttpRequest, dict[str, Any]]]]] = {
    "user": ("user", lambda k: (_with_user(rf.get("/x/"), k), {})),
    "ip": ("ip", lambda k: (rf.get("/x/", REMOTE_ADDR=f"10.0.0.{ord(k)}"), {})),
    "ip behind a trusted proxy": (
        "ip",
        lambda k: (
            rf.get("/x/", REMOTE_ADDR="192.168.0.1", HTTP_X_FORWARDED_FOR=f"6.6.6.{ord(k)}"),
            {},
        ),
    ),
    "path": ("path", lambda k: (rf.get(f"/x/{k}/"), {})),
    "session": ("session", lambda k: (_with_session(rf.get("/x/"), k), {})),
    "url argument": ("url:slot", lambda k: (rf.get("/x/"), {"slot": k})),
    "header": ("header:X-Api-Key", lambda k: (rf.get("/x/", HTTP_X_API_KEY=k), {})),
    "post field": ("post:email", lambda k: (rf.post("/x/", {"email": f"{k}@example.com"}), {})),
    "callable": (team_of, lambda k: (rf.get("/x/", {"team": k}), {})),
}


def _with_user(request: HttpRequest, key: str) -> HttpRequest:
    request.user = User(pk=ord(key), username=key)
    return request


def _with_session(request: HttpRequest, key: str) -> HttpRequest:
    request.session = Session(f"session{key * 8}")
    return request


def limited_view(key: Any, rate: Any, *, asynchronous: bool, mixin: bool, **options: Any) -> Any:
    """Return a view limited to ``rate`` per ``key``: a function or a class, sync or async."""
    if mixin:
        attributes = {f"rate_limit_{option}": value for option, value in options.items()}
        # A function as a class attribute would become a method: a key callable is static.
        static_key = staticmethod(key) if callable(key) else key
        attributes |= {"rate_limit_key": static_key, "rate_limit_rate": rate}

        if asynchronous:

            async def get(self: View, request: HttpRequest, **kwargs: Any) -> HttpResponse:
                return HttpResponse("ok")

        else:

            def get(self: View, request: HttpRequest, **kwargs: Any) -> HttpResponse:  # type: ignore[misc]
                return HttpResponse("ok")

        attributes |= {"get": get, "post": get}
        return type("Limited", (RateLimitMixin, View), attributes).as_view()
    if asynchronous:

        @rate_limit_view(key, rate, **options)
        async def aview(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            return HttpResponse("ok")

        return aview

    @rate_limit_view(key, rate, **options)
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        return HttpResponse("ok")

    return view


def call(view: Any, request: HttpRequest, kwargs: dict[str, Any]) -> HttpResponseBase:
    response = view(request, **kwargs)
    if asyncio.iscoroutine(response):
        response = asyncio.run(response)
    return response  # type: ignore[no-any-return]


@override_settings(LOCKS_TRUSTED_PROXIES=["192.168.0.0/16"])
@pytest.mark.parametrize("face", ["decorator", "mixin"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_rate_limit_view__n_per_key_then_429(kind: str, asynchronous: bool, face: str) -> None:
    key, build = KINDS[kind]
    view = limited_view(
        key, "2/5s", asynchronous=asynchronous, mixin=face == "mixin", name=f"m:{kind}"
    )
    statuses = [call(view, *build("a")).status_code for _ in range(2)]
    refused = call(view, *build("a"))
    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert refused["Retry-After"] == "5"
    assert call(view, *build("b")).status_code == 200


def test_rate_limit_view__a_slot_frees_when_the_period_has_passed() -> None:
    view = limited_view("path", "1/s", asynchronous=False, mixin=False, name="again")
    assert call(view, rf.get("/p/"), {}).status_code == 200
    refused = call(view, rf.get("/p/"), {})
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    threading.Event().wait(1.05)
    assert call(view, rf.get("/p/"), {}).status_code == 200


def test_rate_limit_view__every_rate_of_a_list_and_cost() -> None:
    view = limited_view("path", ["4/5s", "10/m"], asynchronous=False, mixin=False, cost=2)
    assert [call(view, rf.get("/p/"), {}).status_code for _ in range(3)] == [200, 200, 429]
    infos = sorted(locks["default"].iter_rate_limits("view:*"), key=lambda i: i.rate.period)
    assert [(str(info.rate), info.used) for info in infos] == [("4/5s", 4), ("10/m", 4)]


def test_rate_limit_view__every_method_by_default_or_the_ones_named() -> None:
    every = limited_view("path", "1/5s", asynchronous=False, mixin=False, name="every")
    assert call(every, rf.get("/p/"), {}).status_code == 200
    assert call(every, rf.post("/p/"), {}).status_code == 429
    posts = limited_view("path", "1/5s", asynchronous=False, mixin=True, methods=["post"])
    assert [call(posts, rf.post("/p/"), {}).status_code for _ in range(2)] == [200, 429]
    assert call(posts, rf.get("/p/"), {}).status_code == 200


def test_rate_limit_view__timeout_waits_for_a_slot() -> None:
    view = limited_view("path", "1/s", asynchronous=True, mixin=False, timeout=2)
    assert call(view, rf.get("/p/"), {}).status_code == 200
    assert call(view, rf.get("/p/"), {}).status_code == 200  # after about a second


def test_rate_limit_view__json_clients_get_json() -> None:
    view = limited_view("path", "1/5s", asynchronous=False, mixin=False)
    call(view, rf.get("/p/"), {})
    response = call(view, rf.get("/p/", HTTP_ACCEPT="application/json"), {})
    assert response.status_code == 429
    assert json.loads(response.content) == {
        "error": "rate_limited",
        "detail": "Too many requests. Try again later.",
        "retry_after": 5,
    }


def test_rate_limit_view__an_answer_of_your_own() -> None:
    seen: list[Admission] = []

    def busy(request: HttpRequest, admission: Admission) -> HttpResponse:
        seen.append(admission)
        return HttpResponse("slow down", status=503)

    view = limited_view("path", "1/5s", asynchronous=False, mixin=False, on_limit=busy)
    call(view, rf.get("/p/"), {})
    assert call(view, rf.get("/p/"), {}).content == b"slow down"
    assert 4 <= seen[0].retry_after <= 5.01

    class Mine(RateLimitMixin, View):
        rate_limit_key = "path"
        rate_limit_rate = "1/5s"

        def handle_rate_limited(self, admission: Admission) -> HttpResponseBase:
            return HttpResponse(f"wait {admission.retry_after > 4}", status=429)

        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    mine = Mine.as_view()
    call(mine, rf.get("/q/"), {})
    assert call(mine, rf.get("/q/"), {}).content == b"wait True"


def test_rate_limit_view__shares_the_limit_with_rate_limit_by_name() -> None:
    view = limited_view("path", "2/5s", asynchronous=False, mixin=False, name="shared")
    assert rate_limit("view:shared:path=/p/", "2/5s").acquire(blocking=False)
    assert [call(view, rf.get("/p/"), {}).status_code for _ in range(2)] == [200, 429]


def test_rate_limit_view__concurrent_clients_get_at_most_n() -> None:
    view = limited_view("path", "5/5s", asynchronous=False, mixin=False, name="crowd")
    statuses: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(5):
            status = call(view, rf.get("/p/"), {}).status_code
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(statuses) == [200] * 5 + [429] * 35


@override_settings(ROOT_URLCONF="tests.support.view_urls")
def test_rate_limit_view__through_the_test_client() -> None:
    client = Client()
    assert [client.get("/limited/").status_code for _ in range(3)] == [200, 200, 429]


@override_settings(ROOT_URLCONF="tests.support.view_urls")
async def test_rate_limit_view__through_the_async_client() -> None:
    client = AsyncClient()
    statuses = [(await client.get("/alimited/")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rate": "0/s"}, InvalidLockArgumentError, "must admit from 1"),
        ({"rate": "5/fortnight"}, InvalidLockArgumentError, "unknown unit"),
        ({"rate": 5}, LockArgumentTypeError, "rate must be a str"),
        ({"rate": "5/s", "cost": 6}, InvalidLockArgumentError, "cost must be from 1"),
        ({"rate": "5/s", "status": 409}, InvalidLockArgumentError, "status must be 429 or 503"),
        ({"rate": "5/s", "key": "nonsense"}, InvalidLockArgumentError, "is not a lock key"),
        ({"rate": "5/s", "methods": "POST"}, LockArgumentTypeError, "methods must be None"),
        ({"rate": "5/s", "timeout": -1}, InvalidLockArgumentError, "timeout"),
    ],
)
@pytest.mark.parametrize("face", ["decorator", "mixin"])
def test_rate_limit_view__bad_options_fail_when_the_view_is_defined(
    options: dict[str, Any], error: type[Exception], message: str, face: str
) -> None:
    options = dict(options)
    key, rate = options.pop("key", "path"), options.pop("rate")
    with pytest.raises(error, match=message) as raised:
        limited_view(key, rate, asynchronous=False, mixin=face == "mixin", **options)
    where = "RateLimitMixin on" if face == "mixin" else "rate_limit_view on"
    assert where in str(raised.value)


@pytest.mark.django_db(transaction=True)
@override_settings(ROOT_URLCONF="tests.support.view_urls")
async def test_rate_limit_view__async_keyed_by_a_logged_in_user_loads_it_without_blocking() -> (
    None
):
    user = await sync_to_async(User.objects.create_user)("alice")
    client = AsyncClient()
    await client.aforce_login(user)
    statuses = [(await client.post("/auser-limited/")).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    other = AsyncClient()  # an anonymous visitor is keyed by a session of their own
    assert (await other.post("/auser-limited/")).status_code == 200
