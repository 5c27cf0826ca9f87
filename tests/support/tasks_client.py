"""Enqueue the test tasks of ``tests.support.tasks`` for the django-tasks-db worker tests.

Run as ``python -m tests.support.tasks_client`` with ``tests.support.tasks_worker_settings``.
Each line read is a JSON list of calls, ``{"task": name, "args": [...], "kwargs": {...},
"countdown": seconds or null}``; the calls are enqueued at once, one thread each, and one
JSON line answers, an outcome per call: ``{"id": result id}`` or ``{"error": class name,
"task_id": ..., "message": ...}``.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from typing import Any

import django


def enqueue_all(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Enqueue ``calls`` from one thread each, all let go at the same moment."""
    from django.db import connections
    from django.utils import timezone

    from tests.support import tasks

    start = threading.Barrier(len(calls))
    outcomes: list[dict[str, Any]] = [{} for _ in calls]

    def enqueue(index: int, call: dict[str, Any]) -> None:
        task = getattr(tasks, call["task"])
        if call.get("countdown") is not None:
            later = timezone.now() + dt.timedelta(seconds=call["countdown"])
            task = task.using(run_after=later)
        start.wait()
        try:
            outcomes[index] = {"id": str(task.enqueue(*call["args"], **call["kwargs"]).id)}
        except Exception as exc:
            outcomes[index] = {
                "error": type(exc).__name__,
                "task_id": getattr(exc, "task_id", None),
                "message": str(exc),
            }
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=enqueue, args=(index, call)) for index, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def main() -> None:
    django.setup()
    for line in sys.stdin:
        print(json.dumps(enqueue_all(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
