"""Rate limits, seen: ``manage.py locks rates`` (table and JSON) and the admin's Locks page,
on Redis and on LocMem."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from django_redis_lock import locks, rate_limit
from django_redis_lock.backends.base import Rate


def run(*args: str) -> tuple[int, str]:
    """Run ``manage.py locks rates *args``; return the exit status and what it wrote."""
    out = io.StringIO()
    try:
        call_command("locks", "rates", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def hit(name: str, rate: str | list[str], times: int, using: str, cost: int = 1) -> None:
    handle = rate_limit(name, rate, using=using, blocking=False, cost=cost)
    for _ in range(times):
        assert handle.acquire()


def test_rates__table_shows_rate_use_and_the_next_slot(using: str) -> None:
    hit("partner-api", ["3/10s", "100/d"], 3, using)
    hit("exports", "10/m", 2, using, cost=2)
    status, out = run("--using", using)
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == ["ALIAS", "NAME", "RATE", "USED", "NEXT", "SLOT"]
    rows = [line.split() for line in lines[1:-1]]
    assert [row[:4] for row in rows] == [
        [using, "exports", "10/m", "4/10"],
        [using, "partner-api", "3/10s", "3/3"],
        [using, "partner-api", "100/d", "3/100"],
    ]
    assert rows[0][4:] == ["now"]
    assert rows[1][4] == "in"
    assert 5 <= float(rows[1][5].rstrip("s")) <= 10
    assert lines[-1] == "2 rate limits listed."


def test_rates__json_field_by_field(using: str) -> None:
    hit("partner-api", "2/10s", 2, using)
    status, out = run("--using", using, "--json")
    document: dict[str, Any] = json.loads(out)
    assert status == 0
    (one,) = document["rate_limits"]
    assert 5 <= one.pop("free_in") <= 10
    assert one == {
        "alias": using,
        "name": "partner-api",
        "rate": "2/10s",
        "limit": 2,
        "period": 10.0,
        "used": 2,
    }
    assert document["errors"] == []
    assert document["version"] == 4


def test_rates__pattern_and_exact(using: str) -> None:
    hit("api:a", "5/m", 1, using)
    hit("api:b", "5/m", 1, using)
    hit("api*", "5/m", 1, using)
    hit("other", "5/m", 1, using)

    def names(*args: str) -> list[str]:
        status, out = run("--using", using, "--json", *args)
        assert status == 0
        return [one["name"] for one in json.loads(out)["rate_limits"]]

    assert names("--pattern", "api:*") == ["api:a", "api:b"]
    assert names("--exact", "api*") == ["api*"]
    assert names() == ["api*", "api:a", "api:b", "other"]


def test_rates__odd_names_are_shown_as_literals(using: str) -> None:
    hit("evil\x1b[31m", "5/m", 1, using)
    status, out = run("--using", using)
    assert status == 0
    assert "\x1b" not in out
    assert "'evil\\x1b[31m'" in out


def test_rates__none(using: str) -> None:
    assert run("--using", using) == (0, "No rate limit has hits in its window.\n")


@pytest.mark.parametrize("args", [["--pattern", "a", "--exact", "b"]])
def test_rates__pattern_and_exact_exclude_each_other(args: list[str]) -> None:
    status, out = run(*args)
    assert status == 2
    assert "not allowed with argument" in out


# The admin page --------------------------------------------------------------------------------

LIST_URL = "/admin/django_redis_lock/lock/"


def logged_in(*perms: str, staff: bool = True) -> Client:
    user = User.objects.create_user(f"u{len(perms)}{staff}", password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_redis_lock", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_admin__shows_rate_limits_of_every_alias() -> None:
    hit("partner-api", ["2/10s", "100/d"], 2, "default")
    hit("<b>exports</b>", "10/m", 1, "locmem")
    response = logged_in("view_lock").get(LIST_URL)
    assert response.status_code == 200
    shown = [
        (row.alias, row.info.name, str(row.info.rate), row.used, row.next_slot.split(" ")[0])
        for row in response.context["rate_rows"]
    ]
    assert shown == [
        ("default", "partner-api", "2/10s", "2/2", "in"),
        ("default", "partner-api", "100/d", "2/100", "now"),
        ("locmem", "<b>exports</b>", "10/m", "1/10", "now"),
    ]
    page = response.content.decode()
    assert '<table id="rate_list"' in page
    assert "&lt;b&gt;exports&lt;/b&gt;" in page
    assert "<b>exports" not in page


@pytest.mark.django_db
def test_admin__rate_limits_follow_the_search_and_the_alias() -> None:
    hit("api:a", "5/m", 1, "default")
    hit("other", "5/m", 1, "default")
    hit("api:b", "5/m", 1, "locmem")
    client = logged_in("view_lock")
    names = [row.info.name for row in client.get(LIST_URL, {"q": "api:*"}).context["rate_rows"]]
    assert names == ["api:a", "api:b"]
    one_alias = client.get(LIST_URL, {"alias": "locmem"}).context["rate_rows"]
    assert [row.info.name for row in one_alias] == ["api:b"]


@pytest.mark.django_db
def test_admin__a_rate_limit_per_ip_shows_a_page_of_them_and_says_so() -> None:
    backend = locks["default"]
    for n in range(80):  # more than the admin's page of 50
        assert backend.admit(f"view:search:10.0.0.{n}", [Rate(5, 60.0)]).admitted
    client = logged_in("view_lock")
    response = client.get(LIST_URL)
    assert len(response.context["rate_rows"]) == 50
    assert "The first 50 rate limits are shown: search by name" in response.content.decode()
    narrowed = client.get(LIST_URL, {"q": "view:search:10.0.0.1*"})
    assert len(narrowed.context["rate_rows"]) == 11  # .1 and .10 to .19
    assert "The first" not in narrowed.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize(("perms", "staff"), [(("view_lock",), False), ((), True)])
def test_admin__rate_limits_need_staff_and_the_view_permission(
    perms: tuple[str, ...], staff: bool
) -> None:
    hit("secret-api", "5/m", 1, "default")
    response = logged_in(*perms, staff=staff).get(LIST_URL)
    assert response.status_code in (302, 403)
    assert b"secret-api" not in response.content
