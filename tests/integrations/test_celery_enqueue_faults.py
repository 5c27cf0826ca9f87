"""``@single_instance(enqueue=...)`` when the publish fails: the claim goes only if nothing went.

The broker is a redis-server of each test's own, frozen (SIGSTOP) or stopped; the locks are on
the session's server, which answers throughout. No worker: the tests read the broker's queue.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
import redis as redis_py
from celery import Celery, Task
from kombu.exceptions import EncodeError, OperationalError

from django_redis_lock import locks
from django_redis_lock.celery import SingleInstanceTask, single_instance
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually

pytestmark = pytest.mark.slow

QUEUE = "faults"


def _sync(self: Task, customer_id: int, payload: object = None) -> None:
    """Never run here: the tests only send it."""


def sending_task(broker_url: str) -> Task:
    """Return a task that refuses duplicates, on an app that gives up on a silent broker soon.

    One retry after a half-second socket timeout: a publish to a frozen broker fails in about
    a second, as it would in 15 s with the defaults.
    """
    app = Celery("enqueue-faults", broker=broker_url, set_as_current=False)
    app.conf.update(
        broker_transport_options={"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_max": 0.1},
        task_default_queue=QUEUE,
    )
    # Not shared: the task belongs to this app only, not to every app finalized afterwards.
    task: Task = app.task(name="faults.sync", bind=True, base=SingleInstanceTask, shared=False)(
        single_instance(key="{customer_id}", enqueue="skip", enqueue_ttl=30)(_sync)
    )
    return task


def claim_of(customer_id: int) -> list[Any]:
    return locks["default"].lock_info(f"queued:celery:faults.sync:{customer_id}")


def queued_ids(broker: redis_py.Redis) -> list[str]:
    """Return the task ids of the messages in the queue, oldest first."""
    return [json.loads(raw)["headers"]["id"] for raw in reversed(broker.lrange(QUEUE, 0, -1))]


def test_a_publish_that_timed_out_on_a_frozen_broker__keeps_its_claim(
    own_server: RedisServer,
) -> None:
    sync, broker = sending_task(own_server.url), redis_py.Redis.from_url(own_server.url)
    sync.apply_async((0,), task_id="earlier")  # the connection is open, as in a busy process
    retried: list[BaseException] = []
    own_server.pause()
    try:
        with pytest.raises(OperationalError, match="Timeout"):
            policy = {"errback": lambda exc, interval: retried.append(exc)}
            sync.apply_async((1,), task_id="first", retry_policy=policy)
    finally:
        own_server.resume()
    assert retried, "the send's own errback is still called"
    # The broker read the message before it froze: it queues it as it runs again.
    eventually(lambda: broker.llen(QUEUE) == 2)
    again = sync.delay(1)
    assert queued_ids(broker) == ["earlier", "first"], "the duplicate is not sent"
    assert again.id == "first"
    [claim] = claim_of(1)
    assert 0 < claim.ttl <= 30, "held for enqueue_ttl at most, as a queued message's claim"
    broker.close()


@pytest.mark.parametrize(
    ("payload", "error"),
    [(None, OperationalError), (object(), EncodeError)],
    ids=["connection-refused", "not-serializable"],
)
def test_a_publish_that_sent_nothing__frees_its_claim(
    own_server: RedisServer, payload: object, error: type[Exception]
) -> None:
    own_server.stop()  # nothing listens on its port now
    sync = sending_task(own_server.url)
    with pytest.raises(error):
        sync.apply_async((2, payload), task_id="refused")
    assert claim_of(2) == []


def test_a_publish_whose_connection_timed_out_opening__frees_its_claim() -> None:
    # A listener whose backlog is full drops new SYNs, as an unreachable host does: the
    # client's connect() times out, and nothing was written.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        queued = []
        for _ in range(4):  # fill the backlog; the next connect cannot complete
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", port))
            queued.append(client)
        try:
            sync = sending_task(f"redis://127.0.0.1:{port}/0")
            with pytest.raises(OperationalError, match="connecting"):
                sync.apply_async((3,), task_id="unreachable")
        finally:
            for client in queued:
                client.close()
    assert claim_of(3) == []
