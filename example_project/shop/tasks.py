"""Celery tasks of the shop, each kept from running twice at once by ``@single_instance``.

Run a worker from example_project/: ``REDIS_URL=redis://127.0.0.1:6379/0 celery -A example
worker``. Each billing run is recorded in Redis, so the demo can count the runs.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Task, shared_task

from django_redis_lock.celery import SingleInstanceTask, single_instance
from shop.state import demo_key, redis_client, signal

#: Seconds a billing run takes: it stands for the calls to a payment provider.
BILLING_TIME = 1.0
#: Seconds the nightly report takes to add things up.
REPORT_TIME = 0.5


@shared_task(bind=True)
@single_instance(key="{customer_id}", on_conflict="skip", ttl=10)
def bill_customer(self: Task, customer_id: int) -> dict[str, Any]:
    """Bill one customer; a run that finds the same customer being billed returns None.

    The lock is ``celery:shop.tasks.bill_customer:<customer_id>``, so other customers are
    billed at the same time. Its 10 s lease is renewed while the run lasts; if the worker
    dies, the lock ends with the lease.
    """
    client = redis_client()
    try:
        started = time.time()
        # Tells whoever waits (the demo) that the run holds the lock now.
        signal(client, f"billing:{customer_id}")
        time.sleep(BILLING_TIME)
        run = {
            "customer_id": customer_id,
            "task_id": self.request.id,
            "worker_pid": os.getpid(),
            "started": started,
            "ended": time.time(),
        }
        client.rpush(demo_key("billed"), json.dumps(run))
    finally:
        client.close()
    return run


@shared_task(bind=True, base=SingleInstanceTask)
@single_instance(on_conflict="skip", ttl=60, enqueue="skip")
def nightly_report(self: Task) -> dict[str, Any]:
    """Sum up the billing runs; one report at a time, however often beat or a user sends it.

    With no ``key``, the lock is the task's own: ``celery:shop.tasks.nightly_report``. With
    ``enqueue="skip"``, a send while a report is queued or running sends nothing and returns
    that report's result: its class, ``SingleInstanceTask``, refuses the duplicate.
    """
    client = redis_client()
    try:
        runs = billing_runs(client)
        time.sleep(REPORT_TIME)
    finally:
        client.close()
    return {
        "runs": len(runs),
        "customers": sorted({run["customer_id"] for run in runs}),
        "task_id": self.request.id,
    }


def billing_runs(client: redis.Redis) -> list[dict[str, Any]]:
    """Return the billing runs recorded so far, oldest first."""
    return [json.loads(run) for run in client.lrange(demo_key("billed"), 0, -1)]
