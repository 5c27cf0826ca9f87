"""The django-health-check plugin, on real redis-server processes: stopped, frozen, back."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import RequestFactory, override_settings
from health_check.base import HealthCheck, HealthCheckResult
from health_check.exceptions import ServiceUnavailable
from health_check.views import HealthCheckView

from django_redis_lock import LockError, lock
from django_redis_lock.contrib.health_check import LockBackend, LockRenewal
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually, python_without_settings

pytestmark = pytest.mark.slow

SOCKET_TIMEOUT = 1.5
PASSWORD = "hunter2-not-shown"


def redis_alias(url: str, prefix: str, **options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": url, "key_prefix": prefix, **options},
    }


@pytest.fixture
def primary(own_server: RedisServer, prefix: str) -> Iterator[RedisServer]:
    """LOCKS gains the alias 'primary', on a server of this test, with a short socket timeout."""
    setting = {
        "default": redis_alias("redis://127.0.0.1:1/0", prefix),
        "primary": redis_alias(own_server.url, prefix, socket_timeout=SOCKET_TIMEOUT),
    }
    with override_settings(LOCKS=setting):
        yield own_server


def result_of(check: HealthCheck) -> HealthCheckResult:
    """Run ``check`` as django-health-check's view does (with its time budget)."""
    result: HealthCheckResult = asyncio.run(check.get_result())
    return result


def render(*checks: Any, fmt: str = "text") -> tuple[int, str]:
    view = HealthCheckView.as_view(checks=checks)
    response = asyncio.run(view(RequestFactory().get("/health/", {"format": fmt})))
    return response.status_code, response.content.decode()


# One alias answers a ping ----------------------------------------------------------------


def test_backend__passes_when_redis_answers(primary: RedisServer) -> None:
    result = result_of(LockBackend(alias="primary"))

    assert result.error is None


def test_backend__a_frozen_server_fails_within_the_socket_timeout(primary: RedisServer) -> None:
    primary.pause()
    try:
        result = result_of(LockBackend(alias="primary"))
    finally:
        primary.resume()

    # The backend's own timeout ends the ping, not django-health-check's budget (5 s).
    assert isinstance(result.error, ServiceUnavailable)
    assert SOCKET_TIMEOUT * 0.9 <= result.time_taken < SOCKET_TIMEOUT + 1.0
    assert "LOCKS alias 'primary'" in str(result.error)
    assert "Timed out after" not in str(result.error)


def test_backend__a_stopped_server_fails_then_passes_when_it_is_back(
    primary: RedisServer,
) -> None:
    port = primary.port
    primary.stop()

    result = result_of(LockBackend(alias="primary"))
    assert isinstance(result.error, ServiceUnavailable)
    assert "LOCKS alias 'primary'" in str(result.error)
    assert f"127.0.0.1:{port}" in str(result.error)
    assert result.time_taken < SOCKET_TIMEOUT + 1.0

    with RedisServer(port=port):
        assert result_of(LockBackend(alias="primary")).error is None


def test_backend__a_frozen_server_fails_then_passes_when_it_resumes(
    primary: RedisServer,
) -> None:
    primary.pause()
    try:
        assert isinstance(result_of(LockBackend(alias="primary")).error, ServiceUnavailable)
    finally:
        primary.resume()

    assert result_of(LockBackend(alias="primary")).error is None


def test_backend__an_unknown_alias_fails_naming_it(primary: RedisServer) -> None:
    result = result_of(LockBackend(alias="nowhere"))

    assert isinstance(result.error, ServiceUnavailable)
    assert "LOCKS alias 'nowhere'" in str(result.error)


def test_backend__never_shows_the_password(own_server: RedisServer, prefix: str) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{own_server.port}/0"
    setting = {
        "default": redis_alias(url, prefix, socket_timeout=SOCKET_TIMEOUT),
        "query": redis_alias(
            f"redis://127.0.0.1:{own_server.port}/0?password={PASSWORD}",
            prefix,
            socket_timeout=SOCKET_TIMEOUT,
        ),
        "option": redis_alias(
            own_server.url, prefix, socket_timeout=SOCKET_TIMEOUT, password=PASSWORD
        ),
    }
    own_server.stop()
    checks = [LockBackend(alias=alias) for alias in setting]
    with override_settings(LOCKS=setting):
        results = [result_of(check) for check in checks]
        status, text = render(*((LockBackend, {"alias": alias}) for alias in setting))
        _, as_json = render(*((LockBackend, {"alias": alias}) for alias in setting), fmt="json")
        _, metrics = render(LockBackend, fmt="openmetrics")

    assert all(isinstance(result.error, ServiceUnavailable) for result in results)
    assert status == 500
    assert [f"LOCKS alias {alias!r}" in text for alias in setting] == [True] * 3
    shown = [text, as_json, metrics]
    shown += [f"{r.error!s} {r.check!r} {r.check.labels}" for r in results]
    assert [PASSWORD in each for each in shown] == [False] * len(shown)
    assert "***" in text


def test_view__reports_the_alias_that_failed(primary: RedisServer, prefix: str) -> None:
    checks = [(LockBackend, {"alias": "primary"}), LockRenewal]
    with override_settings(
        LOCKS={
            "default": redis_alias(primary.url, prefix),
            "primary": redis_alias(primary.url, prefix, socket_timeout=SOCKET_TIMEOUT),
        }
    ):
        assert render(*checks, fmt="json")[0] == 200
        primary.pause()
        try:
            status, body = render(*checks, fmt="json")
        finally:
            primary.resume()
        assert render(*checks, fmt="json")[0] == 200

    report = json.loads(body)
    assert status == 500
    assert report["LockRenewal()"] == "OK"
    assert report["LockBackend(alias='primary')"].startswith(
        "Unavailable: LOCKS alias 'primary': "
    )


# This process's renewal keeps up ---------------------------------------------------------


def test_renewal__passes_while_held_leases_are_renewed(primary: RedisServer) -> None:
    with lock("health:renewed", using="primary", ttl=1.5):
        # Time for two renewals (due every 0.5 s): unrenewed, the lease would be 0.7 s late.
        time.sleep(1.2)
        result = result_of(LockRenewal(margin=datetime.timedelta(seconds=0.3)))

    assert result.error is None


def test_renewal__fails_while_a_renewal_waits_for_a_frozen_server(primary: RedisServer) -> None:
    # Due after 2 s; its renewal then waits up to the socket timeout for an answer, and so
    # does each retry, until the lease ends after 6 s.
    check = LockRenewal(margin=datetime.timedelta(seconds=0.5))
    failures: list[str] = []

    def behind() -> bool:
        error = result_of(check).error
        if error is not None:
            failures.append(str(error))
        return error is not None

    with lock("health:frozen", using="primary", ttl=6):
        assert result_of(check).error is None
        primary.pause()
        try:
            eventually(behind, timeout=5)
        finally:
            primary.resume()
        # The delayed round trip is answered once the server runs: on schedule again.
        eventually(lambda: result_of(check).error is None, timeout=SOCKET_TIMEOUT + 1)

    assert failures[0].startswith(
        "Unavailable: Lease renewal is behind schedule by more than 0.5 s: "
        "LOCKS alias 'primary' by "
    )


def test_renewal__passes_with_no_lease_held() -> None:
    assert result_of(LockRenewal()).error is None


def test_renewal__a_lease_lost_to_a_frozen_server_fails_until_the_server_answers(
    primary: RedisServer,
) -> None:
    # Once the lease has ended, no lease is held: the server is still frozen all the same.
    check = LockRenewal(margin=datetime.timedelta(seconds=0.5))
    lost = threading.Event()
    held = lock(
        "health:lost", using="primary", ttl=3, auto_renew=True, on_lost=lambda _: lost.set()
    )
    held.acquire()
    try:
        assert result_of(check).error is None
        primary.pause()
        try:
            assert lost.wait(10), "the lease was never reported lost"
            failed = [result_of(check).error, result_of(check).error]
        finally:
            primary.resume()
        eventually(lambda: result_of(check).error is None, timeout=SOCKET_TIMEOUT + 2)
    finally:
        with contextlib.suppress(LockError):
            held.release()

    assert [isinstance(error, ServiceUnavailable) for error in failed] == [True, True]
    assert str(failed[0]).startswith(
        "Unavailable: LOCKS alias 'primary' has not answered since a lease on it was lost "
    )


def test_renewal__a_loss_on_a_server_that_locks_no_longer_uses_is_forgotten(
    own_server: RedisServer, prefix: str
) -> None:
    check = LockRenewal()
    with override_settings(LOCKS={"default": redis_alias(own_server.url, prefix)}):
        held = lock("health:taken", ttl=30)
        for answers in (True, False):
            held.acquire()
            held.backend.force_release("health:taken")
            with pytest.raises(LockError):
                held.release()  # the loss is reported here
            if not answers:
                own_server.stop()
            assert (result_of(check).error is None) is answers

    # LOCKS is the suite's again: the stopped server is nobody's backend any more.
    assert result_of(check).error is None


# Listed in INSTALLED_APPS ----------------------------------------------------------------


LABELS = {
    "django_redis_lock": "django_redis_lock",
    "health_check": "health_check",
    "django_redis_lock.contrib.health_check": "django_redis_lock_health_check",
    "django_redis_lock.contrib.prometheus": "django_redis_lock_prometheus",
}


@pytest.mark.parametrize(
    "apps",
    [
        ["health_check", "django_redis_lock.contrib.health_check"],
        ["django_redis_lock.contrib.health_check", "health_check"],
        ["health_check", "django_redis_lock.contrib.prometheus"],
        ["django_redis_lock.contrib.prometheus", "django_redis_lock.contrib.health_check"],
    ],
    ids=["after-health_check", "before-health_check", "prometheus", "both"],
)
def test_app__listed_in_installed_apps_starts_with_a_label_of_its_own(apps: list[str]) -> None:
    done = python_without_settings(
        "import django\n"
        "from django.apps import apps\n"
        "from django.conf import settings\n"
        f"settings.configure(INSTALLED_APPS=['django_redis_lock', *{apps!r}])\n"
        "django.setup()\n"
        "for config in apps.get_app_configs():\n"
        "    print(config.name, config.label)\n"
    )

    assert done.returncode == 0, done.stderr
    labels = dict(line.split() for line in done.stdout.splitlines())
    assert labels == {name: LABELS[name] for name in ["django_redis_lock", *apps]}
