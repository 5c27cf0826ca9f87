"""Fixtures of the Redis backend tests that run on a server of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis as redis_py

from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing import RedisServer


@pytest.fixture
def own_backend(own_server: RedisServer) -> Iterator[RedisBackend]:
    """A RedisBackend on the test's own server."""
    backend = RedisBackend(url=own_server.url)
    yield backend
    backend.close()


@pytest.fixture
def stats(own_server: RedisServer) -> Iterator[redis_py.Redis]:
    """A plain client of the test's own server, for its keys and its INFO."""
    client = redis_py.Redis.from_url(own_server.url)
    yield client
    client.close()
