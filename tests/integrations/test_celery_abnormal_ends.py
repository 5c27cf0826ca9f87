"""A run that ends abnormally frees its lock at once, whatever the task's shape and key.

Every shape of task (``@app.task`` and ``@shared_task``, bound and not) under every kind of key
(none, template, list, callable), sent with positional arguments, keywords, a mix of both, or
with a default left out, on a real prefork worker; and a bound task with ``autoretry_for``, a
task class with a decorated ``run`` method and the docs' own example. Each way a run can end
abnormally (its child SIGKILLed, ``revoke(terminate=True)``, the hard time limit) ends all of
them at once; each lock, and the claim each run's message took when it was sent
(``enqueue="skip"``), must then be freed by the worker's main process, long before their 60 s
lease ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redis_lock import locks
from django_redis_lock.celery.run_names import claim_name
from tests.support import celery_harness

pytestmark = pytest.mark.slow

#: Seconds within which every lock must be freed: far less than their 60 s lease.
FREED_WITHIN = 20.0
#: The hard time limit of the runs of the time-limit test.
TIME_LIMIT = 4.0

SHAPES = [("app", True), ("app", False), ("shared", True), ("shared", False)]
KEYS = ["none", "template", "list", "callable"]
STYLES = ["args", "kwargs", "mixed", "defaults"]
ENDS = ["child SIGKILL", "revoke terminate", "hard time limit"]


@pytest.fixture(scope="module")
def worker(redis_url: str) -> Iterator[dict[str, Any]]:
    """A prefork worker with a child for every run of one test."""
    runs = len(SHAPES) * len(KEYS) + 3
    with celery_harness.running_worker(redis_url, "shapes", concurrency=runs) as worker:
        yield worker


@pytest.fixture
def shapes(worker: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The worker, with no event and no lock left from an earlier test."""
    with celery_harness.fresh(worker):
        yield worker


def send(task: Any, style: str, customer_id: int, **options: Any) -> tuple[str, str]:
    """Send one run of ``task`` in the given ``style``; return its task id and ``kind``."""
    if style == "args":
        args, kwargs, kind = (customer_id, "yearly"), {}, "yearly"
    elif style == "kwargs":
        args, kwargs, kind = (), {"customer_id": customer_id, "kind": "yearly"}, "yearly"
    elif style == "mixed":
        args, kwargs, kind = (customer_id,), {"kind": "yearly"}, "yearly"
    else:
        args, kwargs, kind = (customer_id,), {}, "monthly"
    return task.apply_async(args, kwargs, **options).id, kind


def expected_name(task_name: str, key: str, customer_id: int, kind: str) -> str:
    """Return the lock name the documentation gives for this run."""
    return {
        "none": f"celery:{task_name}",
        "template": f"celery:{task_name}:{customer_id}-{kind}",
        "list": f"celery:{task_name}:{customer_id}:{kind}",
        "callable": f"celery:{task_name}:c{customer_id}.{kind}",
    }[key]


@pytest.mark.parametrize("end", ENDS)
def test_abnormal_end__frees_the_lock_of_every_task_shape_at_once(
    shapes: dict[str, Any], end: str
) -> None:
    app, client, prefix = shapes["app"], shapes["client"], shapes["prefix"]
    options = {"time_limit": TIME_LIMIT} if end == "hard time limit" else {}
    sent: dict[str, tuple[str, str]] = {}  # task id: (what was sent, the lock it must take)
    for s, (decorator, bound) in enumerate(SHAPES):
        for k, key in enumerate(KEYS):
            # Each shape and each key meets every style across the test's cases and ends.
            style = STYLES[(s + k + ENDS.index(end)) % len(STYLES)]
            task = app.SHAPES[decorator, bound, key]
            customer_id = 100 + len(sent)
            task_id, kind = send(task, style, customer_id, **options)
            case = f"{task.name} sent with {style}"
            sent[task_id] = (case, expected_name(task.name, key, customer_id, kind))
    for task in (app.autoretrying, app.method_shape):
        style = STYLES[ENDS.index(end)]
        customer_id = 100 + len(sent)
        task_id, kind = send(task, style, customer_id, **options)
        case = f"{task.name} sent with {style}"
        sent[task_id] = (case, expected_name(task.name, "template", customer_id, kind))
    documented = app.bill_as_documented
    task_id = documented.apply_async((7,), **options).id
    sent[task_id] = ("the docs' example", f"celery:{documented.name}:7")

    starts = celery_harness.wait_for_events(client, prefix, "start", len(sent), timeout=60)
    taken = {sent[e["id"]][0]: e["lock"] for e in starts}
    assert taken == dict(sent.values()), "each run holds the lock its key gives"

    if end == "child SIGKILL":
        for event in starts:
            os.kill(event["pid"], signal.SIGKILL)
    elif end == "revoke terminate":
        app.app.control.revoke(list(sent), terminate=True, signal="SIGKILL")
    ended_at = time.monotonic()

    names = {name: case for case, name in sent.values()}
    # Every shape but the docs' example refuses duplicates when sent: its claim must go too.
    claims = {claim_name(name): f"{case}'s claim" for case, name in sent.values()}
    del claims[claim_name(f"celery:{documented.name}:7")]
    if end != "hard time limit":  # the first runs may be out of time before the last starts
        listed = {info.name for info in locks["default"].iter_locks()}
        assert claims.keys() <= listed, "each run holds its message's claim while it runs"
    names.update(claims)
    deadline = ended_at + FREED_WITHIN + (TIME_LIMIT if options else 0)
    while held := names.keys() & {info.name for info in locks["default"].iter_locks()}:
        assert time.monotonic() < deadline, (
            f"still held {FREED_WITHIN:g}s after the {end}: {sorted(names[name] for name in held)}"
        )
        time.sleep(0.05)
