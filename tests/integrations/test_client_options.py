"""OPTIONS ``client`` (check E016) and ``cache`` (check E017): every message, exactly."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, InvalidLockBackendError
from django_redis_lock.backends.cluster import RedisClusterBackend
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.backends.redlock import RedlockBackend

REDIS = "django_redis_lock.backends.redis.RedisBackend"
REDLOCK = "django_redis_lock.backends.redlock.RedlockBackend"
WHERE = "LOCKS['default']['OPTIONS']"
HINT_CLIENT = (
    "'redis' (the default) uses redis-py; 'valkey' uses valkey-py "
    '(pip install "django-redis-lock[valkey]"), as a valkey:// URL does by itself.'
)
HINT_CACHE = (
    "Name an alias whose BACKEND is django.core.cache.backends.redis.RedisCache or "
    "django_redis.cache.RedisCache (or a subclass), or give url instead."
)
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "redis": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
    },
    "db": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "cache"},
}


def problems_of(backend: str, **options: Any) -> list[tuple[str, str, str]]:
    """Return (id, message, hint) of this package's checks for one 'default' alias."""
    with override_settings(LOCKS={"default": {"BACKEND": backend, "OPTIONS": options}}):
        return [
            (m.id or "", m.msg, m.hint or "")
            for m in run_checks()
            if (m.id or "").startswith("django_redis_lock.")
        ]


# E016: the client library ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message", "hint"),
    [
        (
            {"client": "redis-py"},
            f"{WHERE}['client'] must be 'redis' or 'valkey', got 'redis-py'.",
            HINT_CLIENT,
        ),
        (
            {"client": 1},
            f"{WHERE}['client'] must be 'redis' or 'valkey', got 1.",
            HINT_CLIENT,
        ),
        (
            {"client": "redis", "url": "valkeys://:s3cret@cache.internal:6380/0"},
            f"{WHERE}['client'] is 'redis', but 'valkeys://:***@cache.internal:6380/0' is a "
            "valkey:// URL, which redis-py cannot read.",
            "Remove 'client' (a valkey:// URL picks the valkey client), or write the URL as "
            "redis:// (rediss:// for valkeys://).",
        ),
        (
            {"client": "valkey", "ssl_include_verify_flags": []},
            f"{WHERE} sets options that the valkey client's connections do not take: "
            "'ssl_include_verify_flags'.",
            "Remove them, or use the client they belong to.",
        ),
    ],
)
def test_check__bad_client__E016(options: dict[str, Any], message: str, hint: str) -> None:
    assert problems_of(REDIS, **options) == [("django_redis_lock.E016", message, hint)]
    with pytest.raises(InvalidLockBackendError, match=re.escape(message.split("]", 2)[-1])):
        RedisBackend(**options)


def test_check__redlock_told_redis_for_a_valkey_url__E016() -> None:
    urls = ["redis://a/0", "valkey://b/0", "redis://c/0"]
    assert problems_of(REDLOCK, urls=urls, client="redis") == [
        (
            "django_redis_lock.E016",
            f"{WHERE}['client'] is 'redis', but 'valkey://b/0' is a valkey:// URL, which "
            "redis-py cannot read.",
            "Remove 'client' (a valkey:// URL picks the valkey client), or write the URL as "
            "redis:// (rediss:// for valkeys://).",
        )
    ]


@pytest.mark.parametrize(
    "options",
    [
        {"client": "valkey"},
        {"client": "redis"},
        {"url": "valkey://cache.internal:6379/0"},
        {"url": "valkeys://cache.internal:6380/0", "ssl_ca_certs": "/ca.pem"},
        {"url": "redis://cache.internal:6379/0", "client": "valkey"},
        {"url": "unix:///run/valkey.sock?db=1", "client": "valkey"},
    ],
)
def test_check__client_that_fits__no_E016(options: dict[str, Any]) -> None:
    assert problems_of(REDIS, **options) == []


def test_client__valkey_url_picks_the_valkey_client_and_redis_is_the_default() -> None:
    # Clients are built without connecting: nothing listens there.
    assert RedisBackend(url="valkey://127.0.0.1:1/0").family.name == "valkey"
    assert RedisBackend(url="redis://127.0.0.1:1/0").family.name == "redis"
    assert RedisBackend(url="redis://127.0.0.1:1/0", client="valkey").family.name == "valkey"
    valkeys = RedisBackend(url="valkeys://127.0.0.1:1/0")
    assert valkeys.client.connection_pool.connection_class.__name__ == "SSLConnection"


def test_client__valkey_cluster_unreachable__is_backend_unavailable() -> None:
    # valkey-py's own exception (ValkeyClusterException) is caught and said as redis-py's is.
    with pytest.raises(BackendUnavailableError, match="Valkey Cluster cannot be connected"):
        RedisClusterBackend(url="valkey://127.0.0.1:1/0", socket_connect_timeout=0.5)


def test_client__each_redlock_master_follows_its_own_url_unless_client_is_given() -> None:
    urls = ["redis://127.0.0.1:1/0", "valkey://127.0.0.1:2/0", "redis://127.0.0.1:3/0"]
    backend = RedlockBackend(urls=urls)
    assert [node.family.name for node in backend.nodes] == ["redis", "valkey", "redis"]
    told = RedlockBackend(urls=urls, client="valkey")
    assert {node.family.name for node in told.nodes} == {"valkey"}
    backend.close()
    told.close()


# E017: the connection of a CACHES alias -------------------------------------------------------


@override_settings(CACHES=CACHES)
@pytest.mark.parametrize(
    ("options", "message", "hint"),
    [
        (
            {"cache": "sessions"},
            f"{WHERE}['cache'] names the cache 'sessions', which is not an alias of CACHES.",
            "Name an alias of CACHES ('default', 'redis', 'db'), or give url instead.",
        ),
        (
            {"cache": ["redis"]},
            f"{WHERE}['cache'] names the cache ['redis'], which is not an alias of CACHES.",
            "Name an alias of CACHES ('default', 'redis', 'db'), or give url instead.",
        ),
        (
            {"cache": "default"},
            f"{WHERE}['cache'] names CACHES['default'], whose BACKEND "
            "'django.core.cache.backends.locmem.LocMemCache' is not a Redis cache that locks "
            "can connect through.",
            HINT_CACHE,
        ),
        (
            {"cache": "db"},
            f"{WHERE}['cache'] names CACHES['db'], whose BACKEND "
            "'django.core.cache.backends.db.DatabaseCache' is not a Redis cache that locks can "
            "connect through.",
            HINT_CACHE,
        ),
        (
            {"cache": "redis", "url": "redis://127.0.0.1:1/0"},
            f"{WHERE}['cache'] cannot be combined with 'url': the cache's connection says "
            "where the server is.",
            "Remove 'url', or 'cache'.",
        ),
        (
            {"cache": "redis", "sentinels": ["127.0.0.1:26379"], "service_name": "m"},
            f"{WHERE}['cache'] cannot be combined with 'sentinels', 'service_name': the "
            "cache's connection says where the server is.",
            "Remove 'sentinels' and 'service_name', or 'cache'.",
        ),
    ],
)
def test_check__bad_cache__E017(options: dict[str, Any], message: str, hint: str) -> None:
    assert problems_of(REDIS, **options) == [("django_redis_lock.E017", message, hint)]
    with pytest.raises(InvalidLockBackendError, match=re.escape(message.split("]", 2)[-1])):
        RedisBackend(**options)


@override_settings(CACHES=CACHES)
def test_check__cache_of_redis__no_E017_and_only_the_redis_backend_takes_it() -> None:
    assert problems_of(REDIS, cache="redis") == []
    assert problems_of(REDIS, cache="redis", client="valkey") == []
    cluster = problems_of("django_redis_lock.backends.cluster.RedisClusterBackend", cache="redis")
    assert [(found[0], found[1]) for found in cluster] == [
        (
            "django_redis_lock.E007",
            f"{WHERE} has unknown keys for RedisClusterBackend: 'cache'.",
        )
    ]
