"""``@lock_view`` and ``LockMixin``: one request at a time per key, on a real redis-server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import pytest
import redis as redis_py
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser, User
from django.contrib.sessions.backends.db import SessionStore
from django.core.checks import Error, run_checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.test import AsyncClient, AsyncRequestFactory, Client, RequestFactory, override_settings
from django.views import View

from django_redis_lock import InvalidLockArgumentError, LockArgumentTypeError, lock, locks
from django_redis_lock.backends.base import LockInfo
from django_redis_lock.checks import check_trusted_proxies
from django_redis_lock.decorators import lock_view
from django_redis_lock.mixins import LockMixin
from tests.support import view_urls
from tests.support.helpers import eventually, in_thread

rf = RequestFactory()
arf = AsyncRequestFactory()


# Helpers ---------------------------------------------------------------------------------------


class Gate:
    """A sync view body that says it is inside, then waits until the test lets it leave."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.leave = threading.Event()

    def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.entered.release()
        assert self.leave.wait(10)
        return HttpResponse("ok")

    def wait_inside(self) -> None:
        assert self.entered.acquire(timeout=10), "the view was never entered"

    def view(self, key: Any, **options: Any) -> Callable[..., HttpResponse]:
        """Return this gate as a function view under ``lock_view(key, **options)``."""

        @lock_view(key, **options)
        def gated(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            return self(request, *args, **kwargs)

        return gated


class Running:
    """Run ``view(request, ...)`` in another thread; ``result()`` joins and returns its answer."""

    def __init__(self, view: Callable[..., Any], request: HttpRequest, **kwargs: Any) -> None:
        self.response: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(view, request, kwargs))
        self.thread.start()

    def _run(self, view: Callable[..., Any], request: HttpRequest, kwargs: Any) -> None:
        try:
            self.response = view(request, **kwargs)
        except BaseException as exc:  # pragma: no cover - re-raised by result()
            self.error = exc

    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self) -> Any:
        self.thread.join(15)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.response


def held_names(using: str = "default") -> list[str]:
    return sorted(info.name for info in locks[using].iter_locks("view:*"))


def name_inside(key: Any, request: HttpRequest, using: str = "default", **kwargs: Any) -> str:
    """Return the name of the lock that ``request`` holds inside a view keyed by ``key``."""
    seen: list[str] = []

    @lock_view(key, name="k", using=using)
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponse:
        seen.extend(held_names(using))
        return HttpResponse("ok")

    assert view(request, **kwargs).status_code == 200
    [name] = seen
    assert held_names(using) == []
    return name


def post(path: str = "/x/", **extra: Any) -> HttpRequest:
    return rf.post(path, **extra)


def user_request(pk: int | None, **extra: Any) -> HttpRequest:
    request = post(**extra)
    request.user = AnonymousUser() if pk is None else User(pk=pk, username=f"u{pk}")
    return request


def ok_view(**options: Any) -> Callable[..., HttpResponse]:
    @lock_view(**options)
    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return HttpResponse("ok")

    return view


# Concurrency: threads ------------------------------------------------------------------------


def test_same_key__one_request_runs_the_other_gets_409_with_retry_after(using: str) -> None:
    gate = Gate()
    view = gate.view("path", name="same", ttl=7, using=using)
    first = Running(view, post("/same/"))
    gate.wait_inside()
    [holder] = locks[using].lock_info("view:same:path=/same/")
    assert holder.owner.startswith("request:")
    assert holder.metadata == {"method": "POST", "path": "/same/"}
    second = Running(view, post("/same/")).result()
    assert second.status_code == 409
    assert second["Retry-After"] == "7"
    assert second["Content-Type"].startswith("text/plain")
    assert b"already being processed" in second.content
    gate.leave.set()
    assert first.result().status_code == 200
    assert held_names(using) == []
    # Free again: the next request runs.
    assert view(post("/same/")).status_code == 200


def test_retry_after_is_the_holders_remaining_lease_rounded_up(using: str) -> None:
    view = ok_view(key="path", name="r", using=using)
    with lock("view:r:path=/x/", ttl=2.5, using=using):
        response = view(post())
    assert response.status_code == 409
    assert response["Retry-After"] == "3"


def test_retry_after_is_at_least_one(using: str) -> None:
    view = ok_view(key="path", name="r", using=using)
    with lock("view:r:path=/x/", ttl=0.2, using=using, auto_renew=False):
        response = view(post())
    assert response.status_code == 409
    assert response["Retry-After"] == "1"


def test_different_keys_run_in_parallel(using: str) -> None:
    gate = Gate()
    view = gate.view("path", name="par", ttl=7, using=using)
    first = Running(view, post("/a/"))
    gate.wait_inside()
    second = Running(view, post("/b/"))
    gate.wait_inside()  # the second is inside while the first still is
    assert held_names(using) == ["view:par:path=/a/", "view:par:path=/b/"]
    gate.leave.set()
    assert first.result().status_code == 200
    assert second.result().status_code == 200


# Concurrency: processes ----------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_same_key__one_200_one_409(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    spawn = multiprocessing.get_context("spawn")

    def start(worker: str, slot: str) -> Any:
        child = spawn.Process(
            target=view_urls.post_in_process, args=(redis_url, prefix, worker, slot)
        )
        child.start()
        return child

    def pop(key: str) -> bytes:
        eventually(lambda: raw_redis.llen(f"{prefix}:{key}") > 0, timeout=60)
        value = raw_redis.lpop(f"{prefix}:{key}")
        assert isinstance(value, bytes)
        return value

    children = [start("A", "one")]
    try:
        assert pop("inside") == b"one"
        children.append(start("B", "one"))
        # Retry-After is the holder's lease left, rounded up. Renewal gives the 7 s lease back
        # whenever a third of it has passed, so what is left lies between 7 s and 2/3 of that:
        # B answers 5, 6 or 7, whenever its process got to ask (spawning it takes seconds).
        assert pop("answers") in {b"B 409 5", b"B 409 6", b"B 409 7"}
        # Another key runs beside the holder.
        children.append(start("C", "two"))
        assert pop("inside") == b"two"
        raw_redis.rpush(f"{prefix}:may-leave:two", "1")
        assert pop("answers") == b"C 200 -"
        raw_redis.rpush(f"{prefix}:may-leave:one", "1")
        assert pop("answers") == b"A 200 -"
    finally:
        raw_redis.rpush(f"{prefix}:may-leave:one", "1")
        raw_redis.rpush(f"{prefix}:may-leave:two", "1")
        for child in children:
            child.join(60)
    assert [child.exitcode for child in children] == [0, 0, 0]
    assert held_names() == []


# Test clients --------------------------------------------------------------------------------


@override_settings(ROOT_URLCONF="tests.support.view_urls")
def test_through_the_test_client() -> None:
    client = Client()
    assert client.post("/plain/").status_code == 200
    with lock("view:client:path=/plain/", ttl=7):
        response = client.post("/plain/", HTTP_ACCEPT="application/json")
        assert client.get("/plain/").status_code == 200
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    assert response.json() == {
        "error": "locked",
        "detail": "This request is already being processed. Try again later.",
        "retry_after": 7,
    }


@override_settings(ROOT_URLCONF="tests.support.view_urls")
async def test_through_the_async_client() -> None:
    client = AsyncClient()
    assert (await client.post("/aplain/")).status_code == 200
    holder = lock("view:aclient:path=/aplain/", ttl=7, owner="holder")
    await asyncio.to_thread(holder.acquire)
    try:
        response = await client.post("/aplain/")
    finally:
        await asyncio.to_thread(holder.release)
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    assert (await client.post("/aplain/")).status_code == 200


@pytest.mark.django_db(transaction=True)
@override_settings(ROOT_URLCONF="tests.support.view_urls")
@pytest.mark.parametrize(
    ("path", "name"), [("/aplain/", "aclient:path=/aplain/"), ("/auser/", "")]
)
async def test_through_the_async_client__a_logged_in_user_is_loaded_without_blocking(
    path: str, name: str
) -> None:
    # Django refuses a database query in the event loop: the user (the key, or the holder's
    # metadata) is loaded without one.
    user = await sync_to_async(User.objects.create_user)("alice")
    client = AsyncClient()
    await client.aforce_login(user)
    name = name or f"auser:user={user.pk}"
    holder = lock(f"view:{name}", ttl=7, owner="holder")
    assert (await client.post(path)).status_code == 200
    await asyncio.to_thread(holder.acquire)
    try:
        assert (await client.post(path)).status_code == 409
    finally:
        await asyncio.to_thread(holder.release)


# Keys ----------------------------------------------------------------------------------------


def test_key_user__by_pk(using: str) -> None:
    assert name_inside("user", user_request(1), using) == "view:k:user=1"
    assert name_inside("user", user_request(2), using) == "view:k:user=2"
    view = ok_view(name="k", using=using)  # "user" is the default key
    with lock("view:k:user=1", ttl=7, using=using):
        assert view(user_request(1)).status_code == 409
        assert view(user_request(2)).status_code == 200


def test_key_user__holder_metadata_names_the_user() -> None:
    seen: list[LockInfo] = []

    @lock_view(name="k")
    def view(request: HttpRequest) -> HttpResponse:
        seen.extend(locks["default"].lock_info("view:k:user=5"))
        return HttpResponse("ok")

    assert view(user_request(5)).status_code == 200
    assert seen[0].metadata == {"method": "POST", "path": "/x/", "user": "5"}


@pytest.mark.django_db
def test_key_user__anonymous_keyed_by_a_session_started_for_them() -> None:
    request = user_request(None)
    request.session = SessionStore()
    name = name_inside("user", request)
    assert request.session.session_key is not None
    assert name == f"view:k:anon={request.session.session_key}"
    # Another anonymous visitor has another session, so another lock.
    other = user_request(None)
    other.session = SessionStore()
    assert name_inside("user", other) != name
    # The same visitor, coming back with the session, conflicts with themselves.
    again = user_request(None)
    again.session = SessionStore(request.session.session_key)
    with lock(name, ttl=7):
        assert ok_view(name="k")(again).status_code == 409


def test_key_user__without_auth_middleware_is_improperly_configured() -> None:
    with pytest.raises(ImproperlyConfigured, match="AuthenticationMiddleware"):
        ok_view(name="k")(post())


def test_key_user__anonymous_without_session_middleware_is_improperly_configured() -> None:
    with pytest.raises(ImproperlyConfigured, match="SessionMiddleware"):
        ok_view(name="k")(user_request(None))


@pytest.mark.django_db
def test_key_session() -> None:
    store = SessionStore()
    store.create()
    request = post()
    request.session = store
    assert name_inside("session", request) == f"view:k:session={store.session_key}"


def test_key_ip__remote_addr(using: str) -> None:
    assert name_inside("ip", post(REMOTE_ADDR="1.2.3.4"), using) == "view:k:ip=1.2.3.4"
    view = ok_view(key="ip", name="k", using=using)
    with lock("view:k:ip=1.2.3.4", ttl=7, using=using):
        assert view(post(REMOTE_ADDR="1.2.3.4")).status_code == 409
        assert view(post(REMOTE_ADDR="1.2.3.5")).status_code == 200


def test_key_ip__x_forwarded_for_ignored_without_trusted_proxies() -> None:
    request = post(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6")
    assert name_inside("ip", request) == "view:k:ip=10.0.0.1"


@override_settings(LOCKS_TRUSTED_PROXIES=["10.0.0.0/8"])
def test_key_ip__x_forwarded_for_ignored_from_an_untrusted_peer() -> None:
    request = post(REMOTE_ADDR="8.8.8.8", HTTP_X_FORWARDED_FOR="6.6.6.6")
    assert name_inside("ip", request) == "view:k:ip=8.8.8.8"


@override_settings(LOCKS_TRUSTED_PROXIES=["10.0.0.0/8"])
def test_key_ip__trusted_proxy__rightmost_untrusted_hop() -> None:
    request = post(
        REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="6.6.6.6, 7.7.7.7 , 10.0.0.9,10.0.0.8"
    )
    assert name_inside("ip", request) == "view:k:ip=7.7.7.7"


@override_settings(LOCKS_TRUSTED_PROXIES=["10.0.0.0/8"])
@pytest.mark.parametrize("peer", ["::ffff:10.0.0.5", "::ffff:a00:5"])
def test_key_ip__a_trusted_proxy_reported_as_ipv4_mapped_ipv6_is_trusted(peer: str) -> None:
    request = post(REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR="6.6.6.6")
    assert name_inside("ip", request) == "view:k:ip=6.6.6.6"


@override_settings(LOCKS_TRUSTED_PROXIES=["10.0.0.0/8"])
def test_key_ip__trusted_proxy__only_proxies_in_the_chain_gives_remote_addr() -> None:
    request = post(REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="10.0.0.9")
    assert name_inside("ip", request) == "view:k:ip=10.1.2.3"
    no_header = post(REMOTE_ADDR="10.1.2.3")
    assert name_inside("ip", no_header) == "view:k:ip=10.1.2.3"


def test_key_path(using: str) -> None:
    assert name_inside("path", post("/a/b/?q=1"), using) == "view:k:path=/a/b/"


def test_key_url_kwarg(using: str) -> None:
    assert name_inside("url:pk", post(), using, pk=42) == "view:k:pk=42"
    view = ok_view(key="url:pk", name="k", using=using)
    with lock("view:k:pk=42", ttl=7, using=using):
        assert view(post(), pk=42).status_code == 409
        assert view(post(), pk=43).status_code == 200


def test_key_header(using: str) -> None:
    request = post(HTTP_X_TENANT="acme")
    assert name_inside("header:X-Tenant", request, using) == "view:k:x-tenant=acme"
    assert name_inside("header:X-Tenant", post(), using) == "view:k:x-tenant="


def test_key_post_field(using: str) -> None:
    request = rf.post("/x/", {"order": "17", "other": "x"})
    assert name_inside("post:order", request, using) == "view:k:order=17"


def test_key_list_combines_parts(using: str) -> None:
    request = rf.post("/p/", {"order": "17"}, REMOTE_ADDR="1.2.3.4")
    name = name_inside(["ip", "path", "post:order", "url:pk"], request, using, pk=3)
    assert name == "view:k:ip=1.2.3.4:path=/p/:order=17:pk=3"


def test_key_callable_gets_request_and_view_arguments(using: str) -> None:
    calls: list[tuple[Any, ...]] = []

    def key(request: HttpRequest, **kwargs: Any) -> str:
        calls.append((request.path, kwargs))
        return f"acct-{kwargs['pk']}"

    assert name_inside(key, post("/c/"), using, pk=9) == "view:k:acct-9"
    assert calls == [("/c/", {"pk": 9})]
    assert name_inside(["path", key], post("/c/"), using, pk=9) == "view:k:path=/c/:acct-9"


def test_long_parts_are_hashed(using: str) -> None:
    long = "v" * 300
    name = name_inside(["header:X-Long", "path"], post("/p/", HTTP_X_LONG=long), using)
    digest = hashlib.sha256(f"x-long={long}".encode()).hexdigest()[:32]
    assert name == f"view:k:sha256={digest}:path=/p/"
    # At the limit it is kept as it is.
    exact = "v" * (200 - len("x-long="))
    assert name_inside("header:X-Long", post(HTTP_X_LONG=exact), using) == f"view:k:x-long={exact}"


def test_long_callable_result_is_hashed() -> None:
    name = name_inside(lambda request: "z" * 201, post())
    assert name == "view:k:sha256=" + hashlib.sha256(b"z" * 201).hexdigest()[:32]


def test_default_name_is_the_views_dotted_path() -> None:
    seen: list[str] = []

    @lock_view("path")
    def view_a(request: HttpRequest) -> HttpResponse:
        seen.extend(held_names())
        return HttpResponse("ok")

    view_a(post("/d/"))
    where = f"{__name__}.test_default_name_is_the_views_dotted_path.<locals>.view_a"
    assert seen == [f"view:{where}:path=/d/"]


def test_views_with_their_own_names_do_not_exclude_each_other() -> None:
    gate = Gate()
    view_a = gate.view("path", name="a", ttl=7)
    view_b = ok_view(key="path", name="b", ttl=7)
    first = Running(view_a, post("/s/"))
    gate.wait_inside()
    assert view_b(post("/s/")).status_code == 200
    gate.leave.set()
    assert first.result().status_code == 200


def test_a_shared_name_makes_two_views_exclude_each_other() -> None:
    gate = Gate()
    view_a = gate.view(lambda request: "same", name="shared", ttl=7)
    view_b = ok_view(key=lambda request: "same", name="shared", ttl=7)
    first = Running(view_a, post("/a/"))
    gate.wait_inside()
    response = view_b(post("/b/"))
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    gate.leave.set()
    assert first.result().status_code == 200
    assert view_b(post("/b/")).status_code == 200


# Methods -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["get", "head", "options"])
def test_safe_methods_are_not_locked_by_default(method: str) -> None:
    seen: ClassVar[list[list[str]]] = []

    @lock_view("path", name="m")
    def view(request: HttpRequest) -> HttpResponse:
        seen.append(held_names())
        return HttpResponse("ok")

    with lock("view:m:path=/x/", ttl=7):
        response = view(getattr(rf, method)("/x/"))
    assert response.status_code == 200
    assert seen == [["view:m:path=/x/"]]  # only the lock held by the test


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_unsafe_methods_are_locked_by_default(method: str) -> None:
    view = ok_view(key="path", name="m")
    with lock("view:m:path=/x/", ttl=7):
        assert view(getattr(rf, method)("/x/")).status_code == 409


def test_methods_get_locks_get_and_only_get() -> None:
    view = ok_view(key="path", name="m", methods=["get"])
    with lock("view:m:path=/x/", ttl=7):
        assert view(rf.get("/x/")).status_code == 409
        assert view(rf.post("/x/")).status_code == 200


@pytest.mark.parametrize("methods", ["GET", [b"GET"], [1]])
def test_methods_must_be_a_list_of_names(methods: Any) -> None:
    with pytest.raises(LockArgumentTypeError, match="methods must be a list"):
        ok_view(key="path", methods=methods)


# Waiting ------------------------------------------------------------------------------------


def test_waiting__the_second_request_runs_after_the_first(using: str) -> None:
    gate = Gate()
    view = gate.view("path", name="w", ttl=7, timeout=5, using=using)
    first = Running(view, post())
    gate.wait_inside()
    second = Running(view, post())
    time.sleep(0.2)
    assert not second.done(), "the second request did not wait"
    gate.leave.set()
    assert first.result().status_code == 200
    gate.wait_inside()
    assert second.result().status_code == 200


def test_waiting__gives_up_after_the_timeout(using: str) -> None:
    view = ok_view(key="path", name="w", timeout=0.3, using=using)
    with lock("view:w:path=/x/", ttl=7, using=using):
        started = time.monotonic()
        response = view(post())
        waited = time.monotonic() - started
    assert response.status_code == 409
    assert 0.25 <= waited < 3


# Conflict answers -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [423, 429, 503])
def test_status_choices(status: int) -> None:
    view = ok_view(key="path", name="s", status=status)
    with lock("view:s:path=/x/", ttl=7):
        response = view(post())
    assert response.status_code == status
    assert response["Retry-After"] == "7"


@pytest.mark.parametrize("status", [200, 400, 418, "409"])
def test_invalid_status_is_improperly_configured(status: Any) -> None:
    with pytest.raises(InvalidLockArgumentError, match="409, 423, 429 or 503"):
        ok_view(key="path", status=status)


@pytest.mark.parametrize(
    "extra",
    [
        {"HTTP_ACCEPT": "application/json"},
        {"HTTP_ACCEPT": "text/html;q=0.5, application/json"},
        {"content_type": "application/json", "data": "{}"},
    ],
)
def test_json_for_clients_that_want_json(extra: dict[str, Any]) -> None:
    view = ok_view(key="path", name="j", status=503)
    with lock("view:j:path=/x/", ttl=4):
        response = view(rf.post("/x/", **extra))
    assert response.status_code == 503
    assert isinstance(response, JsonResponse)
    assert json.loads(response.content) == {
        "error": "locked",
        "detail": "This request is already being processed. Try again later.",
        "retry_after": 4,
    }
    assert response["Retry-After"] == "4"


@pytest.mark.parametrize(
    "accept", ["", "text/html", "*/*", "text/html, application/json;q=0.5", "application/xml"]
)
def test_text_for_other_clients(accept: str) -> None:
    view = ok_view(key="path", name="j")
    with lock("view:j:path=/x/", ttl=7):
        response = view(post(HTTP_ACCEPT=accept))
    assert response.status_code == 409
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content == b"This request is already being processed. Try again later."


LOCMEM_TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "OPTIONS": {
            "loaders": [
                (
                    "django.template.loaders.locmem.Loader",
                    {
                        "busy.html": "busy {{ status }} retry={{ retry_after }} "
                        "{% for h in holders %}[{{ h.name }} {{ h.metadata.method }}]"
                        "{% endfor %}"
                    },
                )
            ]
        },
    }
]


@override_settings(TEMPLATES=LOCMEM_TEMPLATES)
def test_template_name_renders_the_conflict() -> None:
    view = ok_view(key="path", name="t", status=423, template_name="busy.html")
    with lock("view:t:path=/x/", ttl=7, metadata={"method": "PUT"}):
        response = view(post(HTTP_ACCEPT="application/json"))
    assert response.status_code == 423
    assert response["Retry-After"] == "7"
    assert response.content.decode() == "busy 423 retry=7 [view:t:path=/x/ PUT]"


def test_on_conflict_gets_the_holders_and_its_answer_is_returned() -> None:
    calls: list[tuple[HttpRequest, list[LockInfo]]] = []

    def on_conflict(request: HttpRequest, holders: list[LockInfo]) -> HttpResponse:
        calls.append((request, holders))
        return HttpResponse("custom", status=202)

    view = ok_view(key="path", name="c", on_conflict=on_conflict)
    request = post()
    with lock("view:c:path=/x/", ttl=7, metadata={"job": 1}) as held:
        token = held.fencing_token
        response = view(request)
    assert response.status_code == 202
    assert response.content == b"custom"
    assert not response.has_header("Retry-After")
    [(got_request, holders)] = calls
    assert got_request is request
    [holder] = holders
    assert isinstance(holder, LockInfo)
    assert holder.name == "view:c:path=/x/"
    assert holder.metadata == {"job": 1}
    assert holder.fencing_token == token
    assert 6 < holder.ttl <= 7


# Errors and streaming (sync) ---------------------------------------------------------------


class Boom(Exception):
    pass


def test_the_lock_is_released_when_the_view_raises(using: str) -> None:
    inside: list[list[str]] = []

    @lock_view("path", name="e", using=using)
    def view(request: HttpRequest) -> HttpResponse:
        inside.append(held_names(using))
        if len(inside) == 1:
            raise Boom
        return HttpResponse("ok")

    with pytest.raises(Boom):
        view(post())
    assert held_names(using) == []
    assert view(post()).status_code == 200
    assert inside == [["view:e:path=/x/"], ["view:e:path=/x/"]]


def test_streaming_keeps_the_lock_until_consumed(using: str) -> None:
    @lock_view("path", name="st", using=using)
    def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(iter([b"a", b"b"]))

    response = view(post())
    assert response.status_code == 200
    assert held_names(using) == ["view:st:path=/x/"]
    assert view(post()).status_code == 409
    chunks = iter(response)
    assert next(chunks) == b"a"
    assert held_names(using) == ["view:st:path=/x/"]
    assert list(chunks) == [b"b"]
    assert held_names(using) == []
    again = view(post())
    assert again.status_code == 200
    assert b"".join(again) == b"ab"
    assert held_names(using) == []


def test_streaming_consumed_in_another_thread_releases(using: str) -> None:
    @lock_view("path", name="st", using=using)
    def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(iter([b"a"]))

    response = view(post())
    assert in_thread(lambda: b"".join(response.streaming_content)) == b"a"
    assert held_names(using) == []


@pytest.mark.django_db  # closing a response sends request_finished
def test_streaming_closed_part_way_releases() -> None:
    @lock_view("path", name="st")
    def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(iter([b"a", b"b"]))

    response = view(post())
    chunks = iter(response)
    next(chunks)
    response.close()  # the client went away
    assert held_names() == []


@pytest.mark.django_db  # closing a response sends request_finished, which visits the database
def test_streaming_closed_before_reading_releases() -> None:
    @lock_view("path", name="st", ttl=2)
    def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(iter([b"a"]))

    response = view(post())
    response.close()  # e.g. the client went away before the first chunk
    try:
        assert held_names() == []
    finally:
        locks["default"].force_release("view:st:path=/x/")


# Async views ---------------------------------------------------------------------------------


class AGate:
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.leave = asyncio.Event()
        self.count = 0

    async def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.count += 1
        self.entered.set()
        await asyncio.wait_for(self.leave.wait(), 10)
        return HttpResponse("ok")


async def aheld_names(using: str = "default") -> list[str]:
    return await asyncio.to_thread(held_names, using)


async def test_async_same_key__200_and_409(using: str) -> None:
    gate = AGate()

    @lock_view("path", name="as", ttl=7, using=using)
    async def view(request: HttpRequest) -> HttpResponse:
        return await gate(request)

    async def second() -> Any:
        await asyncio.wait_for(gate.entered.wait(), 10)
        response = await view(arf.post("/x/"))
        gate.leave.set()
        return response

    first, conflicted = await asyncio.gather(view(arf.post("/x/")), second())
    assert first.status_code == 200
    assert conflicted.status_code == 409
    assert conflicted["Retry-After"] == "7"
    assert gate.count == 1
    assert await aheld_names(using) == []


async def test_async_different_keys_run_in_parallel(using: str) -> None:
    gate = AGate()

    @lock_view("path", name="ap", ttl=7, using=using)
    async def view(request: HttpRequest) -> HttpResponse:
        return await gate(request)

    async def release_when_both_inside() -> None:
        while gate.count < 2:
            await asyncio.sleep(0.01)
        gate.leave.set()

    a, b, _ = await asyncio.wait_for(
        asyncio.gather(view(arf.post("/a/")), view(arf.post("/b/")), release_when_both_inside()),
        10,
    )
    assert (a.status_code, b.status_code) == (200, 200)


async def test_async_waiting_mode(using: str) -> None:
    gate = AGate()

    @lock_view("path", name="aw", ttl=7, timeout=5, using=using)
    async def view(request: HttpRequest) -> HttpResponse:
        return await gate(request)

    first = asyncio.create_task(view(arf.post("/x/")))
    await asyncio.wait_for(gate.entered.wait(), 10)
    second = asyncio.create_task(view(arf.post("/x/")))
    await asyncio.sleep(0.2)
    assert gate.count == 1
    assert not second.done()
    gate.leave.set()
    assert (await first).status_code == 200
    assert (await asyncio.wait_for(second, 10)).status_code == 200
    assert gate.count == 2


async def test_async_json_conflict_and_on_conflict() -> None:
    @lock_view("path", name="aj", ttl=7)
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    holder = lock("view:aj:path=/x/", ttl=7, owner="holder")
    await asyncio.to_thread(holder.acquire)
    try:
        response = await view(arf.post("/x/", headers={"Accept": "application/json"}))
    finally:
        await asyncio.to_thread(holder.release)
    assert response.status_code == 409
    assert json.loads(response.content)["retry_after"] == 7


async def test_async_get_is_not_locked() -> None:
    @lock_view("path", name="ag")
    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    holder = lock("view:ag:path=/x/", ttl=7, owner="holder")
    await asyncio.to_thread(holder.acquire)
    try:
        assert (await view(arf.get("/x/"))).status_code == 200
        assert (await view(arf.post("/x/"))).status_code == 409
    finally:
        await asyncio.to_thread(holder.release)


async def test_async_the_lock_is_released_when_the_view_raises(using: str) -> None:
    @lock_view("path", name="ae", using=using)
    async def view(request: HttpRequest) -> HttpResponse:
        raise Boom

    with pytest.raises(Boom):
        await view(arf.post("/x/"))
    assert await aheld_names(using) == []


async def test_async_streaming_keeps_the_lock_until_consumed(using: str) -> None:
    async def content() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    @lock_view("path", name="ast", using=using)
    async def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(content())

    response = await view(arf.post("/x/"))
    assert response.is_async
    assert await aheld_names(using) == ["view:ast:path=/x/"]
    assert (await view(arf.post("/x/"))).status_code == 409
    chunks = [chunk async for chunk in response]
    assert chunks == [b"a", b"b"]
    assert await aheld_names(using) == []


async def test_async_view_with_sync_streaming_content(using: str) -> None:
    @lock_view("path", name="ass", using=using)
    async def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(iter([b"a"]))

    response = await view(arf.post("/x/"))
    assert await aheld_names(using) == ["view:ass:path=/x/"]
    # Consumed in a thread, as the ASGI handler does for sync iterators.
    assert await asyncio.to_thread(lambda: b"".join(response.streaming_content)) == b"a"
    assert await aheld_names(using) == []


def test_sync_view_with_async_streaming_content() -> None:
    async def content() -> AsyncIterator[bytes]:
        yield b"a"

    @lock_view("path", name="sas")
    def view(request: HttpRequest) -> StreamingHttpResponse:
        return StreamingHttpResponse(content())

    response = view(post())
    assert held_names() == ["view:sas:path=/x/"]

    async def consume() -> list[bytes]:
        return [chunk async for chunk in response]

    assert asyncio.run(consume()) == [b"a"]
    assert held_names() == []


# LockMixin -----------------------------------------------------------------------------------


class SyncLocked(LockMixin, View):
    lock_key = "path"
    lock_ttl = 7
    seen: ClassVar[list[list[str]]] = []

    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("get")

    def post(self, request: HttpRequest, **kwargs: Any) -> HttpResponse:
        type(self).seen.append(held_names())
        return HttpResponse("post")


def test_mixin_sync_view_default_name_and_conflict() -> None:
    SyncLocked.seen = []
    view = SyncLocked.as_view()
    assert view(post()).status_code == 200
    name = f"view:{__name__}.SyncLocked:path=/x/"
    assert SyncLocked.seen == [[name]]
    with lock(name, ttl=7):
        response = view(post())
        assert view(rf.get("/x/")).status_code == 200
    assert response.status_code == 409
    assert response["Retry-After"] == "7"
    assert held_names() == []


class ByPk(LockMixin, View):
    lock_name = "bypk"
    lock_status = 423
    lock_methods = ("POST", "GET")

    def get_lock_key(self) -> Any:
        return "url:pk"

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse("get")

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse("post")


def test_mixin_get_lock_key_override_and_attributes() -> None:
    view = ByPk.as_view()
    with lock("view:bypk:pk=1", ttl=5):
        conflicted = view(rf.get("/x/"), pk=1)
        assert view(post(), pk=2).status_code == 200
    assert conflicted.status_code == 423
    assert conflicted["Retry-After"] == "5"


class Custom(LockMixin, View):
    lock_key = "path"
    lock_name = "custom"
    holders: ClassVar[list[LockInfo]] = []

    def get_lock_ttl(self) -> float:
        return 3

    def get_lock_using(self) -> str:
        return "locmem"

    def handle_lock_conflict(self, holders: list[LockInfo]) -> HttpResponse:
        type(self).holders = holders
        return HttpResponse(f"busy {self.request.path}", status=429)

    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("post")


def test_mixin_handle_lock_conflict_override_and_get_overrides() -> None:
    seen: list[LockInfo] = []

    class Watching(Custom):
        def post(self, request: HttpRequest) -> HttpResponse:
            seen.extend(locks["locmem"].lock_info("view:custom:path=/x/"))
            return HttpResponse("post")

    assert Watching.as_view()(post()).status_code == 200
    [inside] = seen
    assert 2 < inside.ttl <= 3  # get_lock_ttl, on get_lock_using's backend
    with lock("view:custom:path=/x/", ttl=7, using="locmem"):
        response = Custom.as_view()(post())
    assert response.status_code == 429
    assert response.content == b"busy /x/"
    [holder] = Custom.holders
    assert holder.name == "view:custom:path=/x/"


class Waiting(LockMixin, View):
    lock_key = "path"
    lock_name = "mw"
    lock_timeout = 5
    gate = Gate()

    def post(self, request: HttpRequest) -> HttpResponse:
        return self.gate(request)


def test_mixin_lock_timeout_waits() -> None:
    Waiting.gate = Gate()
    view = Waiting.as_view()
    first = Running(view, post())
    Waiting.gate.wait_inside()
    second = Running(view, post())
    time.sleep(0.2)
    assert not second.done()
    Waiting.gate.leave.set()
    assert first.result().status_code == 200
    assert second.result().status_code == 200


class AsyncLocked(LockMixin, View):
    lock_key = "path"
    lock_name = "amix"
    lock_ttl = 7
    gate: AGate

    async def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("get")

    async def post(self, request: HttpRequest) -> HttpResponse:
        return await self.gate(request)


async def test_mixin_async_view() -> None:
    AsyncLocked.gate = AGate()
    view = AsyncLocked.as_view()
    assert AsyncLocked.view_is_async

    async def second() -> Any:
        await asyncio.wait_for(AsyncLocked.gate.entered.wait(), 10)
        names = await aheld_names()
        got = await view(arf.post("/x/"))
        unlocked_get = await view(arf.get("/x/"))
        AsyncLocked.gate.leave.set()
        return names, got, unlocked_get

    first, (names, conflicted, unlocked_get) = await asyncio.gather(
        view(arf.post("/x/")), second()
    )
    assert names == ["view:amix:path=/x/"]
    assert first.status_code == 200
    assert conflicted.status_code == 409
    assert conflicted["Retry-After"] == "7"
    assert unlocked_get.status_code == 200
    assert await aheld_names() == []


class AsyncRaising(LockMixin, View):
    lock_key = "path"
    lock_name = "araise"

    async def post(self, request: HttpRequest) -> HttpResponse:
        raise Boom


async def test_mixin_async_view_releases_when_it_raises() -> None:
    with pytest.raises(Boom):
        await AsyncRaising.as_view()(arf.post("/x/"))
    assert await aheld_names() == []


def by_account(request: HttpRequest, *args: Any, **kwargs: Any) -> str:
    return f"account={request.headers.get('X-Account', '')}"


class ByAccount(LockMixin, View):
    lock_key = by_account  # a plain function as the class attribute: the key itself
    lock_name = "acct"

    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("post")


class ByAccountStatic(ByAccount):
    lock_key = staticmethod(by_account)


@pytest.mark.parametrize("cls", [ByAccount, ByAccountStatic])
def test_mixin_key_function__gets_the_request_not_the_view(cls: type[View]) -> None:
    view = cls.as_view()
    with lock("view:acct:account=7", ttl=7):
        assert view(post(headers={"X-Account": "7"})).status_code == 409
        assert view(post(headers={"X-Account": "8"})).status_code == 200


def test_mixin_bad_key_is_refused_when_the_class_is_defined() -> None:
    where = re.escape(__name__)
    with pytest.raises(InvalidLockArgumentError, match=rf"LockMixin on {where}\..*BadKey"):

        class BadKey(LockMixin, View):
            lock_key = "nope"

            def post(self, request: HttpRequest) -> HttpResponse:
                return HttpResponse("post")  # pragma: no cover

        BadKey.as_view()(post())


@pytest.mark.parametrize(
    ("attribute", "value", "error"),
    [
        ("lock_ttl", 0, InvalidLockArgumentError),
        ("lock_ttl", "30", LockArgumentTypeError),
        ("lock_timeout", -1, InvalidLockArgumentError),
        ("lock_methods", "POST", LockArgumentTypeError),
        ("lock_status", 500, InvalidLockArgumentError),
        ("lock_retry_after", 1.5, LockArgumentTypeError),
        ("lock_key", 42, LockArgumentTypeError),
    ],
)
def test_mixin__every_bad_attribute_is_refused_when_the_class_is_defined(
    attribute: str, value: object, error: type[Exception]
) -> None:
    # At import, as @lock_view's arguments are: never first at a request, where an
    # ``except LockError`` around the call could swallow it.
    with pytest.raises(error):
        type("Bad", (LockMixin, View), {attribute: value, "__module__": __name__})


# Bad keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["nope", "", [], (), 42, None, "url:", "header:", "post:", ["path", "nope"], [b"ip"]]
)
def test_bad_keys_are_refused_at_decoration(key: Any) -> None:
    with pytest.raises(InvalidLockArgumentError) as caught:
        ok_view(key=key)
    # A key of the wrong type is also a TypeError, a string naming no key a ValueError only.
    wrong_type = not isinstance(key, (str, list, tuple)) or key == [b"ip"]
    assert isinstance(caught.value, TypeError) == wrong_type
    message = str(caught.value)
    assert message.startswith(f"lock_view on {__name__}.ok_view.<locals>.view: ")
    for word in ("'user'", "'ip'", "'path'", "'session'", "'url:<kwarg>'", "'header:<name>'"):
        assert word in message
    assert "'post:<field>'" in message
    assert "a callable" in message


def test_missing_url_kwarg_is_improperly_configured_at_request() -> None:
    view = ok_view(key="url:pk", name="u")
    with pytest.raises(ImproperlyConfigured, match=r"'url:pk'.*'pk'.*\['slug'\]"):
        view(post(), slug="x")


@pytest.mark.parametrize("value", [None, "", 42, b"bytes"])
def test_key_function_returning_no_str_is_improperly_configured(value: Any) -> None:
    view = ok_view(key=lambda request: value, name="f")
    with pytest.raises(ImproperlyConfigured, match=f"returned {value!r}"):
        view(post())
    assert held_names() == []


# Check E013 -----------------------------------------------------------------------------------

HINT = (
    'Use a list such as ["10.0.0.0/8", "127.0.0.1"]: the proxies whose X-Forwarded-For '
    "header the 'ip' view lock key may believe."
)


def e013() -> list[Any]:
    return [m for m in run_checks() if m.id == "django_redis_lock.E013"]


@pytest.mark.parametrize("value", ["10.0.0.1", b"10.0.0.1", 5, None])
def test_check_e013_not_a_list(value: Any) -> None:
    with override_settings(LOCKS_TRUSTED_PROXIES=value):
        expected = Error(
            f"LOCKS_TRUSTED_PROXIES must be a list of IP addresses or networks, got {value!r}.",
            hint=HINT,
            id="django_redis_lock.E013",
        )
        assert check_trusted_proxies() == [expected]
        assert e013() == [expected]


def test_check_e013_bad_entries() -> None:
    with override_settings(LOCKS_TRUSTED_PROXIES=["10.0.0.0/8", "nonsense", None, "300.1.1.1"]):
        assert [m.msg for m in e013()] == [
            f"LOCKS_TRUSTED_PROXIES holds {bad!r}, which is not an IP address or network."
            for bad in ("nonsense", None, "300.1.1.1")
        ]
        assert {m.hint for m in e013()} == {HINT}


@pytest.mark.parametrize(
    "value", [["10.0.0.0/8", "127.0.0.1", "::1", "fd00::/8", "192.168.1.7/24"], (), set()]
)
def test_check_e013_valid(value: Any) -> None:
    with override_settings(LOCKS_TRUSTED_PROXIES=value):
        assert check_trusted_proxies() == []
        assert e013() == []


def test_check_e013_unset() -> None:
    assert check_trusted_proxies() == []


def test_lock_view__wraps_callable_objects_named_by_their_type() -> None:
    class Charge:
        def __call__(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("ok")

    view = lock_view("path")(Charge())
    assert view(rf.post("/charge/")).status_code == 200


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ttl": 0}, "ttl must be a finite number of seconds of at least 0.001, got 0."),
        ({"ttl": "30"}, "ttl must be a number of seconds, not str: '30'."),
        ({"timeout": -1}, "timeout must be None or a finite number of seconds >= 0, got -1."),
        (
            {"timeout": None},
            "timeout must be a number of seconds >= 0 (0: do not wait), got None.",
        ),
    ],
)
def test_lock_view__bad_ttl_or_timeout_fails_when_the_view_is_defined(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidLockArgumentError) as caught:
        lock_view("path", **options)(lambda request: HttpResponse("ok"))
    assert message in str(caught.value)
