"""The admin's Locks page in a real browser: a live TTL countdown, then confirmed release;
long names, owners and metadata wrap so the table fits a 1280 px wide window.

Runs headless Chromium through Playwright against pytest-django's live server. Skipped, with
the way to install them, when either is missing. A screenshot of the page is saved to
``artifacts/admin-locks.png`` (and ``admin-locks-1280.png``, of the narrow window).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import django.contrib.admin
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import override_settings

import django_redis_lock
from django_redis_lock import locks
from django_redis_lock.backends.base import AcquireRequest, holder_metadata

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from pytest_django.live_server_helper import LiveServer

INSTALL = (
    "install them with `apt-get install chromium` (Debian, as root) and "
    "`pip install playwright` (the system Chromium is used: no `playwright install`)"
)
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOT = Path(__file__).resolve().parents[2] / "artifacts" / "admin-locks.png"
#: Generous: CI machines are small and busy, and Chromium starts slowly there.
TIMEOUT_MS = 30_000
NAME = "reports:nightly"
OWNER = "browser-test-holder"

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    pytest.skip(f"Playwright is not installed: {INSTALL}.", allow_module_level=True)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(f"No Chromium at {CHROMIUM}: {INSTALL}.", allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def static_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Serve the admin's and the package's static files from the live server.

    The test settings have no ``STATIC_URL`` (nor ``django.contrib.staticfiles``), and the live
    server reads it once, when it starts: so this fixture comes before ``live_server``, and
    lasts as long. The server serves ``STATIC_ROOT``, here links to the two apps' files.
    """
    root = tmp_path_factory.mktemp("static")
    for module in (django.contrib.admin, django_redis_lock):
        app_static = Path(module.__file__ or "").parent / "static"
        for folder in app_static.iterdir():
            (root / folder.name).symlink_to(folder, target_is_directory=True)
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(root)):
        yield


@contextmanager
def browser_page(width: int = 1600, height: int = 760) -> Iterator[Page]:
    """Yield a page of a fresh headless Chromium (a new profile), with generous timeouts."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
            timeout=TIMEOUT_MS * 2,
        )
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            context.set_default_timeout(TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def seconds(text: str) -> float:
    """Return the seconds of a TTL as the page shows it ("59.3s", "1m58s")."""
    match = re.fullmatch(r"(?:(\d+)m)?(\d+(?:\.\d)?)s", text.strip())
    assert match, f"not a TTL: {text!r}"
    return int(match.group(1) or 0) * 60 + float(match.group(2))


def log_in(page: Page, live_server: LiveServer, password: str) -> None:
    """Log in as ``admin`` and open the Locks page."""
    page.goto(f"{live_server.url}/admin/login/?next=/admin/django_redis_lock/lock/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    page.click("input[type=submit]")


def hold(alias: str, name: str, owner: str, ttl: float, **holder: Any) -> None:
    data = holder.pop("data", None)
    metadata = holder_metadata(**{"pid": 4321, "thread": "MainThread", **holder}, data=data)
    assert locks[alias].acquire(name, owner, AcquireRequest(ttl=ttl, metadata=metadata)).acquired


@pytest.mark.django_db(transaction=True)
def test_locks_page__live_ttl_then_confirmed_release(
    static_files: None, live_server: LiveServer
) -> None:
    # Database work happens outside Playwright's event loop, which Django refuses to share.
    user = User.objects.create_superuser("admin", "admin@example.com", "browser-pw")
    # A long lease: Chromium may take a while to start on a busy machine.
    hold("default", NAME, OWNER, 120, host="reports-1", data={"job": "nightly report"})
    celery = {"task_id": "9f1c2d4e", "task_name": "shop.tasks.bill_customer", "worker_pid": 77}
    hold(
        "default",
        "celery:shop.tasks.bill_customer:42",
        "celery:9f1c2d4e:77",
        600,
        host="worker-3",
        data={**celery, "hostname": "celery@worker-3", "args": "customer_id=42"},
    )
    hold("locmem", "imports:partner-api", "import-job", 1800, host="web-2")

    with browser_page() as page:
        log_in(page, live_server, "browser-pw")
        row = page.locator(f'tr.lock-row[data-name="{NAME}"]')
        row.wait_for()
        assert row.locator(".lock-owner").inner_text().startswith("reports-1, pid 4321")
        ttl = row.locator("td.lock-ttl")
        assert 0 < seconds(ttl.inner_text()) <= 120
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

        # The countdown runs in the page: no reload (the marker survives), a smaller TTL.
        page.evaluate("window.stillTheSamePage = true")
        shown = ttl.inner_text()
        page.wait_for_timeout(2_000)
        # Normally changed by now; on a busy machine, give the timer a little longer.
        page.wait_for_function(
            "([cell, shown]) => cell.textContent !== shown", arg=[ttl.element_handle(), shown]
        )
        # Down by about the 2 s waited (more if the machine is slow), never up, not expired.
        assert 1 <= seconds(shown) - seconds(ttl.inner_text()) <= 15
        assert page.evaluate("window.stillTheSamePage") is True

        row.locator("a.lock-release").click()
        page.locator("input.lock-confirm").wait_for()
        assert "its holder is not told" in page.locator(".lock-warning").inner_text()
        assert page.locator(".lock-details .lock-name").inner_text() == NAME
        page.click("input.lock-confirm")
        success = page.locator(".messagelist .success")
        success.wait_for()
        assert success.inner_text().startswith(f"Released lock '{NAME}' on alias 'default'")
        page.locator("tr.lock-row").first.wait_for()
        assert page.locator(f'tr.lock-row[data-name="{NAME}"]').count() == 0
        assert page.locator('tr.lock-row[data-name="imports:partner-api"]').count() == 1

    assert locks["default"].lock_info(NAME) == []
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_repr) == (user, NAME)


@pytest.mark.django_db(transaction=True)
def test_locks_page__long_values_wrap_and_release_stays_in_a_1280px_window(
    static_files: None, live_server: LiveServer
) -> None:
    User.objects.create_superuser("admin", "admin@example.com", "browser-pw")
    # Long unbroken runs, as real holders have them: a task's arguments in the name, a
    # container's host name, an owner token with a UUID, and a long metadata value.
    name = "celery:shop.tasks.export_orders:" + "partner=acme-international-wholesale-" * 3
    owner = "celery:" + "0f8e2a44-51c7-4a8e-9d9b-2f7c3b1a6e55" * 2 + ":123456"
    host = "worker-" + "eu-west-1-production-celery-pool-" * 2 + "7f9c4d"
    data = {
        "args": "partner_ids=[" + ",".join(str(n) for n in range(1000, 1040)) + "]",
        "trace": "x" * 90,
        "requested_by": "nightly-scheduler@reports.example.com",
    }
    hold("default", name, owner, 600, host=host, thread="ThreadPoolExecutor-0_0", data=data)

    with browser_page(width=1280, height=800) as page:
        log_in(page, live_server, "browser-pw")
        row = page.locator(f'tr.lock-row[data-name="{name}"]')
        row.wait_for()
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT.with_name("admin-locks-1280.png")), full_page=True)

        # The Release link is in the window as the page opens: nothing needs scrolling.
        release = row.locator("a.lock-release")
        box = release.bounding_box()
        assert box is not None
        assert 0 <= box["x"] <= box["x"] + box["width"] <= 1280, box
        assert 0 <= box["y"] <= box["y"] + box["height"] <= 800, box
        # Nothing scrolls sideways: neither the page nor the table's box.
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        results = page.locator("#changelist .results")
        assert results.evaluate("box => box.scrollWidth <= box.clientWidth")
        # The long values are shown whole (wrapped), not cut.
        assert row.locator(".lock-name").inner_text() == name
        assert owner in row.locator(".lock-owner").inner_text()


@pytest.mark.django_db(transaction=True)
def test_locks_page__shows_who_waits_in_the_list_and_on_the_confirmation_page(
    static_files: None, live_server: LiveServer
) -> None:
    User.objects.create_superuser("admin", "admin@example.com", "browser-pw")
    hold("default", NAME, OWNER, 600, host="reports-1")
    hold("default", "reports:daily", "daily-holder", 600, host="reports-2")
    for number in range(3):  # registered for long enough that Chromium has time to start
        meta = holder_metadata(host=f"worker-{number}", pid=100 + number, thread="MainThread")
        request = AcquireRequest(ttl=60, metadata=meta, wait=600, fair=True)
        assert not locks["default"].acquire(NAME, f"waiter-{number}", request).acquired

    with browser_page() as page:
        log_in(page, live_server, "browser-pw")
        row = page.locator(f'tr.lock-row[data-name="{NAME}"]')
        row.wait_for()
        assert row.locator("td.lock-waiting").inner_text() == "3 waiting"
        other = page.locator('tr.lock-row[data-name="reports:daily"] td.lock-waiting')
        assert other.inner_text() == "none"

        row.locator("a.lock-release").click()
        page.locator("input.lock-confirm").wait_for()
        waiters = page.locator(".lock-waiters")
        assert waiters.inner_text().startswith("3 waiting, in queue order:")
        items = page.locator(".lock-waiter-list li")
        assert items.count() == 3
        assert items.nth(0).inner_text().startswith("worker-0, pid 100, thread MainThread: next")
        assert "waiter-2" in items.nth(2).inner_text()
        page.click("a.cancel-link")
        row.wait_for()

    assert [info.owner for info in locks["default"].lock_info(NAME)] == [OWNER]
