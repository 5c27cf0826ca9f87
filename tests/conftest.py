"""Fixtures shared by the test suite; every Redis here is a throw-away server we started."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
import redis as redis_py
import redis.connection
from django.test import override_settings

from django_redis_lock import locks
from django_redis_lock.backends.base import BaseLockBackend
from django_redis_lock.testing import RedisServer
from tests.support.helpers import locks_setting


@pytest.fixture(autouse=True)
def _locks_on_test_server(redis_url: str) -> Iterator[str]:
    """Point LOCKS at the session's server, with a key prefix unique to each test."""
    prefix = f"t{secrets.token_hex(4)}"
    with override_settings(LOCKS=locks_setting(redis_url, prefix)):
        yield prefix


@pytest.fixture
def prefix(_locks_on_test_server: str) -> str:
    """Return this test's key prefix."""
    return _locks_on_test_server


@pytest.fixture(params=["redis", "locmem"])
def using(request: pytest.FixtureRequest) -> str:
    """Run a test once on Redis and once in process: the alias to pass as ``using``.

    tests/contract/ overrides this fixture to run on every backend of the package.
    """
    return "default" if request.param == "redis" else "locmem"


@pytest.fixture
def backend(using: str) -> BaseLockBackend:
    """Return the backend under test."""
    return locks[using]


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[redis_py.Redis]:
    """A plain client of the session's server, for looking at keys directly.

    With no socket timeout: redis-py's default (5 s) would cut off a longer BLPOP, as the
    tests' waits for other processes are (and as the processes they wait for use too).
    """
    client = redis_py.Redis.from_url(redis_url, socket_timeout=None)
    yield client
    client.close()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this test alone, for tests that stop, pause or restart it."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record (and refuse) every attempt of redis-py to open a connection."""
    attempts: list[object] = []

    def refuse(self: object, *args: object, **kwargs: object) -> None:
        attempts.append(self)
        raise redis_py.ConnectionError("this test forbids connecting to Redis")

    for name in ("connect", "connect_check_health"):
        if hasattr(redis.connection.AbstractConnection, name):
            monkeypatch.setattr(redis.connection.AbstractConnection, name, refuse)
    return attempts
