"""The ``locks`` handler: lazy, cached backends that follow ``override_settings``."""

from __future__ import annotations

import math
import textwrap
import threading
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_redis_lock import InvalidLockBackendError, LockError, lock, locks
from django_redis_lock.backends.locmem import LocMemBackend
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.conf import get_locks_setting
from tests.support.helpers import python_without_settings, without_locks_setting

REDIS = "django_redis_lock.backends.redis.RedisBackend"
LOCMEM = "django_redis_lock.backends.locmem.LocMemBackend"
#: Nothing listens on port 1; no test here sends it a command anyway.
DOWN_URL = "redis://127.0.0.1:1/0"
SECRET = "s3cret"


# Building and caching -----------------------------------------------------------------------


def test_getitem__builds_once_and_caches(redis_url: str, prefix: str) -> None:
    assert locks._backends == {}
    first = locks["default"]
    assert isinstance(first, RedisBackend)
    assert (first.url, first.key_prefix) == (redis_url, prefix)
    assert locks["default"] is first
    assert isinstance(locks["locmem"], LocMemBackend)
    assert locks["default"] is first


def test_getitem__unknown_alias_names_it_and_lists_aliases() -> None:
    with pytest.raises(InvalidLockBackendError) as raised:
        locks["nope"]
    assert str(raised.value) == (
        "Could not find config for 'nope' in settings.LOCKS (aliases: 'default', 'locmem')."
    )
    assert "nope" not in locks._backends


def test_getitem__unknown_alias_with_no_aliases() -> None:
    with override_settings(LOCKS={}), pytest.raises(InvalidLockBackendError) as raised:
        locks["default"]
    assert str(raised.value) == (
        "Could not find config for 'default' in settings.LOCKS (aliases: none)."
    )


def test_invalid_lock_backend_error__is_improperly_configured_not_lock_error() -> None:
    assert issubclass(InvalidLockBackendError, ImproperlyConfigured)
    assert not issubclass(InvalidLockBackendError, LockError)
    with pytest.raises(ImproperlyConfigured) as raised:
        try:
            locks["nope"]
        except LockError:  # pragma: no cover - what must not happen
            pytest.fail("except LockError swallowed a configuration error")
    assert type(raised.value) is InvalidLockBackendError


# Following the settings ---------------------------------------------------------------------


def test_override_settings__rebuilds_backend_and_restores(redis_url: str, prefix: str) -> None:
    before = locks["default"]
    new = {
        "default": {
            "BACKEND": REDIS,
            "OPTIONS": {"url": DOWN_URL, "key_prefix": "other", "ttl": 7},
        }
    }
    with override_settings(LOCKS=new):
        inside = locks["default"]
        assert inside is not before
        assert isinstance(inside, RedisBackend)
        assert (inside.url, inside.key_prefix, inside.default_ttl) == (DOWN_URL, "other", 7.0)
        assert locks["default"] is inside
        assert list(locks) == ["default"]
        with pytest.raises(InvalidLockBackendError):
            locks["locmem"]
    after = locks["default"]
    assert after is not inside
    assert (after.url, after.key_prefix, after.default_ttl) == (redis_url, prefix, 30.0)
    assert list(locks) == ["default", "locmem"]
    assert isinstance(locks["locmem"], LocMemBackend)


def test_override_settings__other_setting_keeps_backends() -> None:
    before = locks["default"]
    with override_settings(USE_TZ=False):
        assert locks["default"] is before
    assert locks["default"] is before


def test_override_settings__backend_class_change(prefix: str) -> None:
    assert isinstance(locks["default"], RedisBackend)
    with override_settings(LOCKS={"default": {"BACKEND": LOCMEM, "OPTIONS": {"ttl": 2.5}}}):
        assert isinstance(locks["default"], LocMemBackend)
        assert locks["default"].default_ttl == 2.5
    assert isinstance(locks["default"], RedisBackend)
    assert locks["default"].key_prefix == prefix


def test_no_locks_setting__default_is_local_redis_built_without_connecting(
    redis_url: str, connections: list[object]
) -> None:
    with without_locks_setting():
        assert not hasattr(settings, "LOCKS")
        assert list(locks) == ["default"]
        backend = locks["default"]
        assert type(backend) is RedisBackend
        assert backend.url == "redis://127.0.0.1:6379/0"
        assert (backend.key_prefix, backend.default_ttl) == ("lock", 30.0)
        kwargs = backend.client.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("127.0.0.1", 6379, 0)
        assert locks["default"] is backend
    assert connections == []
    assert locks["default"].url == redis_url


# Bad configuration at run time --------------------------------------------------------------


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "30", True])
def test_getitem__bad_ttl_names_the_setting(ttl: object) -> None:
    value = {
        "default": {"BACKEND": LOCMEM},
        "x": {"BACKEND": REDIS, "OPTIONS": {"url": DOWN_URL, "ttl": ttl}},
    }
    with override_settings(LOCKS=value):
        with pytest.raises(InvalidLockBackendError) as raised:
            locks["x"]
        message = str(raised.value)
        assert message.startswith("LOCKS['x']['OPTIONS']['ttl'] ")
        assert repr(ttl) in message
        assert "x" not in locks._backends
        with pytest.raises(InvalidLockBackendError):
            locks["x"]
        assert isinstance(locks["default"], LocMemBackend)


def test_getitem__bad_backend_path_names_the_setting() -> None:
    value = {"default": {"BACKEND": "django_redis_lock.backends.nope.NopeBackend"}}
    with override_settings(LOCKS=value), pytest.raises(InvalidLockBackendError) as raised:
        locks["default"]
    assert str(raised.value).startswith(
        "LOCKS['default']['BACKEND'] 'django_redis_lock.backends.nope.NopeBackend' "
        "could not be imported"
    )


def test_getitem__locks_not_a_dict() -> None:
    with override_settings(LOCKS=["default"]), pytest.raises(InvalidLockBackendError) as raised:
        locks["default"]
    assert str(raised.value) == "LOCKS must be a dict of aliases, got list."


# Secrets ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://user:{SECRET}@127.0.0.1:1/0", "redis://user:***@127.0.0.1:1/0"),
        (f"redis://:{SECRET}@127.0.0.1:1/0", "redis://:***@127.0.0.1:1/0"),
        (
            f"rediss://user:{SECRET}@cache.internal:6380/2",
            "rediss://user:***@cache.internal:6380/2",
        ),
    ],
)
def test_repr__hides_password(url: str, shown: str, connections: list[object]) -> None:
    backend = RedisBackend(url=url)
    assert repr(backend) == f"<RedisBackend url={shown!r} prefix='lock'>"
    assert SECRET not in str(backend)
    assert backend.client.connection_pool.connection_kwargs["password"] == SECRET
    assert connections == []


def test_repr__hides_query_password(connections: list[object]) -> None:
    # redis-py reads ?password=... as the password, so it is as secret as user:password@.
    backend = RedisBackend(url=f"redis://127.0.0.1:1/0?password={SECRET}")
    assert backend.client.connection_pool.connection_kwargs["password"] == SECRET
    assert SECRET not in repr(backend)
    assert connections == []


# Laziness -----------------------------------------------------------------------------------


def test_lock__created_before_use_builds_no_backend() -> None:
    assert locks._backends == {}
    assert get_locks_setting.cache_info().currsize == 0

    handle = lock("x", ttl=5, timeout=1)

    @lock("nightly")
    def job() -> int:
        return 1

    assert locks._backends == {}
    assert get_locks_setting.cache_info().currsize == 0
    assert handle.backend is locks["default"]
    assert list(locks._backends) == ["default"]


def test_lock__at_import_time_reads_no_settings() -> None:
    # A fresh interpreter with no settings at all: lock() and @lock() must not need them.
    code = textwrap.dedent(
        """
        from django.conf import settings
        from django_redis_lock import lock, locks

        handle = lock("reports:daily", ttl=30)

        @lock("nightly")
        def job():
            return 1

        assert not settings.configured, "settings were read"
        assert locks._backends == {}, locks._backends
        print("ok")
        """
    )
    result = python_without_settings(code)
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


def test_iteration_and_all__list_aliases() -> None:
    assert list(locks) == ["default", "locmem"]
    assert locks._backends == {}
    backends = locks.all()
    assert [type(b) for b in backends] == [RedisBackend, LocMemBackend]
    assert backends[0] is locks["default"]
    assert backends[1] is locks["locmem"]
    assert locks.all() == backends


def test_iteration_and_all__follow_settings() -> None:
    value: dict[str, Any] = {
        "default": {"BACKEND": LOCMEM},
        "reports": {"BACKEND": LOCMEM, "OPTIONS": {"key_prefix": "reports"}},
        "billing": {"BACKEND": REDIS, "OPTIONS": {"url": DOWN_URL}},
    }
    with override_settings(LOCKS=value):
        assert list(locks) == ["default", "reports", "billing"]
        assert [b.key_prefix for b in locks.all()] == ["lock", "reports", "lock"]


def test_handler__threads_asking_at_once_get_one_backend() -> None:
    from django.test import override_settings

    from django_redis_lock.testing import locmem_locks

    built: list[object] = []
    barrier = threading.Barrier(8)

    def ask() -> None:
        barrier.wait(5)
        built.append(locks["racy"])

    with override_settings(LOCKS={**locmem_locks(), "racy": locmem_locks()["default"]}):
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert len(built) == 8
        assert len({id(backend) for backend in built}) == 1
