"""``@single_instance(enqueue=...)`` on a real broker and a real worker: duplicates never sent.

The worker has one child, so a long run keeps the next message waiting; ``idle`` is a queue
no worker reads, so a message sent there stays queued. Abnormal ends of a run (its child
killed, terminated or out of time) are in test_celery_abnormal_ends, whose tasks all refuse
duplicates when sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from django_redis_lock import DuplicateTaskError, LockNotAcquiredError, locks
from tests.support import celery_harness

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def worker(redis_url: str) -> Iterator[dict[str, Any]]:
    """One real prefork worker with one child: a long run keeps the next message waiting."""
    with celery_harness.running_worker(redis_url, "enqueue", concurrency=1) as worker:
        yield worker


@pytest.fixture
def w(worker: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The worker, with no event, message or lock left from an earlier test."""
    worker["client"].delete(idle(worker))
    with celery_harness.fresh(worker):
        yield worker


def idle(worker: dict[str, Any]) -> str:
    """The queue no worker reads (a Redis list of that name holds its messages)."""
    return f"{worker['prefix']}-idle"


def claim_of(task: Any, customer_id: int) -> list[Any]:
    return locks["default"].lock_info(f"queued:celery:{task.name}:{customer_id}")


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout}s"
        time.sleep(0.05)


def test_skip__ten_sends_while_queued__one_message_and_one_task_id(w: dict[str, Any]) -> None:
    app, client = w["app"], w["client"]
    results = [app.sync_once.apply_async((1, n), queue=idle(w)) for n in range(10)]
    assert client.llen(idle(w)) == 1, "one message published"
    assert {r.id for r in results} == {results[0].id}
    [claim] = claim_of(app.sync_once, 1)
    assert claim.metadata["task_id"] == results[0].id
    # Another key is another instance.
    other = app.sync_once.apply_async((2, 0), queue=idle(w))
    assert other.id != results[0].id
    assert client.llen(idle(w)) == 2


def test_skip__ten_sends_while_running__none_sent_then_the_next_runs(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_once.delay(3, 0, 2.0)
    celery_harness.wait_for_events(client, prefix, "start", 1)
    again = [app.sync_once.delay(3, n, 0.0) for n in range(1, 11)]
    assert {r.id for r in again} == {first.id}
    assert first.get(timeout=30) == 0
    wait_until(lambda: not claim_of(app.sync_once, 3), 10, "freed after the run")
    after = app.sync_once.delay(3, 11, 0.0)
    assert after.id != first.id
    assert after.get(timeout=30) == 11
    starts = celery_harness.events(client, prefix, "start")
    assert [e["run"] for e in starts] == [0, 11], "only the first and the one sent after ran"


def test_raise__names_the_instance_queued(w: dict[str, Any]) -> None:
    app = w["app"]
    first = app.sync_strict.apply_async((4, 0), queue=idle(w))
    with pytest.raises(DuplicateTaskError, match=first.id) as caught:
        app.sync_strict.apply_async((4, 1), queue=idle(w))
    assert caught.value.task_id == first.id
    assert caught.value.lock_name == f"queued:celery:{app.sync_strict.name}:4"
    assert isinstance(caught.value, LockNotAcquiredError)
    assert w["client"].llen(idle(w)) == 1


def test_a_message_never_run__frees_its_claim_when_enqueue_ttl_ends(w: dict[str, Any]) -> None:
    app, client = w["app"], w["client"]
    sent_at = time.monotonic()
    first = app.sync_strict.apply_async((5, 0), queue=idle(w))  # enqueue_ttl=1.5
    with pytest.raises(DuplicateTaskError):
        app.sync_strict.apply_async((5, 1), queue=idle(w))
    wait_until(lambda: not claim_of(app.sync_strict, 5), 5, "freed by its lease")
    assert time.monotonic() - sent_at >= 1.4
    second = app.sync_strict.apply_async((5, 2), queue=idle(w))
    assert second.id != first.id
    assert client.llen(idle(w)) == 2


def test_countdown__the_claim_outlives_the_wait(w: dict[str, Any]) -> None:
    app = w["app"]
    first = app.sync_strict.apply_async((6, 0), queue=idle(w), countdown=3)
    time.sleep(2.0)  # past enqueue_ttl=1.5, within the countdown
    with pytest.raises(DuplicateTaskError) as caught:
        app.sync_strict.apply_async((6, 1), queue=idle(w))
    assert caught.value.task_id == first.id


def test_limit__two_instances_sent_then_the_third_refused(w: dict[str, Any]) -> None:
    app, client = w["app"], w["client"]
    results = [app.sync_pair.apply_async((7, n), queue=idle(w)) for n in range(5)]
    assert client.llen(idle(w)) == 2
    assert len({r.id for r in results}) == 2
    assert {r.id for r in results[2:]} <= {r.id for r in results[:2]}


def test_retry__keeps_the_claim_until_the_retried_run_ends(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_retrying.delay(8, 2.0)
    celery_harness.wait_for_events(client, prefix, "start", 1)
    time.sleep(0.5)  # the first run asked for its retry, due in 2 s
    assert app.sync_retrying.delay(8).id == first.id, "refused while the retry waits"
    assert first.get(timeout=30) == 1
    wait_until(lambda: not claim_of(app.sync_retrying, 8), 10, "freed after the retried run")
    assert [e["run"] for e in celery_harness.events(client, prefix, "start")] == [0, 1]


@pytest.mark.parametrize("end", ["revoked", "expired"])
def test_a_message_discarded_unrun__frees_its_claim(w: dict[str, Any], end: str) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    blocker = app.sync_once.delay(9, 0, 2.0)  # keeps the one child busy
    celery_harness.wait_for_events(client, prefix, "start", 1)
    options = {"expires": 0.5} if end == "expired" else {}
    waiting = app.sync_once.apply_async((10, 1, 0.0), **options)
    if end == "revoked":
        app.app.control.revoke(waiting.id)
    assert claim_of(app.sync_once, 10), "held while the message waits"
    assert blocker.get(timeout=30) == 0
    wait_until(lambda: not claim_of(app.sync_once, 10), 10, f"freed once {end}")
    assert [e["run"] for e in celery_harness.events(client, prefix, "start")] == [0]


def test_a_body_that_raised__frees_the_claim(w: dict[str, Any]) -> None:
    app = w["app"]
    failing = app.sync_once.delay(11, 0, "not a number")
    with pytest.raises(TypeError):
        failing.get(timeout=30)
    wait_until(lambda: not claim_of(app.sync_once, 11), 10, "freed after a failure")


def test_eager__runs_in_place_and_claims_nothing(w: dict[str, Any]) -> None:
    app = w["app"]
    app.app.conf.task_always_eager = True
    try:
        results = [app.sync_once.delay(12, n, 0.0) for n in range(2)]
    finally:
        app.app.conf.task_always_eager = False
    assert [r.get() for r in results] == [0, 1], "each ran in place, one after the other"
    assert not claim_of(app.sync_once, 12)


def test_a_run_longer_than_enqueue_ttl__keeps_the_claim_while_it_runs(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_strict.delay(13, 0, 3.0)  # enqueue_ttl=1.5: the run renews the claim
    celery_harness.wait_for_events(client, prefix, "start", 1)
    time.sleep(2.5)
    with pytest.raises(DuplicateTaskError) as caught:
        app.sync_strict.delay(13, 1, 0.0)
    assert caught.value.task_id == first.id
    assert first.get(timeout=30) == 0


def test_skip__sends_at_the_same_moment_from_many_threads__one_message(w: dict[str, Any]) -> None:
    app, client = w["app"], w["client"]
    barrier = threading.Barrier(10)

    def send(n: int) -> str:
        barrier.wait()
        return str(app.sync_once.apply_async((14, n), queue=idle(w)).id)

    with ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(send, range(10)))
    assert client.llen(idle(w)) == 1, "one message published"
    assert len(set(ids)) == 1
