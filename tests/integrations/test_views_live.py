"""``@lock_view`` behind a real, threaded HTTP server, hit by concurrent HTTP clients."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import LiveServerTestCase, override_settings
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from django_redis_lock import locks
from django_redis_lock.decorators import lock_view
from tests.support.helpers import eventually

#: Set by a test to let the requests that hold a lock finish.
release = threading.Event()
#: The keys whose request is inside the view, holding its lock.
inside: list[str] = []
inside_lock = threading.Lock()


@csrf_exempt
@lock_view("post:job", ttl=5)
def work(request: HttpRequest) -> HttpResponse:
    job = request.POST["job"]
    with inside_lock:
        inside.append(job)
    assert release.wait(10), "the test never released the view"
    return HttpResponse(f"done {job}")


@csrf_exempt
@lock_view("post:job", retry_after=2)  # a 30 s lease, for work that takes about 2 s
def brief(request: HttpRequest) -> HttpResponse:
    with inside_lock:
        inside.append(request.POST["job"])
    assert release.wait(10), "the test never released the view"
    return HttpResponse("done")


urlpatterns = [path("work/", work), path("brief/", brief)]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    release.clear()
    inside.clear()
    yield
    release.set()  # never leave a server thread waiting


def post(url: str, job: str) -> tuple[int, dict[str, str], str]:
    """POST ``job=<job>``; return the status, the headers and the body."""
    request = urllib.request.Request(url, data=f"job={job}".encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def send_all(url: str, jobs: list[str], *, holders: int) -> list[tuple[int, dict[str, str], str]]:
    """POST every job at once; let the view finish once ``holders`` requests are inside it."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(post, url, job) for job in jobs]
        eventually(lambda: len(inside) == holders)
        return _finish(futures, holders=holders, total=len(jobs))


def _finish(futures: list[Any], *, holders: int, total: int) -> list[Any]:
    # Every request that did not get into the view is answered while the holders still wait.
    eventually(lambda: sum(f.done() for f in futures) == total - holders)
    release.set()
    return [f.result(timeout=15) for f in futures]


# A server of this class's own (pytest-django's live_server is shared by the session, and reads
# STATIC_URL, which the test settings lack, once, when it starts).
@override_settings(ROOT_URLCONF=__name__, STATIC_URL="/static/")
class LockViewLiveTests(LiveServerTestCase):
    """Real HTTP requests, each served by its own thread of a real server."""

    def test_five_concurrent_posts_for_one_key__one_runs_four_get_409(self) -> None:
        results = send_all(f"{self.live_server_url}/work/", ["a"] * 5, holders=1)

        statuses = sorted(status for status, _, _ in results)
        assert statuses == [200, 409, 409, 409, 409]
        assert inside == ["a"]
        for status, headers, body in results:
            if status == 200:
                assert body == "done a"
            else:
                assert 1 <= int(headers["Retry-After"]) <= 5  # the holder's lease, rounded up
                assert body == "This request is already being processed. Try again later."
        assert not locks["default"].locked(f"view:{__name__}.work:job=a")

    def test_a_view_with_retry_after__sends_its_value_not_the_lease_left(self) -> None:
        results = send_all(f"{self.live_server_url}/brief/", ["a"] * 3, holders=1)

        assert sorted(status for status, _, _ in results) == [200, 409, 409]
        assert {h["Retry-After"] for status, h, _ in results if status == 409} == {"2"}

    def test_five_concurrent_posts_for_different_keys__all_run(self) -> None:
        jobs = ["a", "b", "c", "d", "e"]
        results = send_all(f"{self.live_server_url}/work/", jobs, holders=5)

        assert sorted(inside) == jobs  # all five were inside the view at the same time
        assert sorted(body for _, _, body in results) == [f"done {job}" for job in jobs]
        assert {status for status, _, _ in results} == {200}

    def test_two_keys_five_posts_each__one_runs_per_key(self) -> None:
        results = send_all(f"{self.live_server_url}/work/", ["a", "b"] * 5, holders=2)

        assert sorted(inside) == ["a", "b"]
        assert sorted(status for status, _, _ in results) == [200, 200] + [409] * 8
        assert sorted(body for status, _, body in results if status == 200) == [
            "done a",
            "done b",
        ]
