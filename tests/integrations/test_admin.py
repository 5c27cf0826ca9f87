"""The admin's Locks page: who may see it, what it lists, paging, and owner-checked release."""

from __future__ import annotations

import os
import re
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.admin import site as admin_site
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import reverse

from django_redis_lock import locks, rwlock
from django_redis_lock._core.lock_arguments import HOST
from django_redis_lock.admin import LockAdmin
from django_redis_lock.backends.base import AcquireRequest, ReleaseRequest, holder_metadata
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.models import Lock
from django_redis_lock.testing import RedisServer, locmem_locks
from tests.support.helpers import locks_setting, read_write_holds

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/django_redis_lock/lock/"
RELEASE_URL = "/admin/django_redis_lock/lock/release/"
ODD_NAMES = [
    "with space",
    "star*name",
    "what?",
    "[bracketed]",
    "back\\slash",
    "new\nline",
    "carriage\r\nreturn",
    "ünïcødé:名前",
    "a/b/../c",
    "percent%20&amp=1#frag",
]


def hold(
    alias: str, name: str, owner: str, *, ttl: float = 60, data: dict[str, Any] | None = None
) -> None:
    """Make ``owner`` hold ``name`` on ``alias``, as a web process on host web-1 would."""
    metadata = holder_metadata(host="web-1", pid=4321, thread="MainThread", data=data)
    result = locks[alias].acquire(name, owner, AcquireRequest(ttl=ttl, metadata=metadata))
    assert result.acquired


def holders(alias: str, name: str) -> list[tuple[str, int]]:
    """Return ``(owner, holds)`` of every holder of ``name`` on ``alias``."""
    return [(info.owner, info.holds) for info in locks[alias].lock_info(name)]


def make_user(username: str, *perms: str, staff: bool = True) -> User:
    """Create a user with these codenames of django_redis_lock's permissions."""
    user = User.objects.create_user(username, password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_redis_lock", codename=codename)
        )
    return user


def logged_in(user: User, *, enforce_csrf_checks: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf_checks)
    client.force_login(user)
    return client


@pytest.fixture
def viewer() -> Client:
    return logged_in(make_user("viewer", "view_lock"))


@pytest.fixture
def releaser_user() -> User:
    return make_user("releaser", "view_lock", "release_lock")


@pytest.fixture
def releaser(releaser_user: User) -> Client:
    return logged_in(releaser_user)


def rows(response: HttpResponse) -> list[tuple[str, str, str]]:
    """Return ``(alias, name, owner)`` of each row the list shows."""
    return [(row.alias, row.info.name, row.info.owner) for row in response.context["rows"]]


def texts(response: HttpResponse) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def release_url(response: HttpResponse, name: str) -> str:
    """Return the "Release…" link of the row of lock ``name``."""
    (url,) = [row.release_url for row in response.context["rows"] if row.info.name == name]
    assert url
    return str(url)


def csrf_post(client: Client, url: str) -> HttpResponse:
    """Show the confirmation page at ``url``, then submit its form as a browser would."""
    page = client.get(url)
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())
    assert token
    response: HttpResponse = client.post(url, {"csrfmiddlewaretoken": token.group(1)})
    return response


# Who may see the page ----------------------------------------------------------------------


def test_list__anonymous_is_sent_to_login(client: Client) -> None:
    response = client.get(LIST_URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


@pytest.mark.parametrize("staff", [False, None], ids=["non-staff", "anonymous"])
def test_release__non_staff_is_sent_to_login(staff: bool | None) -> None:
    hold("default", "reports:nightly", "holder-a")
    client = Client()
    if staff is not None:
        client.force_login(make_user("visitor", "view_lock", "release_lock", staff=staff))
    query = "?alias=default&name=reports%3Anightly&owner=holder-a"
    for response in (
        client.get(LIST_URL),
        client.get(RELEASE_URL + query),
        client.post(RELEASE_URL + query),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/?next=")
    assert holders("default", "reports:nightly") == [("holder-a", 1)]


def test_list__staff_without_view_permission_is_refused() -> None:
    client = logged_in(make_user("staff"))
    assert client.get(LIST_URL).status_code == 403
    index = client.get("/admin/")
    assert LIST_URL not in index.content.decode()


def test_list__release_permission_alone_shows_nothing() -> None:
    hold("default", "reports:nightly", "holder-a")
    client = logged_in(make_user("releaser-only", "release_lock"))
    assert client.get(LIST_URL).status_code == 403
    query = {"alias": "default", "name": "reports:nightly", "owner": "holder-a"}
    assert client.get(RELEASE_URL, query).status_code == 403
    assert holders("default", "reports:nightly") == [("holder-a", 1)]


def test_index__shows_locks_under_the_app_for_view_permission(viewer: Client) -> None:
    page = viewer.get("/admin/").content.decode()
    assert 'href="/admin/django_redis_lock/"' in page
    assert f'href="{LIST_URL}"' in page
    assert ">Locks<" in page
    assert "/admin/django_redis_lock/lock/add/" not in page


def test_admin__offers_no_add_change_or_delete(viewer: Client) -> None:
    admin = LockAdmin(Lock, admin_site)
    request = viewer.get(LIST_URL).wsgi_request
    assert not admin.has_add_permission(request)
    assert not admin.has_change_permission(request)
    assert not admin.has_delete_permission(request)
    assert admin.has_view_permission(request)
    for url in ("add/", "reports:nightly/change/", "reports:nightly/delete/"):
        assert viewer.get(LIST_URL + url).status_code == 404


# What the list shows -----------------------------------------------------------------------


def test_list__shows_holders_of_every_alias(viewer: Client) -> None:
    hold("default", "reports:nightly", "owner-redis", data={"job": "nightly"})
    hold("default", "reports:nightly", "owner-redis")
    hold("locmem", "imports:42", "owner-locmem", ttl=600)

    response = viewer.get(LIST_URL)

    assert response.status_code == 200
    assert sorted(rows(response)) == [
        ("default", "reports:nightly", "owner-redis"),
        ("locmem", "imports:42", "owner-locmem"),
    ]
    by_alias = {row.alias: row for row in response.context["rows"]}
    assert by_alias["default"].info.holds == 2
    assert by_alias["default"].holder == "web-1, pid 4321, thread MainThread"
    assert by_alias["default"].metadata_short == "job=nightly"
    assert 50 < by_alias["default"].info.ttl <= 60
    assert 590 < by_alias["locmem"].info.ttl <= 600
    page = response.content.decode()
    for text in ("reports:nightly", "imports:42", "owner-redis", "owner-locmem", "web-1"):
        assert text in page
    assert re.search(r'data-ttl="(59|60)\.\d{3}">(59\.\d|60\.0)s<', page)
    assert re.search(r'data-ttl="(599|600)\.\d{3}">(9m\d\ds|10m00s)<', page)
    assert "django_redis_lock/locks.js" in page
    # A user who may only look gets no release links.
    assert "Release…" not in page
    assert "release/" not in page


def test_list__celery_holder_is_named_by_its_task(viewer: Client) -> None:
    data = {
        "task_id": "96438504-1cc1",
        "task_name": "shop.tasks.bill_customer",
        "hostname": "celery@vm",
        "worker_pid": 3911,
        "args": "customer_id=42",
    }
    hold("default", "celery:shop.tasks.bill_customer:42", "celery:96438504-1cc1:3911", data=data)

    (row,) = viewer.get(LIST_URL).context["rows"]

    assert row.holder == (
        "Celery task shop.tasks.bill_customer [96438504-1cc1] on celery@vm, pid 3911"
    )


def test_list__names_may_break_after_separators_and_stay_escaped(viewer: Client) -> None:
    hold("default", "celery:shop.tasks.bill_customer:42", "owner-1")
    hold("default", "<b>x</b>&y.z", "owner-2")

    page = viewer.get(LIST_URL).content.decode()

    assert ">celery:<wbr>shop.<wbr>tasks.<wbr>bill_customer:<wbr>42</th>" in page
    assert ">&lt;b&gt;x&lt;/<wbr>b&gt;&amp;y.<wbr>z</th>" in page
    assert "<b>x</b>" not in page


def test_list__one_alias(viewer: Client) -> None:
    hold("default", "a", "owner-1")
    hold("locmem", "b", "owner-2")
    assert rows(viewer.get(LIST_URL, {"alias": "locmem"})) == [("locmem", "b", "owner-2")]
    assert rows(viewer.get(LIST_URL, {"alias": "default"})) == [("default", "a", "owner-1")]
    response = viewer.get(LIST_URL, {"alias": "nope"})
    assert texts(response) == ["There is no alias 'nope' in settings.LOCKS."]
    assert sorted(rows(response)) == [("default", "a", "owner-1"), ("locmem", "b", "owner-2")]


@pytest.mark.parametrize(
    ("search", "found"),
    [
        ({"q": "report"}, {"reports:daily", "reports:nightly", "reports:*", "old-report"}),
        ({"q": "old-"}, {"old-report"}),
        ({"q": "reports:*"}, {"reports:daily", "reports:nightly", "reports:*"}),
        ({"q": "reports:*", "exact": "1"}, {"reports:*"}),
        ({"q": "reports:?aily"}, {"reports:daily"}),
        ({"q": "[o]ld-*"}, {"old-report"}),
        ({"q": "nothing-like-it"}, set()),
    ],
)
def test_list__search(viewer: Client, search: dict[str, str], found: set[str]) -> None:
    for index, name in enumerate(["reports:daily", "reports:nightly", "reports:*", "old-report"]):
        hold("default", name, f"owner-{index}")
        hold("locmem", name, f"owner-{index}")

    response = viewer.get(LIST_URL, search)

    assert {name for _, name, _ in rows(response)} == found
    assert {alias for alias, _, _ in rows(response)} == ({"default", "locmem"} if found else set())


def test_list__auto_refresh(viewer: Client) -> None:
    page = viewer.get(LIST_URL, {"refresh": "5"}).content.decode()
    assert '<meta http-equiv="refresh" content="5">' in page
    for bad in ("0", "-1", "abc", "100000"):
        assert (
            'http-equiv="refresh"' not in viewer.get(LIST_URL, {"refresh": bad}).content.decode()
        )


@pytest.mark.parametrize("refused", [False, True], ids=["unreachable", "refused"])
def test_list__unreachable_or_refused_alias_is_reported_and_others_listed(
    viewer: Client, prefix: str, refused: bool
) -> None:
    setting = locks_setting("redis://127.0.0.1:1/0", prefix)
    if refused:
        setting["default"]["OPTIONS"]["ttl"] = 0  # refused: manage.py check says E009
    with override_settings(LOCKS=setting):
        hold("locmem", "b", "owner-2")
        response = viewer.get(LIST_URL)
    assert response.status_code == 200
    assert rows(response) == [("locmem", "b", "owner-2")]
    (message,) = texts(response)
    assert message.startswith("Locks on alias 'default' could not be listed:")
    assert ("'ttl'" in message) is refused


def test_list__a_stopped_server_shows_only_its_error_not_no_held_locks(
    viewer: Client, own_server: RedisServer, prefix: str
) -> None:
    setting = locks_setting(own_server.url, prefix)
    own_server.stop()
    with override_settings(LOCKS=setting):
        everything = viewer.get(LIST_URL)
        stopped_only = viewer.get(LIST_URL, {"alias": "default"})
        listed_only = viewer.get(LIST_URL, {"alias": "locmem"})

    # Nothing could be listed: the page says why, and claims nothing about held locks.
    page = stopped_only.content.decode()
    (message,) = texts(stopped_only)
    assert message.startswith("Locks on alias 'default' could not be listed:")
    assert "could not be listed" in page
    assert "No held locks" not in page
    # Another alias was listed, and holds nothing: said of the aliases that were listed.
    page = everything.content.decode()
    assert "could not be listed" in page
    assert "No held locks on the aliases that could be listed." in page
    assert "No held locks." in listed_only.content.decode()


# Paging ------------------------------------------------------------------------------------


def follow_pages(client: Client, url: str, params: dict[str, str]) -> list[list[tuple[str, str]]]:
    """Return the ``(alias, name)`` rows of each page, following "Next page" to the end."""
    pages: list[list[tuple[str, str]]] = []
    response = client.get(url, params)
    while True:
        assert response.status_code == 200
        pages.append([(alias, name) for alias, name, _ in rows(response)])
        next_url = response.context["next_url"]
        if not next_url:
            return pages
        assert f'href="{next_url.replace("&", "&amp;")}"' in response.content.decode()
        assert len(pages) < 20, "paging does not end"
        response = client.get(next_url)


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_list__pages_through_more_locks_than_a_page(
    viewer: Client, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def listing_everything(*args: object, **kwargs: object) -> None:
        raise AssertionError("the page read every key")

    # Redis pages with its own SCAN cursor; the whole listing is never read.
    monkeypatch.setattr(RedisBackend, "iter_locks", listing_everything)
    names = {f"job:{i:03d}" for i in range(120)}
    for name in names:
        hold(alias, name, "owner")

    pages = follow_pages(viewer, LIST_URL, {"alias": alias, "q": "job:*"})

    seen = [name for page in pages for _, name in page]
    assert sorted(seen) == sorted(names)  # each lock once
    assert len(pages) >= 2
    assert all(len(page) < 120 for page in pages)
    assert all(len(page) >= LockAdmin.list_per_page for page in pages[:-1])


def test_list__pages_go_on_from_one_alias_to_the_next(viewer: Client) -> None:
    expected = set()
    for alias in ("default", "locmem"):
        for i in range(70):
            hold(alias, f"job:{i:03d}", "owner")
            expected.add((alias, f"job:{i:03d}"))

    pages = follow_pages(viewer, LIST_URL, {"q": "job:*"})

    seen = [row for page in pages for row in page]
    assert sorted(seen) == sorted(expected)
    assert len(pages) >= 3
    last = viewer.get(LIST_URL, {"at": "locmem", "cursor": "", "page": "9", "q": "job:*"})
    assert "Page 9" in last.content.decode()


def test_list__page_that_ends_an_alias_goes_on_with_the_next(
    viewer: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LockAdmin, "list_per_page", 2)
    with override_settings(LOCKS=locmem_locks("first", "second")):
        for alias, name in [("first", "a"), ("first", "b"), ("second", "c")]:
            hold(alias, name, "owner")

        first = viewer.get(LIST_URL)
        assert rows(first) == [("first", "a", "owner"), ("first", "b", "owner")]
        assert parse_qs(urlsplit(first.context["next_url"]).query) == {
            "at": ["second"],
            "page": ["2"],
        }
        second = viewer.get(first.context["next_url"])
        assert rows(second) == [("second", "c", "owner")]
        assert second.context["next_url"] == ""
        assert "Last page" in second.content.decode()


# GET changes nothing -----------------------------------------------------------------------


def test_get__list_and_confirmation_change_nothing(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    hold("locmem", "reports:nightly", "holder-b")
    before = locks["default"].lock_info("reports:nightly")[0]

    response = releaser.get(LIST_URL)
    for name_alias in ("default", "locmem"):
        url = next(r.release_url for r in response.context["rows"] if r.alias == name_alias)
        page = releaser.get(url)
        assert page.status_code == 200
        assert releaser.head(url).status_code == 200

    assert holders("default", "reports:nightly") == [("holder-a", 1)]
    assert holders("locmem", "reports:nightly") == [("holder-b", 1)]
    after = locks["default"].lock_info("reports:nightly")[0]
    assert after.fencing_token == before.fencing_token
    assert after.ttl <= before.ttl
    assert not LogEntry.objects.exists()


# Releasing ---------------------------------------------------------------------------------


def test_release__confirmation_page_shows_what_will_be_released(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a", data={"job": "nightly"})
    url = release_url(releaser.get(LIST_URL), "reports:nightly")

    page = releaser.get(url).content.decode()

    for text in ("default", "reports:nightly", "holder-a", "web-1, pid 4321", "&quot;job&quot;"):
        assert text in page
    assert "its holder is not told: it keeps running" in page
    assert "may still write" in page
    assert 'data-ttl="' in page
    assert 'method="post"' in page
    assert "csrfmiddlewaretoken" in page


def test_release__without_release_permission_is_refused(viewer: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    query = "?alias=default&name=reports%3Anightly&owner=holder-a"
    assert viewer.get(RELEASE_URL + query).status_code == 403
    assert viewer.post(RELEASE_URL + query).status_code == 403
    assert holders("default", "reports:nightly") == [("holder-a", 1)]


def test_release__without_csrf_token_is_refused(releaser_user: User) -> None:
    hold("default", "reports:nightly", "holder-a")
    client = logged_in(releaser_user, enforce_csrf_checks=True)
    url = release_url(client.get(LIST_URL), "reports:nightly")

    response = client.post(url)

    assert response.status_code == 403
    assert holders("default", "reports:nightly") == [("holder-a", 1)]
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_release__confirmed_frees_the_lock_and_is_logged(releaser_user: User, alias: str) -> None:
    hold(alias, "reports:nightly", "holder-a")
    hold(alias, "reports:nightly", "holder-a")  # two holds: both go
    hold(alias, "reports:daily", "holder-a")
    client = logged_in(releaser_user, enforce_csrf_checks=True)
    listing = client.get(LIST_URL, {"alias": alias, "q": "reports:*"})
    url = release_url(listing, "reports:nightly")

    response = csrf_post(client, url)

    assert response.status_code == 302
    assert response["Location"] == f"{LIST_URL}?alias={alias}&q=reports%3A%2A"
    assert holders(alias, "reports:nightly") == []
    assert holders(alias, "reports:daily") == [("holder-a", 1)]
    after = client.get(response["Location"])
    assert texts(after) == [
        f"Released lock 'reports:nightly' on alias '{alias}', held by owner 'holder-a' "
        "(web-1, pid 4321, thread MainThread)."
    ]
    assert rows(after) == [(alias, "reports:daily", "holder-a")]
    entry = LogEntry.objects.get()
    assert entry.user == releaser_user
    assert entry.action_flag == DELETION
    assert entry.content_type == ContentType.objects.get_for_model(Lock)
    assert entry.object_repr == "reports:nightly"
    assert entry.object_id == "reports:nightly"
    assert entry.get_change_message() == (
        f"Force-released lock 'reports:nightly' on alias '{alias}', held by owner 'holder-a' "
        "(web-1, pid 4321, thread MainThread)."
    )


def test_release__of_a_lock_that_changed_hands_releases_nothing(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    url = release_url(releaser.get(LIST_URL), "reports:nightly")
    assert releaser.get(url).status_code == 200
    # Between the confirmation page and the click, the lock is freed and taken by another.
    assert locks["default"].force_release("reports:nightly") == 1
    hold("default", "reports:nightly", "holder-b")

    response = releaser.post(url)

    assert response.status_code == 302
    assert holders("default", "reports:nightly") == [("holder-b", 1)]
    assert texts(releaser.get(response["Location"])) == [
        "Nothing was released: lock 'reports:nightly' on alias 'default' is no longer held by "
        "owner 'holder-a' (it was released, expired or taken by another owner since the "
        "confirmation page was shown)."
    ]
    assert not LogEntry.objects.exists()


def test_release__page_of_a_lock_no_longer_held_goes_back_to_the_list(releaser: Client) -> None:
    query = {"alias": "default", "name": "gone", "owner": "holder-a"}
    response = releaser.get(RELEASE_URL, query)
    assert response.status_code == 302
    assert response["Location"] == LIST_URL
    assert texts(response) == [
        "Lock 'gone' on alias 'default' is no longer held by owner 'holder-a'; "
        "there is nothing to release."
    ]


@pytest.mark.parametrize(
    "query", [{}, {"alias": "nope", "name": "n", "owner": "o"}, {"alias": "default", "name": "n"}]
)
def test_release__link_that_names_no_lock(releaser: Client, query: dict[str, str]) -> None:
    response = releaser.post(RELEASE_URL + "?" + "&".join(f"{k}={v}" for k, v in query.items()))
    assert response.status_code == 302
    assert texts(response) == ["That link does not name a lock: alias, name and owner."]


@pytest.mark.parametrize("refused", [False, True], ids=["unreachable", "refused"])
def test_release__unreachable_or_refused_alias_releases_nothing(
    releaser: Client, prefix: str, refused: bool
) -> None:
    setting = locks_setting("redis://127.0.0.1:1/0", prefix)
    if refused:
        setting["default"]["OPTIONS"]["ttl"] = 0  # refused: manage.py check says E009
    with override_settings(LOCKS=setting):
        query = "?alias=default&name=reports%3Anightly&owner=holder-a"
        for response in (releaser.get(RELEASE_URL + query), releaser.post(RELEASE_URL + query)):
            assert response.status_code == 302
            assert texts(response)[-1].startswith("Nothing was released: ")
    assert not LogEntry.objects.exists()


def test_release__other_methods_are_not_allowed(releaser: Client) -> None:
    assert releaser.put(RELEASE_URL).status_code == 405


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_odd_names__are_listed_and_released(releaser: Client, alias: str) -> None:
    for name in ODD_NAMES:
        hold(alias, name, f"owner of {name}")
    hold(alias, "starXname", "decoy")

    listing = releaser.get(LIST_URL, {"alias": alias})
    assert sorted(name for _, name, _ in rows(listing)) == sorted([*ODD_NAMES, "starXname"])
    exact = releaser.get(LIST_URL, {"alias": alias, "q": "star*name", "exact": "1"})
    assert [name for _, name, _ in rows(exact)] == ["star*name"]

    for name in ODD_NAMES:
        url = release_url(listing, name)
        assert parse_qs(urlsplit(url).query)["name"] == [name]
        page = releaser.get(url)
        assert page.status_code == 200
        assert page.context["row"].info.name == name
        assert releaser.post(url).status_code == 302
        assert holders(alias, name) == [], name
    assert holders(alias, "starXname") == [("decoy", 1)]
    assert LogEntry.objects.count() == len(ODD_NAMES)
    assert {e.object_repr for e in LogEntry.objects.all()} == {n[:200] for n in ODD_NAMES}


# Migration and admin sites -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # SQLite's schema editor refuses to run in a transaction
def test_migration__creates_no_table() -> None:
    executor = MigrationExecutor(connection)
    migration = executor.loader.get_migration("django_redis_lock", "0001_initial")
    statements = executor.loader.collect_sql([(migration, False)])
    # Only comments ("-- Create model Lock", "-- (no-op)"): no statement runs at all.
    assert statements
    assert [s for s in statements if not s.lstrip().startswith("--")] == []
    assert Lock._meta.db_table not in connection.introspection.table_names()
    codenames = set(
        Permission.objects.filter(content_type__app_label="django_redis_lock").values_list(
            "codename", flat=True
        )
    )
    assert codenames == {"view_lock", "release_lock"}


@override_settings(ROOT_URLCONF="tests.support.admin_urls")
def test_second_admin_site__lists_and_releases(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    ops_list = reverse("ops:django_redis_lock_lock_changelist")
    assert ops_list == "/ops/django_redis_lock/lock/"

    listing = releaser.get(ops_list)
    assert rows(listing) == [("default", "reports:nightly", "holder-a")]
    url = release_url(listing, "reports:nightly")
    assert url.startswith("/ops/django_redis_lock/lock/release/?")
    page = releaser.get(url).content.decode()
    assert 'href="/ops/django_redis_lock/lock/"' in page

    response = releaser.post(url)

    assert response["Location"] == ops_list
    assert holders("default", "reports:nightly") == []
    assert releaser.get("/ops/").status_code == 200
    assert 'href="/ops/django_redis_lock/lock/"' in releaser.get("/ops/").content.decode()


# A hold kept for its min_hold window -------------------------------------------------------


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_min_hold__the_list_says_held_until_by_min_hold(viewer: Client, alias: str) -> None:
    hold(alias, "reports:nightly", "holder-a", data={"job": "nightly"})
    window = ReleaseRequest(holds=1, min_hold=60)
    assert locks[alias].release("reports:nightly", "holder-a", window) == 0

    response = viewer.get(LIST_URL)

    assert rows(response) == [(alias, "reports:nightly", "min_hold:holder-a")]
    page = response.content.decode()
    (row,) = re.findall(r'<tr class="lock-row lock-min-hold".*?</tr>', page, re.DOTALL)
    assert re.search(
        r"held until \S+ \S+ UTC by min_hold \(released by web-1, pid 4321, thread MainThread\)"
        r"<br><code[^>]*>min_hold:holder-a</code>",
        row,
    ), row
    assert '<td class="lock-holds">0</td>' in row


def test_min_hold__a_releaser_can_free_the_window(releaser_user: User) -> None:
    hold("default", "reports:nightly", "holder-a")
    window = ReleaseRequest(holds=1, min_hold=60)
    assert locks["default"].release("reports:nightly", "holder-a", window) == 0
    client = logged_in(releaser_user, enforce_csrf_checks=True)
    url = release_url(client.get(LIST_URL), "reports:nightly")
    assert "by min_hold" in client.get(url).content.decode()

    response = csrf_post(client, url)

    assert response.status_code == 302
    assert holders("default", "reports:nightly") == []


# Waiters -----------------------------------------------------------------------------------


def queue(alias: str, name: str, *owners: str) -> None:
    """Register ``owners`` as waiting for ``name`` on ``alias``, in this order."""
    for number, owner in enumerate(owners):
        meta = holder_metadata(host=f"worker-{number}", pid=100 + number, thread="MainThread")
        request = AcquireRequest(ttl=60, metadata=meta, wait=30, fair=number == 0)
        assert not locks[alias].acquire(name, owner, request).acquired


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_waiters__the_list_counts_them_per_lock(viewer: Client, alias: str) -> None:
    hold(alias, "reports:nightly", "holder-a")
    hold(alias, "reports:daily", "holder-b")
    queue(alias, "reports:nightly", "w-1", "w-2", "w-3")

    response = viewer.get(LIST_URL, {"alias": alias})

    page = response.content.decode()
    cells = re.findall(r'<td class="lock-waiting">([^<]*)</td>', page)
    by_name = {row.info.name: row.waiting_text for row in response.context["rows"]}
    assert by_name == {"reports:nightly": "3 waiting", "reports:daily": "none"}
    assert sorted(cells) == ["3 waiting", "none"]
    assert "<span>Waiting</span>" in page


def test_waiters__the_confirmation_page_lists_them_in_queue_order(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    queue("default", "reports:nightly", "w-first", "w-second", "w-third")
    url = release_url(releaser.get(LIST_URL), "reports:nightly")

    page = releaser.get(url).content.decode()

    assert "3 waiting, in queue order:" in page
    items = re.findall(r"<li>(.*?)<br><code[^>]*>(.*?)</code></li>", page, re.S)
    assert [owner for _, owner in items] == ["w-first", "w-second", "w-third"]
    assert items[0][0].startswith("worker-0, pid 100, thread MainThread: next, fair, waiting ")
    assert items[1][0].startswith("worker-1, pid 101, thread MainThread: #2 in line, waiting ")
    assert items[2][0].startswith("worker-2, pid 102, thread MainThread: #3 in line, waiting ")


def test_waiters__the_confirmation_page_says_none_without_waiters(releaser: Client) -> None:
    hold("default", "reports:nightly", "holder-a")
    url = release_url(releaser.get(LIST_URL), "reports:nightly")

    page = releaser.get(url).content.decode()

    assert re.search(r'<td class="lock-waiters">none</td>', page)


# Read-write locks --------------------------------------------------------------------------


def owner_cells(page: str) -> list[str]:
    """Return the description in each Owner cell of the list, unescaped."""
    found = re.findall(r'<td class="lock-owner">(.*?)<br>', page, re.S)
    return [unescape(text) for text in found]


@pytest.mark.parametrize("alias", ["default", "locmem"])
def test_list__read_write_lock_shows_mode_and_readers(viewer: Client, alias: str) -> None:
    hold(alias, "plain", "holder-a")
    with read_write_holds("report:42", using=alias, readers=3, waiting_writer=True):
        with rwlock("report:43", using=alias).write():
            response = viewer.get(LIST_URL, {"alias": alias})

    where = f"{HOST}, pid {os.getpid()}, thread"
    described = sorted((row.info.name, row.holder) for row in response.context["rows"])
    assert described == [
        ("plain", "web-1, pid 4321, thread MainThread"),
        ("report:42", f"{where} reader-0 (read, 3 readers)"),
        ("report:42", f"{where} reader-1 (read, 3 readers)"),
        ("report:42", f"{where} reader-2 (read, 3 readers)"),
        ("report:43", f"{where} MainThread (write)"),
    ]
    page = response.content.decode()
    assert sorted(owner_cells(page)) == sorted(holder for _, holder in described)
    by_name = {row.info.name: row.waiting_text for row in response.context["rows"]}
    assert by_name == {"plain": "none", "report:42": "1 waiting", "report:43": "none"}


def test_release__confirmation_page_shows_a_readers_mode_and_the_writer_waiting(
    releaser: Client,
) -> None:
    with read_write_holds("report:42", using="default", readers=2, waiting_writer=True):
        listing = releaser.get(LIST_URL)
        page = releaser.get(listing.context["rows"][0].release_url).content.decode()

    where = f"{HOST}, pid {os.getpid()}, thread"
    assert re.search(re.escape(where) + r" reader-[01] \(read, 2 readers\)<br><code>", page)
    assert "1 waiting, in queue order:" in page
    [(waiter, _)] = re.findall(r"<li>(.*?)<br><code[^>]*>(.*?)</code></li>", page, re.S)
    assert waiter.startswith(f"{where} writer (write): next, waiting ")


def test_release__of_a_reader_is_logged_with_its_mode(releaser_user: User) -> None:
    client = logged_in(releaser_user, enforce_csrf_checks=True)
    with read_write_holds("report:42", using="default", readers=2):
        listing = client.get(LIST_URL)
        row = min(listing.context["rows"], key=lambda row: row.info.thread)
        response = csrf_post(client, row.release_url)
        left = [info.thread for info in locks["default"].lock_info("report:42")]

    assert response.status_code == 302
    assert left == ["reader-1"]
    assert LogEntry.objects.get().get_change_message() == (
        f"Force-released lock 'report:42' on alias 'default', held by owner {row.info.owner!r} "
        f"({HOST}, pid {os.getpid()}, thread reader-0 (read, 2 readers))."
    )
