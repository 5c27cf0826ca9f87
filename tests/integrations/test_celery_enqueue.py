"""``@single_instance(enqueue=...)`` on a real broker and a real worker: duplicates never sent.

The worker has one child, so a long run keeps the next message waiting; ``idle`` is a queue
no worker reads, so a message sent there stays queued. Abnormal ends of a run (its child
killed, terminated or out of time) are in test_celery_abnormal_ends, whose tasks all refuse
duplicates when sent.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from celery import chain

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
        try:
            return str(app.sync_once.apply_async((14, n), queue=idle(w)).id)
        finally:
            # Celery's result backend is one per thread, and a send subscribes it to the
            # task's result: close this thread's before the thread ends.
            backend = app.app.backend
            backend.result_consumer.stop()
            backend.client.connection_pool.disconnect()

    with ThreadPoolExecutor(10) as pool:
        ids = list(pool.map(send, range(10)))
    assert client.llen(idle(w)) == 1, "one message published"
    assert len(set(ids)) == 1


# Each way a message goes on, or a second delivery comes, after its run started.


def test_one_task_id_sent_twice__one_message(w: dict[str, Any]) -> None:
    app, client = w["app"], w["client"]
    sent = [app.sync_once.apply_async((15, n), task_id="sync-15", queue=idle(w)) for n in (0, 1)]
    assert client.llen(idle(w)) == 1
    assert [r.id for r in sent] == ["sync-15", "sync-15"]
    with pytest.raises(DuplicateTaskError):
        app.sync_strict.apply_async((15, 0), task_id="strict-15", queue=idle(w))
        app.sync_strict.apply_async((15, 1), task_id="strict-15", queue=idle(w))
    [claim] = claim_of(app.sync_strict, 15)
    assert claim.holds == 1, "the refused send took no hold of its own"


def test_revoke_terminate_by_sigterm__the_claim_stays_while_the_run_goes_on(
    w: dict[str, Any],
) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_stubborn.delay(16, 2.5)  # ignores SIGTERM
    [start] = celery_harness.wait_for_events(client, prefix, "start", 1)
    app.app.control.revoke(first.id, terminate=True)  # SIGTERM
    time.sleep(1.0)
    assert celery_harness.events(client, prefix, "end") == [], "the run goes on"
    assert app.sync_stubborn.delay(16, 0.0).id == first.id, "refused while it runs"
    wait_until(lambda: not claim_of(app.sync_stubborn, 16), 15, "freed once the run ended")
    # The pool would report the next death of this child as that termination: replace it.
    os.kill(start["pid"], signal.SIGKILL)
    assert app.ping.delay().get(timeout=30) == "pong"


def test_reject_with_requeue__the_claim_goes_on_with_the_message(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_rejecting.delay(17)
    celery_harness.wait_for_events(client, prefix, "reject", 1)
    sends = send_until_done(app.sync_rejecting, first, 17)
    assert first.get(timeout=30) == 17
    wait_until(lambda: not claim_of(app.sync_rejecting, 17), 10, "freed after the run")
    assert len(celery_harness.events(client, prefix, "start")) == 1
    assert_refused_until_the_end(w, sends, first.id)


def test_requeued_after_the_child_was_killed__the_claim_goes_on(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_lost.delay(18)  # acks_late, reject_on_worker_lost
    [start] = celery_harness.wait_for_events(client, prefix, "start", 1)
    os.kill(start["pid"], signal.SIGKILL)
    sends = send_until_done(app.sync_lost, first, 18)
    assert first.get(timeout=30) == 2, "the second delivery ran"
    wait_until(lambda: not claim_of(app.sync_lost, 18), 10, "freed after the run")
    assert [e["run"] for e in celery_harness.events(client, prefix, "start")] == [1, 2]
    assert_refused_until_the_end(w, sends, first.id)


def send_until_done(task: Any, first: Any, *args: Any) -> list[tuple[int, str]]:
    """Send ``task(*args)`` every 50 ms until ``first`` is done; return (sent by ns, id)."""
    sends = []
    while not first.ready():
        sent_id = task.delay(*args).id
        sends.append((time.monotonic_ns(), sent_id))
        time.sleep(0.05)
    return sends


def assert_refused_until_the_end(w: dict[str, Any], sends: list[Any], first_id: str) -> None:
    """Every send that was done before the run's body ended got the first run's id."""
    [end] = celery_harness.events(w["client"], w["prefix"], "end")
    before = [sent_id for at, sent_id in sends if at < end["at"]]
    assert len(before) >= 3, "sent while the message went on"
    assert set(before) == {first_id}


def test_retry_asked_without_raising__the_claim_goes_on_with_the_retry(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_retry_quietly.delay(19)
    celery_harness.wait_for_events(client, prefix, "done", 1)
    assert app.sync_retry_quietly.delay(19).id == first.id, "refused while the retry waits"
    celery_harness.wait_for_events(client, prefix, "start", 2)
    wait_until(lambda: not claim_of(app.sync_retry_quietly, 19), 10, "freed after the retry")


def test_retry_with_other_arguments__frees_the_claim_of_the_first(w: dict[str, Any]) -> None:
    app = w["app"]
    assert app.sync_retry_elsewhere.delay(20).get(timeout=30) == 120
    wait_until(lambda: not claim_of(app.sync_retry_elsewhere, 20), 10, "the first claim freed")
    wait_until(lambda: not claim_of(app.sync_retry_elsewhere, 120), 10, "the second freed")


def test_while_it_runs__the_claim_has_the_runs_lease_not_the_sends(w: dict[str, Any]) -> None:
    app, client, prefix = w["app"], w["client"], w["prefix"]
    first = app.sync_once.delay(21, 0, 1.0)
    celery_harness.wait_for_events(client, prefix, "start", 1)
    [claim] = claim_of(app.sync_once, 21)
    assert claim.ttl <= locks["default"].default_ttl, "a worker killed whole frees it soon"
    assert first.get(timeout=30) == 0


def test_a_chain_of_one_key__each_link_runs(w: dict[str, Any]) -> None:
    app = w["app"]
    links = chain(app.sync_once.si(22, 0, 0.1), app.sync_once.si(22, 1, 0.1))
    assert links.delay().get(timeout=30) == 1
    wait_until(lambda: not claim_of(app.sync_once, 22), 10, "freed after the chain")


def test_a_naive_eta_is_read_in_the_apps_time_zone(w: dict[str, Any]) -> None:
    from django_redis_lock.celery.enqueue import _delay

    task = w["app"].sync_once
    in_two_hours = task.app.now().replace(tzinfo=None) + dt.timedelta(hours=2)
    assert abs(_delay(task, {"eta": in_two_hours}) - 7200) < 5
