"""The client libraries a Redis backend speaks through, and the connection of a CACHES alias.

The contract runs whole on the valkey client (the ``valkey_client`` alias); this module holds
what the contract does not reach: each of valkey-py's own errors said as redis-py's are, and
``OPTIONS["cache"]`` on Django's RedisCache and on django-redis, against a real server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from django.core.cache import caches
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, alock, lock, locks
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing import RedisServer

DJANGO_CACHE = "django.core.cache.backends.redis.RedisCache"
DJANGO_REDIS = "django_redis.cache.RedisCache"
PASSWORD = "s3cret"


def valkey_url(url: str) -> str:
    return url.replace("redis://", "valkey://", 1)


def backend_of(alias: str) -> RedisBackend:
    backend = locks[alias]
    assert isinstance(backend, RedisBackend)
    return backend


@pytest.fixture
def with_password(own_server: RedisServer) -> Iterator[RedisServer]:
    """The test's own server, asking for a password from now on."""
    client = redis_py.Redis.from_url(own_server.url)
    client.config_set("requirepass", PASSWORD)
    client.close()
    yield own_server
    client = redis_py.Redis.from_url(own_server.url, password=PASSWORD)
    client.config_set("requirepass", "")
    client.close()


# The valkey client's own errors ---------------------------------------------------------------


def test_valkey_client__unreachable_server__is_backend_unavailable() -> None:
    backend = RedisBackend(url="valkey://127.0.0.1:1/0", socket_connect_timeout=0.5)
    with pytest.raises(BackendUnavailableError, match="is unavailable: Error 111"):
        backend.acquire("down", "owner", AcquireRequest(ttl=5))


def test_valkey_client__wrong_password__says_what_the_server_wants(
    with_password: RedisServer,
) -> None:
    url = valkey_url(with_password.url)
    with pytest.raises(BackendUnavailableError, match="requires a password, and none was given"):
        RedisBackend(url=url).ping()
    wrong = RedisBackend(url=url, password="wrong")
    with pytest.raises(BackendUnavailableError, match="refused the user name or password"):
        wrong.ping()
    RedisBackend(url=url, password=PASSWORD).ping()


def test_valkey_client__server_that_lost_its_scripts__is_sent_them_again(
    own_server: RedisServer,
) -> None:
    backend = RedisBackend(url=valkey_url(own_server.url))
    assert backend.acquire("flushed", "holder", AcquireRequest(ttl=5)).acquired
    client = redis_py.Redis.from_url(own_server.url)
    client.script_flush()
    # EVALSHA answers NOSCRIPT (valkey-py's NoScriptError): the source is sent instead.
    assert backend.release("flushed", "holder") == 0
    client.script_flush()
    assert backend.renew([("other", "holder", 5.0)]) == [None]  # the pipelined path
    client.close()


def test_valkey_client__handoff_with_the_claim_sent_along(redis_url: str, prefix: str) -> None:
    with override_settings(
        LOCKS={
            "default": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"url": valkey_url(redis_url), "key_prefix": prefix},
            }
        }
    ):
        holder = lock("handoff", ttl=10)
        assert holder.acquire()
        backend = backend_of("default")
        assert not backend.acquire("handoff", "waiter", AcquireRequest(ttl=5, wait=5)).acquired
        holder.release()
        result = backend.wait_and_claim(
            "handoff", "waiter", 2, AcquireRequest(ttl=5, wait=5, claim=True)
        )
        assert result.acquired
        assert backend.release("handoff", "waiter") == 0


# OPTIONS["cache"] ------------------------------------------------------------------------------


def cache_and_locks(backend: str, location: str, prefix: str, **options: Any) -> Any:
    """Return settings with CACHES['default'] at ``location`` and LOCKS on its connection."""
    return override_settings(
        CACHES={"default": {"BACKEND": backend, "LOCATION": location, "OPTIONS": options}},
        LOCKS={
            "default": {
                "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
                "OPTIONS": {"cache": "default", "key_prefix": prefix},
            }
        },
    )


@pytest.mark.parametrize("cache_backend", [DJANGO_CACHE, DJANGO_REDIS])
def test_cache__locks_live_on_the_caches_server_and_database(
    cache_backend: str, own_server: RedisServer, prefix: str
) -> None:
    location = own_server.url.replace("/0", "/3")
    with cache_and_locks(cache_backend, location, prefix):
        caches["default"].set("cached", 1)
        backend = backend_of("default")
        assert backend.location == f"{location} (the connection of CACHES['default'])"
        with lock("cache:one") as held:
            assert held.owned()
            client = redis_py.Redis.from_url(location)
            assert client.exists(backend.key("cache:one")) == 1
            client.close()
        assert caches["default"].get("cached") == 1


@pytest.mark.parametrize("cache_backend", [DJANGO_CACHE, DJANGO_REDIS])
async def test_cache__alock_through_the_caches_connection(
    cache_backend: str, own_server: RedisServer, prefix: str
) -> None:
    with cache_and_locks(cache_backend, own_server.url, prefix):
        async with alock("cache:async") as held:
            assert await held.owned()
        await locks["default"].aclose()


@pytest.mark.parametrize("cache_backend", [DJANGO_CACHE, DJANGO_REDIS])
def test_cache__credentials_come_from_the_cache_and_are_never_shown(
    cache_backend: str, with_password: RedisServer, prefix: str
) -> None:
    location = with_password.url.replace("redis://", f"redis://:{PASSWORD}@", 1)
    with cache_and_locks(cache_backend, location, prefix):
        backend = backend_of("default")
        with lock("cache:auth") as held:
            assert held.owned()
        assert PASSWORD not in repr(backend)
        assert PASSWORD not in backend.location
        assert PASSWORD not in repr(vars(backend))


@pytest.mark.parametrize("cache_backend", [DJANGO_CACHE, DJANGO_REDIS])
def test_cache__tls_and_pool_size_come_from_the_cache_timeouts_and_retries_do_not(
    cache_backend: str, prefix: str
) -> None:
    # Read from the cache's pool without connecting: nothing listens there.
    options = (
        {"ssl_ca_certs": "/ca.pem", "max_connections": 7, "socket_timeout": 0.1}
        if cache_backend == DJANGO_CACHE
        else {
            "CONNECTION_POOL_KWARGS": {"ssl_ca_certs": "/ca.pem", "max_connections": 7},
            "SOCKET_TIMEOUT": 0.1,
        }
    )
    location = "rediss://app:pw@cache.invalid:6380/2"
    with cache_and_locks(cache_backend, location, prefix, **options):
        backend = backend_of("default")
        pool = backend.client.connection_pool
        assert pool.connection_class is redis_py.SSLConnection
        assert pool.max_connections == 7
        kwargs = pool.connection_kwargs
        expected = {"host": "cache.invalid", "port": 6380, "db": 2, "username": "app"}
        assert {key: kwargs[key] for key in expected} == expected
        assert (kwargs["password"], kwargs["ssl_ca_certs"]) == ("pw", "/ca.pem")
        assert kwargs["socket_timeout"] == 5.0  # the backend's own, for its waits
        assert kwargs["retry"].get_retries() == 0  # a re-sent acquire could count twice
        assert backend.location == (
            "rediss://cache.invalid:6380/2 (the connection of CACHES['default'])"
        )


def test_cache__the_valkey_client_on_a_caches_connection(
    own_server: RedisServer, prefix: str
) -> None:
    with cache_and_locks(DJANGO_CACHE, own_server.url, prefix):
        options = {"cache": "default", "key_prefix": prefix, "client": "valkey"}
        backend = RedisBackend(**options)
        assert type(backend.client).__module__.startswith("valkey.")
        assert backend.acquire("cache:valkey", "owner", AcquireRequest(ttl=5)).acquired
        assert backend.release("cache:valkey", "owner") == 0
        backend.close()
