"""A password in a LOCKS URL never shows, whatever its characters, wherever a URL is shown.

Each password below is pasted into a URL as users do, without percent-encoding. Every run of
five or more letters and digits in it is distinctive, so a fragment that leaks (urllib once
read a piece of a password as the port, and its error quoted it) is found in any output:
system checks, configuration errors, ``repr``, log lines, ``manage.py locks`` (text and
JSON) and the admin page.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.test import Client, override_settings
from redis.connection import parse_url

from django_redis_lock import BackendUnavailableError, InvalidLockBackendError, LockError, lock
from django_redis_lock.backends._redis.connections import redact_url
from django_redis_lock.backends.cluster import RedisClusterBackend
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.backends.redlock import RedlockBackend
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually

REDIS = "django_redis_lock.backends.redis.RedisBackend"
REDLOCK = "django_redis_lock.backends.redlock.RedlockBackend"
LOCMEM = "django_redis_lock.backends.locmem.LocMemBackend"
LIST_URL = "/admin/django_redis_lock/lock/"

PASSWORDS = {
    "base64": "Kx9fQ2mZ7pLw/Ab8Cd4+Ef3Gh==",
    "slash-at": "Pa9Ss@Kv2Wq/W9xTq",  # the user:p@ss/w@host of the report
    "hash": "Hq4Rt#Wz2Yv5",
    "question": "Jm5Np7?Bx3Lc=Gh6Tk",
    "at": "Gd8Wm@Yk6Rt@Hn3Ls",
    "colon": "Fr3Dq:Vz1Mk:Op8Ij",
    "percent": "Ty6Ua%Ua4Ce%2FQe9Lp",
    "plus-equals": "Vb5Nc+Nc2Xs=Xs7Df",
    "ampersand": "Mn6Bv&Bv9Pq=Pq1Wr",
    "spaces": "Lo2Zi Zi5Ux Ux8Km",
    "unicode": "Ñø7Üm日本語Pw3",
    "control": "Cc4Rd\x1bRd9Es\x9bEs2Zz\x07Zz5Qa",
    "ansi": "Aq1Rg\x1b[31mRg7Bn\x1b[0mBn4Yu",
    "tab-newline": "Tb4Nl\tNl5Cr\r\nCr6Xx",
}
SHAPES = {
    "user": "redis://alice:{password}@127.0.0.1:{port}/0",
    "no-user": "redis://:{password}@127.0.0.1:{port}/0",
    "query": "redis://127.0.0.1:{port}/0?password={password}",
}
CASES = [
    pytest.param(password, shape, id=f"{name}-{kind}")
    for name, password in PASSWORDS.items()
    for kind, shape in SHAPES.items()
]


def cases_of_every_password() -> list[tuple[str, str]]:
    """Return every (password, URL shape) pair."""
    return [(password, shape) for password in PASSWORDS.values() for shape in SHAPES.values()]


def pieces(password: str) -> list[str]:
    """Return the fragments of ``password`` that no output may contain."""
    found = re.findall(r"[^\W_]{5,}", password)
    assert found, password
    return found


def assert_hidden(password: str, *texts: str) -> None:
    """Fail if any text holds a piece of ``password``."""
    for text in texts:
        for piece in pieces(password):
            assert piece not in text, f"{piece!r} of the password is shown in: {text!r}"


def url_of(shape: str, password: str, port: int) -> str:
    return shape.format(password=password, port=port)


def check_output(*args: str) -> str:
    """Return what ``manage.py check`` writes and raises."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("check", *args, stdout=out, stderr=err)
    except SystemCheckError as exc:
        return out.getvalue() + err.getvalue() + str(exc)
    return out.getvalue() + err.getvalue()


def command_output(*args: str) -> str:
    """Return what ``manage.py locks`` writes and raises."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("locks", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue() + err.getvalue() + str(exc)
    return out.getvalue() + err.getvalue()


def described(make: Any) -> str:
    """Return the repr of the backend ``make()`` builds, or the error it raises."""
    try:
        backend = make()
    except (InvalidLockBackendError, BackendUnavailableError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        return repr(backend) + str(getattr(backend, "location", ""))
    finally:
        backend.close()


@pytest.mark.parametrize(("password", "shape"), CASES)
def test_redact_url__hides_every_piece(password: str, shape: str) -> None:
    url = url_of(shape, password, 6379)
    shown = redact_url(url)
    assert "***" in shown
    assert_hidden(password, shown, redact_url(repr(url)))


@pytest.mark.parametrize(("password", "shape"), CASES)
def test_checks_errors_and_repr__hide_every_piece(password: str, shape: str) -> None:
    # Nothing listens on ports 1 to 3: a backend that is built fails when it connects.
    urls = [url_of(shape, password, port) for port in (1, 2, 3)]
    setting = {
        "default": {"BACKEND": REDIS, "OPTIONS": {"url": urls[0]}},
        "redlock": {"BACKEND": REDLOCK, "OPTIONS": {"urls": urls}},
    }
    with override_settings(LOCKS=setting):
        checks = check_output("--deploy", "--tag", "django_redis_lock")
        connection = check_output("--deploy", "--tag", "django_redis_lock_connection")
    assert "***" in checks + connection  # either E008, or E011 naming the server
    outputs = [
        checks,
        connection,
        described(lambda: RedisBackend(url=urls[0])),
        described(lambda: RedlockBackend(urls=urls)),
        described(lambda: RedisClusterBackend(url=urls[0], socket_connect_timeout=1)),
        described(lambda: RedisBackend(url=urls[0], sentinels=["127.0.0.1:1"], service_name="m")),
    ]
    assert_hidden(password, *outputs)


def accepted(url: str) -> bool:
    """Return whether a backend can be built on ``url`` (else the URL is refused)."""
    try:
        RedisBackend(url=url).close()
    except InvalidLockBackendError:
        return False
    return True


@pytest.fixture
def server_of_every_password() -> Iterator[RedisServer]:
    """A server on which each password, as redis-py reads it from its URL, logs in."""
    with RedisServer() as server:
        urls = [
            url_of(shape, password, server.port) for password, shape in cases_of_every_password()
        ]
        sent = {parse_url(url).get("password") for url in urls if accepted(url)}
        client = redis_py.Redis.from_url(server.url)
        grants: dict[str, Any] = {"keys": ["*"], "channels": ["*"], "commands": ["+@all"]}
        passwords = [f"+{one}" for one in sorted(sent - {None})]
        client.acl_setuser("alice", enabled=True, passwords=passwords, **grants)
        client.acl_setuser("default", enabled=True, passwords=passwords, **grants)
        client.close()
        yield server


@pytest.mark.django_db
def test_command_admin_and_logs__hide_every_piece(
    server_of_every_password: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_of_every_password
    cases = {
        f"a{index}": (password, url_of(shape, password, server.port))
        for index, (password, shape) in enumerate(cases_of_every_password())
    }
    live = {alias: case for alias, case in cases.items() if accepted(case[1])}
    refused = {alias: case for alias, case in cases.items() if alias not in live}
    assert live
    assert refused
    setting: dict[str, Any] = {"default": {"BACKEND": LOCMEM}}
    for alias, (_, url) in cases.items():
        setting[alias] = {"BACKEND": REDIS, "OPTIONS": {"url": url, "key_prefix": prefix}}
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_lock"))
    client = Client()
    client.force_login(user)
    caplog.set_level(logging.DEBUG, logger="django_redis_lock")
    outputs: list[str] = []

    with override_settings(LOCKS={"default": setting["default"], **{a: setting[a] for a in live}}):
        held = [lock("job", using=alias, ttl=0.9, auto_renew=True) for alias in live]
        assert all(one.acquire(blocking=False) for one in held)
        outputs += [command_output(*args) for args in (["list"], ["list", "--json"])]
        shown = command_output("show", "job")
        assert shown.count("***") >= len(live)  # each alias's server, password hidden
        outputs += [shown, command_output("show", "job", "--json")]
        page = client.get(LIST_URL)
        assert len(page.context["rows"]) == len(live)
        outputs.append(page.content.decode())

        server.stop()  # now every call fails, and says where
        eventually(lambda: all(one.lost for one in held))
        down = command_output("list")
        assert down.count("***") >= len(live)
        outputs += [down, command_output("list", "--json"), command_output("show", "job")]
        outputs.append(client.get(LIST_URL).content.decode())
        for one in held:
            with contextlib.suppress(LockError):
                one.release()
    logged = [logging.Formatter().format(record) for record in caplog.records]
    assert any("Could not renew" in line and "***" in line for line in logged)
    outputs += logged

    with override_settings(
        LOCKS={"default": setting["default"], **{a: setting[a] for a in refused}}
    ):
        for alias in refused:
            outputs.append(command_output("list", "--using", alias))
            outputs.append(command_output("show", "job", "--using", alias))
            page = client.get(LIST_URL, {"alias": alias})  # reported on the page, as it says:
            assert page.status_code == 200
            assert "could not be listed" in page.content.decode()
            outputs.append(page.content.decode())

    for password in PASSWORDS.values():
        assert_hidden(password, *outputs)
