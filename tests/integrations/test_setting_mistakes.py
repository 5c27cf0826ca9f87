"""Mistakes in ``LOCKS`` that used to pass quietly, and servers that say what they want.

A misspelt key beside ``BACKEND`` (E015), ``decode_responses`` in ``OPTIONS`` (E007 with a
reason), no ``LOCKS`` at all (errors say the URL is the default), and a server that wants a
password (errors say so, never quoting one).
"""

from __future__ import annotations

import io
import socket
from typing import Any

import pytest
import redis as redis_py
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_redis_lock import BackendUnavailableError, InvalidLockBackendError, lock, locks
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.testing import RedisServer
from tests.support.helpers import without_locks_setting

REDIS = "django_redis_lock.backends.redis.RedisBackend"
SECRET = "Pw:@/?#%&=s3cret"


def lock_checks() -> list[tuple[str | None, str, str | None]]:
    return [
        (m.id, m.msg, m.hint)
        for m in run_checks()
        if (m.id or "").startswith("django_redis_lock.")
    ]


# E015: keys beside BACKEND and OPTIONS -------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("OPTION", "An alias takes 'BACKEND' and 'OPTIONS' only (did you mean 'OPTIONS'?)."),
        ("options", "An alias takes 'BACKEND' and 'OPTIONS' only (did you mean 'OPTIONS'?)."),
        ("TIMEOUT", "An alias takes 'BACKEND' and 'OPTIONS' only."),
    ],
)
def test_check__unknown_key_beside_backend__E015(key: str, hint: str, redis_url: str) -> None:
    value = {"default": {"BACKEND": REDIS, key: {"url": redis_url}}}
    with override_settings(LOCKS=value):
        assert lock_checks() == [
            ("django_redis_lock.E015", f"LOCKS['default'] has unknown keys: {key!r}.", hint)
        ]
        # The handler refuses it too: no lock ever goes to the default server instead.
        with pytest.raises(InvalidLockBackendError, match=r"unknown keys: "):
            locks["default"]


def test_check__unknown_key_and_bad_options__both_reported__E015_E009() -> None:
    value = {"default": {"BACKEND": REDIS, "OPTIONS": {"ttl": 0}, "TTL": 5}}
    with override_settings(LOCKS=value):
        assert [id_ for id_, _, _ in lock_checks()] == [
            "django_redis_lock.E015",
            "django_redis_lock.E009",
        ]


def test_check_command__misspelt_options__fails_naming_the_key() -> None:
    value = {"default": {"BACKEND": REDIS, "OPTION": {"url": "redis://127.0.0.1:1/0"}}}
    with override_settings(LOCKS=value), pytest.raises(SystemCheckError) as raised:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    assert "django_redis_lock.E015" in str(raised.value)
    assert "'OPTION'" in str(raised.value)


# decode_responses ----------------------------------------------------------------------------


def test_check__decode_responses_option__E007_with_its_reason_and_refused_by_the_constructor() -> (
    None
):
    message = (
        "LOCKS['default']['OPTIONS']['decode_responses'] cannot be set for RedisBackend: the "
        "backend reads Redis's replies as bytes and decodes them itself."
    )
    hint = "Remove 'decode_responses' from OPTIONS."
    value = {"default": {"BACKEND": REDIS, "OPTIONS": {"decode_responses": True}}}
    with override_settings(LOCKS=value):
        assert lock_checks() == [("django_redis_lock.E007", message, hint)]
    with pytest.raises(InvalidLockBackendError) as raised:
        RedisBackend(url="redis://127.0.0.1:1/0", decode_responses=True)
    assert (
        str(raised.value)
        == message.replace("LOCKS['default']['OPTIONS']", "RedisBackend OPTIONS") + " " + hint
    )


# No LOCKS at all -----------------------------------------------------------------------------


def _something_listens_on_6379() -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", 6379)) == 0


def test_no_locks_setting__an_unreachable_default_says_it_is_the_default() -> None:
    if _something_listens_on_6379():
        pytest.skip("a server listens on 127.0.0.1:6379, so the default would be reached")
    with without_locks_setting():
        with pytest.raises(BackendUnavailableError) as raised:
            lock("x", blocking=False).acquire()
    assert str(raised.value).startswith(
        "Redis at redis://127.0.0.1:6379/0 (the default, because settings.LOCKS is not set) "
        "is unavailable: "
    )


def test_locks_setting__an_unreachable_server_is_not_called_the_default() -> None:
    value = {"default": {"BACKEND": REDIS, "OPTIONS": {"url": "redis://127.0.0.1:1/0"}}}
    with override_settings(LOCKS=value), pytest.raises(BackendUnavailableError) as raised:
        lock("x", blocking=False).acquire()
    assert "default" not in str(raised.value)


# A server that wants a password --------------------------------------------------------------


@pytest.fixture
def password_server(own_server: RedisServer) -> RedisServer:
    client = redis_py.Redis.from_url(own_server.url)
    client.config_set("requirepass", SECRET)
    client.close()
    return own_server


def _acquire_error(url: str) -> str:
    backend = RedisBackend(url=url)
    try:
        with pytest.raises(BackendUnavailableError) as raised:
            with override_settings(LOCKS={"default": {"BACKEND": REDIS, "OPTIONS": {"url": url}}}):
                lock("x", blocking=False).acquire()
        return str(raised.value)
    finally:
        backend.close()


def test_password_required__none_given__the_error_says_a_password_is_needed(
    password_server: RedisServer,
) -> None:
    message = _acquire_error(password_server.url)
    assert f"Redis at {password_server.url} requires a password, and none was given" in message
    assert "OPTIONS['password']" in message


@pytest.mark.parametrize("given", ["wrong", SECRET + "x"])
def test_password_required__wrong_one_given__the_error_says_it_was_refused_and_hides_it(
    password_server: RedisServer, given: str
) -> None:
    from urllib.parse import quote

    url = f"redis://:{quote(given, safe='')}@127.0.0.1:{password_server.port}/0"
    message = _acquire_error(url)
    assert "refused the user name or password it was given" in message
    for part in (given, quote(given, safe=""), "s3cret"):
        assert part not in message


def test_password_required__the_deploy_check_says_a_password_is_needed(
    password_server: RedisServer,
) -> None:
    value: dict[str, Any] = {
        "default": {"BACKEND": REDIS, "OPTIONS": {"url": password_server.url}}
    }
    with override_settings(LOCKS=value):
        messages = [
            m
            for m in run_checks(include_deployment_checks=True)
            if m.id == "django_redis_lock.E011"
        ]
    assert len(messages) == 1
    assert "requires a password, and none was given" in messages[0].msg
