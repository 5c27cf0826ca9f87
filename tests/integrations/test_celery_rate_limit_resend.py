"""The resend of a Celery run its rate limit refused: on a real broker, running, frozen or gone.

The resend is a publish, and a publish that failed may have reached the broker: one that timed
out on a frozen broker is treated as sent (the run ends as retried), one that surely sent
nothing (the connection was refused) fails the run with the broker's error.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_py
from celery import Celery, Task
from celery.exceptions import Retry
from kombu.exceptions import OperationalError

from django_redis_lock import rate_limit
from django_redis_lock.backends.base import Admission, Rate
from django_redis_lock.celery.rate_limited import _send_again
from django_redis_lock.testing import RedisServer

QUEUE = "resend-queue"


def _job(self: Task, customer_id: int) -> None:
    """Never run here: the tests only resend it."""


@pytest.fixture
def job(own_server: RedisServer) -> Iterator[Task]:
    """A task on an app whose broker is the test's own server, inside a worker-like request."""
    app = Celery("resend", broker=own_server.url, set_as_current=False)
    app.conf.update(
        broker_transport_options={"socket_timeout": 0.5, "socket_connect_timeout": 0.5},
        task_publish_retry_policy={"max_retries": 1, "interval_start": 0, "interval_max": 0.1},
        task_default_queue=QUEUE,
    )
    task: Task = app.task(name="resend.job", bind=True, shared=False)(_job)
    task.push_request(
        id="run-1",
        args=[7],
        kwargs={},
        retries=2,
        is_eager=False,
        called_directly=False,
        delivery_info={"exchange": "", "routing_key": QUEUE},
    )
    yield task
    task.pop_request()


def refused() -> tuple[Any, Admission]:
    handle = rate_limit("celery:resend.job:7", "5/s", blocking=False)
    return handle, Admission(False, retry_after=0.4, rate=Rate(5, 1.0))


def queued(broker: redis_py.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw)["headers"] for raw in reversed(broker.lrange(QUEUE, 0, -1))]


def test_resend__same_id_and_retries_for_the_moment_given(
    job: Task, own_server: RedisServer
) -> None:
    handle, admission = refused()
    sent_at = dt.datetime.now(dt.timezone.utc)
    with pytest.raises(Retry) as raised:
        _send_again(job, handle, admission)
    assert 0.4 <= float(raised.value.when) <= 0.5  # type: ignore[arg-type]
    (headers,) = queued(redis_py.Redis.from_url(own_server.url))
    assert (headers["id"], headers["retries"], headers["task"]) == ("run-1", 2, "resend.job")
    eta = dt.datetime.fromisoformat(headers["eta"])
    assert 0.35 <= (eta - sent_at).total_seconds() <= 0.6


def test_resend__timed_out_on_a_frozen_broker_is_treated_as_sent(
    job: Task, own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    handle, admission = refused()
    job.app.send_task("resend.job", (0,), queue=QUEUE)  # the connection is open, as in a worker
    own_server.pause()
    try:
        with pytest.raises(Retry):
            _send_again(job, handle, admission)
    finally:
        own_server.resume()
    assert "may have been sent" in caplog.text


def test_resend__that_sent_nothing_fails_the_run_with_the_brokers_error(
    job: Task, own_server: RedisServer
) -> None:
    handle, admission = refused()
    own_server.stop()  # nothing listens on its port now
    with pytest.raises(OperationalError):
        _send_again(job, handle, admission)
