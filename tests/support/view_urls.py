"""URLs of the view-lock tests, and the code their spawned processes run."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_redis_lock.decorators import lock_view, rate_limit_view


def _signals() -> tuple[Any, str]:
    import redis

    options = settings.LOCKS["default"]["OPTIONS"]
    return redis.Redis.from_url(options["url"], socket_timeout=None), options["key_prefix"]


@lock_view("url:slot", name="proc", ttl=7)
def blocking(request: HttpRequest, slot: str) -> HttpResponse:
    """Say we are inside, then wait until the test lets us leave."""
    client, prefix = _signals()
    try:
        client.rpush(f"{prefix}:inside", slot)
        client.blpop([f"{prefix}:may-leave:{slot}"], timeout=30)
    finally:
        client.close()
    return HttpResponse(f"done {slot}")


@lock_view("path", name="client", ttl=7)
def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


@lock_view("path", name="aclient", ttl=7)
async def aplain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("aplain")


@rate_limit_view("path", "2/5s", name="client")
def limited(request: HttpRequest) -> HttpResponse:
    return HttpResponse("limited")


@rate_limit_view("path", "2/5s", name="aclient")
async def alimited(request: HttpRequest) -> HttpResponse:
    return HttpResponse("alimited")


@lock_view("user", name="auser", ttl=7)
async def auser(request: HttpRequest) -> HttpResponse:
    return HttpResponse("auser")


@rate_limit_view("user", "2/10s", name="aratelimited")
async def auser_limited(request: HttpRequest) -> HttpResponse:
    return HttpResponse("auser_limited")


urlpatterns = [
    path("proc/<str:slot>/", blocking),
    path("plain/", plain),
    path("aplain/", aplain),
    path("limited/", limited),
    path("alimited/", alimited),
    path("auser/", auser),
    path("auser-limited/", auser_limited),
]


def post_in_process(url: str, prefix: str, worker: str, slot: str) -> None:
    """POST to the blocking view through Django's test Client; report the answer."""
    from .workers import setup_django

    setup_django(url, prefix)
    import redis
    from django.test import Client, override_settings
    from django.test.utils import setup_test_environment

    setup_test_environment()  # lets the test Client's "testserver" host in
    override_settings(ROOT_URLCONF="tests.support.view_urls").enable()
    response = Client().post(f"/proc/{slot}/")
    client = redis.Redis.from_url(url, socket_timeout=None)
    client.rpush(
        f"{prefix}:answers",
        f"{worker} {response.status_code} {response.get('Retry-After', '-')}",
    )
    client.close()
