"""The example's health page: green with Redis answering, red with it frozen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from django_redis_lock.testing import RedisServer


@pytest.fixture
def frozen_redis() -> Iterator[dict[str, Any]]:
    """LOCKS on a server of this test alone, paused (SIGSTOP) for the test's body."""
    with RedisServer() as server:
        options = {"url": server.url, "key_prefix": "health", "socket_timeout": 1}
        value = {"default": {"BACKEND": "django_redis_lock.backends.redis.RedisBackend"}}
        value["default"]["OPTIONS"] = options
        with override_settings(LOCKS=value):
            server.pause()
            try:
                yield value
            finally:
                server.resume()


@pytest.fixture
def client() -> Client:
    return Client()


def test_health__ok_while_redis_answers(redis_locks: dict[str, Any], client: Client) -> None:
    with override_settings(ROOT_URLCONF="example.urls", STATIC_URL="static/"):
        response = client.get("/health/", {"format": "json"})

    assert response.status_code == 200
    assert response.json() == {"LockBackend(alias='default')": "OK", "LockRenewal()": "OK"}


def test_health__fails_naming_the_alias_when_redis_is_frozen(
    frozen_redis: dict[str, Any], client: Client
) -> None:
    with override_settings(ROOT_URLCONF="example.urls", STATIC_URL="static/"):
        response = client.get("/health/", {"format": "json"})

    assert response.status_code == 500
    assert response.json()["LockBackend(alias='default')"].startswith(
        "Unavailable: LOCKS alias 'default': "
    )
