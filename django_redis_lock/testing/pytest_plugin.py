"""pytest fixtures for code that uses django-redis-lock.

Enable with ``pytest_plugins = ["django_redis_lock.testing.pytest_plugin"]`` in a ``conftest.py``
(or ``-p django_redis_lock.testing.pytest_plugin``). Fixtures:

``redis_server``
    A throw-away :class:`~django_redis_lock.testing.RedisServer`, one per test session.
``redis_url``
    Its URL.
``redis_locks``
    ``LOCKS`` pointed at that server, with a key prefix unique to the test, for the test's
    duration (``settings`` fixture of pytest-django not needed).

Under pytest-xdist, each worker starts its servers on ports of its own, so that a server one
worker stops and starts again on its port never finds another worker's server there.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from . import RedisServer, _use_port_share


def pytest_configure(config: pytest.Config) -> None:
    """Give an xdist worker (``PYTEST_XDIST_WORKER=gw<n>``) its own share of the ports."""
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    _use_port_share(int(worker.group(1)) if worker else None)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Start one throw-away redis-server for the whole session."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """Return the URL of the session's throw-away redis-server."""
    return redis_server.url


@pytest.fixture
def redis_locks(redis_url: str) -> Iterator[dict[str, Any]]:
    """Point LOCKS at the throw-away server, with a key prefix of this test's own."""
    from django.test import override_settings

    value = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": redis_url, "key_prefix": f"test-{secrets.token_hex(4)}"},
        }
    }
    with override_settings(LOCKS=value):
        yield value
