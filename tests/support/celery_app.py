"""A Celery app for the tests: tasks that record what they do in Redis.

The test suite starts a real worker on it (``celery -A tests.support.celery_app worker``) with the
broker, the result backend and the locks on its throw-away redis-server, given by the
environment: ``DRL_CELERY_URL`` and ``DRL_CELERY_PREFIX``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()

import redis  # noqa: E402
from celery import Celery, Task, current_task, shared_task  # noqa: E402
from celery.exceptions import Reject  # noqa: E402
from celery.signals import task_postrun  # noqa: E402
from django.test import override_settings  # noqa: E402

from django_redis_lock import locks  # noqa: E402
from django_redis_lock.celery import SingleInstanceTask, rate_limit, single_instance  # noqa: E402
from django_redis_lock.ratelimit import last_admission  # noqa: E402
from tests.support.helpers import locks_setting  # noqa: E402

URL = os.environ.get("DRL_CELERY_URL", "redis://127.0.0.1:1/0")
PREFIX = os.environ.get("DRL_CELERY_PREFIX", "celery-tests")

if os.environ.get("DRL_CELERY_WORKER") or os.environ.get("DRL_CELERY_BEAT_TTL"):
    override_settings(LOCKS=locks_setting(URL, PREFIX)).enable()

app = Celery("tests", broker=URL, backend=URL, set_as_current=True)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    result_expires=600,
    task_default_queue=f"{PREFIX}-queue",
)

if os.environ.get("DRL_CELERY_BEAT_TTL"):
    # `celery beat` on every node (see celery_harness.celery_beat): one entry due every second,
    # sent to a queue nobody consumes, so the test reads every message beat sent.
    app.conf.update(
        beat_schedule={
            "every-second": {
                "task": "tests.support.celery_app.ping",
                "schedule": 1.0,
                "options": {"queue": f"{PREFIX}-beat"},
            }
        },
        beat_leader_lock="beat",
        beat_leader_ttl=float(os.environ["DRL_CELERY_BEAT_TTL"]),
    )

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client  # noqa: PLW0603
    if _client is None:
        _client = redis.Redis.from_url(URL)
    return _client


def record(event: str, **fields: Any) -> None:
    """Append one event (with the process id and a system-wide monotonic time) to the log."""
    fields.update(event=event, pid=os.getpid(), at=time.monotonic_ns())
    _redis().rpush(f"{PREFIX}:events", json.dumps(fields))


def work(task: str, run: object, seconds: float) -> object:
    record("start", task=task, run=run)
    time.sleep(seconds)
    record("end", task=task, run=run)
    return run


@app.task(bind=True)
@single_instance()
def exclusive(self: Any, run: int, seconds: float = 0.2) -> object:
    return work("exclusive", run, seconds)


@app.task
@single_instance(key="{customer_id}")
def bill(customer_id: int, run: int, seconds: float = 0.5) -> object:
    return work(f"bill:{customer_id}", run, seconds)


@app.task(bind=True)
@single_instance(on_conflict="raise")
def strict(self: Any, run: int, seconds: float = 0.5) -> object:
    return work("strict", run, seconds)


@app.task(bind=True, max_retries=50)
@single_instance(on_conflict="retry", countdown=0.2)
def retrying(self: Any, run: int, seconds: float = 0.5) -> object:
    return work("retrying", run, seconds)


@app.task(bind=True)
@single_instance(on_conflict="wait", timeout=10)
def patient(self: Any, run: int, seconds: float = 0.5) -> object:
    return work("patient", run, seconds)


@app.task(bind=True)
@single_instance(limit=2)
def pair(self: Any, run: int, seconds: float = 0.5) -> object:
    return work("pair", run, seconds)


@shared_task(bind=True)
@single_instance(ttl=1)
def long_running(self: Any, run: int, seconds: float = 3.0) -> object:
    return work("long_running", run, seconds)


@app.task(bind=True, max_retries=3)
@single_instance()
def retry_once(self: Any) -> object:
    record("start", task="retry_once", run=self.request.retries)
    if self.request.retries == 0:
        retry = self.retry(countdown=0, throw=False)  # published now, under the same task id
        time.sleep(0.5)  # still running: the retried run must find the lock free regardless
        raise retry
    [held] = locks["default"].lock_info(f"celery:{self.name}")
    record("end", task="retry_once", run=self.request.retries, holds=held.holds)
    return self.request.retries


@app.task(bind=True)
@single_instance(ttl=30, on_conflict="wait", timeout=10)
def stuck(self: Any, run: int, seconds: float = 60.0) -> object:
    """A run the tests kill, revoke or time out; the next one waits for the lock, not 30 s."""
    return work("stuck", run, seconds)


@app.task(bind=True)
@single_instance(ttl=30, on_conflict="wait", timeout=10)
def stubborn(self: Any, run: int, seconds: float = 60.0) -> object:
    """A run that ignores SIGTERM, so only SIGKILL ends it; it beats until then."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # process-wide: every thread ignores it
    record("start", task="stubborn", run=run)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record("beat", task="stubborn", run=run)
        time.sleep(0.02)
    record("end", task="stubborn", run=run)
    return run


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True)
@single_instance(ttl=30)
def redelivered(self: Any, run: int) -> object:
    """A run whose first delivery is killed; Celery then redelivers it (same task id)."""
    deliveries = _redis().incr(f"{PREFIX}:deliveries:{self.request.id}")
    record("start", task="redelivered", run=run, delivery=deliveries)
    time.sleep(60 if deliveries == 1 else 0.1)
    return deliveries


# Rate limits.


def admitted(task: str, run: object, **fields: Any) -> object:
    """Record the start of a run with the server's time of its admission."""
    admission = last_admission()
    at = None if admission is None else admission.at
    record("start", task=task, run=run, admitted_at=at, **fields)
    return run


@app.task(bind=True, max_retries=0)
@rate_limit("5/s")
def limited(self: Any, run: int) -> object:
    return admitted("limited", run, retries=self.request.retries)


@app.task
@rate_limit("1/10s", on_limit="raise")
def limited_or_raised(run: int) -> object:
    return admitted("limited_or_raised", run)


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True)
@rate_limit("2/s")
def limited_redelivered(self: Any, run: int) -> object:
    """A rate-limited run whose first delivery is killed; Celery redelivers it."""
    deliveries = _redis().incr(f"{PREFIX}:deliveries:{self.request.id}")
    admitted("limited_redelivered", run, delivery=deliveries)
    time.sleep(60 if deliveries == 1 and run == 0 else 0.05)
    return deliveries


@app.task(bind=True)
@single_instance(key="{customer_id}", on_conflict="retry", countdown=0.2)
@rate_limit("2/s", key="{customer_id}")
def lock_then_limit(self: Any, customer_id: int, run: int) -> object:
    return admitted("lock_then_limit", run, customer_id=customer_id)


@app.task(bind=True)
@rate_limit("2/s", key="{customer_id}")
@single_instance(key="{customer_id}", on_conflict="retry", countdown=0.2)
def limit_then_lock(self: Any, customer_id: int, run: int) -> object:
    return admitted("limit_then_lock", run, customer_id=customer_id)


@app.task
def ping() -> str:
    return "pong"


# Refusing duplicates when they are sent (enqueue=).


@app.task(bind=True, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_once(self: Any, customer_id: int, run: int, seconds: float = 0.5) -> object:
    return work(f"sync_once:{customer_id}", run, seconds)


@app.task(base=SingleInstanceTask)
@single_instance(key=["customer_id"], enqueue="raise", enqueue_ttl=1.5)
def sync_strict(customer_id: int, run: int, seconds: float = 0.5) -> object:
    return work(f"sync_strict:{customer_id}", run, seconds)


@shared_task(bind=True, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip", limit=2)
def sync_pair(self: Any, customer_id: int, run: int, seconds: float = 0.5) -> object:
    return work(f"sync_pair:{customer_id}", run, seconds)


@app.task(bind=True, max_retries=3, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_retrying(self: Any, customer_id: int, countdown: float = 2.0) -> object:
    record("start", task="sync_retrying", run=self.request.retries)
    if self.request.retries == 0:
        raise self.retry(countdown=countdown)
    record("end", task="sync_retrying", run=self.request.retries)
    return self.request.retries


@task_postrun.connect
def _record_done(task_id: str, task: Task, retval: object, **kwargs: Any) -> None:
    # Sent for every run that returned, a skipped one included.
    record("done", task=task.name, id=task_id, result=repr(retval))


@app.task(bind=True, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip", ttl=60)
def sync_stubborn(self: Any, customer_id: int, seconds: float = 3.0) -> object:
    """A run that ignores SIGTERM: a revoke that terminates it with SIGTERM leaves it running."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return work(f"sync_stubborn:{customer_id}", customer_id, seconds)


@app.task(bind=True, acks_late=True, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_rejecting(self: Any, customer_id: int) -> object:
    """Its first delivery puts its message back on the queue (Reject with requeue)."""
    if _redis().incr(f"{PREFIX}:rejected:{customer_id}") == 1:
        record("reject", task="sync_rejecting", run=customer_id)
        time.sleep(0.3)
        raise Reject("again", requeue=True)
    return work(f"sync_rejecting:{customer_id}", customer_id, 0.1)


@app.task(bind=True, acks_late=True, reject_on_worker_lost=True, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_lost(self: Any, customer_id: int) -> object:
    """Its first delivery waits to be killed; Celery puts the message back on the queue."""
    delivery = _redis().incr(f"{PREFIX}:lost:{customer_id}")
    return work(f"sync_lost:{customer_id}", delivery, 30 if delivery == 1 else 0.5)


@app.task(bind=True, max_retries=1, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_retry_quietly(self: Any, customer_id: int) -> object:
    """Asks for a retry without raising it, then returns."""
    record("start", task="sync_retry_quietly", run=self.request.retries)
    if self.request.retries == 0:
        self.retry(countdown=2, throw=False)
    return self.request.retries


@app.task(bind=True, max_retries=1, base=SingleInstanceTask)
@single_instance(key="{customer_id}", enqueue="skip")
def sync_retry_elsewhere(self: Any, customer_id: int) -> object:
    """Retries with other arguments: a claim of another key."""
    if self.request.retries == 0:
        raise self.retry(args=(customer_id + 100,), countdown=0.5)
    return customer_id


# At most once per window (min_hold=).


@app.task(bind=True)
@single_instance(min_hold=3)
def once_per_window(self: Any, run: int, seconds: float = 0.1) -> object:
    return work("once_per_window", run, seconds)


@app.task(base=SingleInstanceTask)
@single_instance(key="{customer_id}", min_hold=3, enqueue="skip")
def sync_per_window(customer_id: int, run: int, seconds: float = 0.1) -> object:
    return work(f"sync_per_window:{customer_id}", run, seconds)


@app.task(bind=True)
@single_instance(min_hold=3, ttl=60)
def killed_in_window(self: Any, run: int) -> object:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return work("killed_in_window", run, 60)


# Every shape of task a user writes, for the tests of abnormal ends: @app.task and
# @shared_task, bound and not, under each kind of key. Each run records the lock it holds and
# sleeps until it is killed, revoked or out of time.

SHAPE_KEYS = ("none", "template", "list", "callable")


def _unbound_key(customer_id: int, kind: str = "monthly") -> str:
    return f"c{customer_id}.{kind}"


def _bound_key(task: Task, customer_id: int, kind: str = "monthly") -> str:
    # A bound task's function gets the task first: so does a callable key.
    return f"c{customer_id}.{kind}"


def hold_until_ended() -> None:
    """Record the run's start and the name of the lock it holds; sleep for a minute.

    SIGTERM is ignored, as by a body stuck in C code: a child would otherwise leave the body
    on the SIGTERM that comes before the SIGKILL of a hard time limit, and free its lock
    itself, and only the worker's main process is to free it here.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    task_id = current_task.request.id
    [name] = [
        info.name
        for info in locks["default"].iter_locks("celery:*")
        if info.metadata.get("task_id") == task_id
    ]
    record("start", task=current_task.name, id=task_id, lock=name)
    time.sleep(60)


def _shape(decorator: str, bound: bool, key_kind: str) -> Any:
    name = f"shape.{decorator}.{'bound' if bound else 'unbound'}.{key_kind}"
    key = {
        "none": None,
        "template": "{customer_id}-{kind}",
        "list": ["customer_id", "kind"],
        "callable": _bound_key if bound else _unbound_key,
    }[key_kind]
    register = app.task if decorator == "app" else shared_task
    if bound:

        def run(self: Task, customer_id: int, kind: str = "monthly") -> None:
            hold_until_ended()

    else:

        def run(customer_id: int, kind: str = "monthly") -> None:  # type: ignore[misc]
            hold_until_ended()

    sends_once = single_instance(key, ttl=60, enqueue="skip")
    return register(name=name, bind=bound, base=SingleInstanceTask)(sends_once(run))


SHAPES = {
    (decorator, bound, key_kind): _shape(decorator, bound, key_kind)
    for decorator in ("app", "shared")
    for bound in (True, False)
    for key_kind in SHAPE_KEYS
}


@shared_task(bind=True)
@single_instance(key="{customer_id}", on_conflict="skip", ttl=60)
def bill_as_documented(self: Task, customer_id: int) -> None:
    """The docs' own example, to the letter."""
    hold_until_ended()


@app.task(
    bind=True,
    autoretry_for=(ConnectionError,),
    name="shape.app.autoretry.template",
    base=SingleInstanceTask,
)
@single_instance(key="{customer_id}-{kind}", ttl=60, enqueue="skip")
def autoretrying(self: Task, customer_id: int, kind: str = "monthly") -> None:
    """A bound task whose ``run`` Celery wraps (autoretry_for) in an attribute of the task."""
    hold_until_ended()


class MethodShape(SingleInstanceTask):
    """A task class whose ``run`` method is decorated."""

    name = "shape.class.method.template"

    @single_instance(key="{customer_id}-{kind}", ttl=60, enqueue="skip")
    def run(self, customer_id: int, kind: str = "monthly") -> None:
        hold_until_ended()


method_shape = app.register_task(MethodShape())
