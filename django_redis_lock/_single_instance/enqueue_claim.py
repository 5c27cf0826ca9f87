"""The claim of ``enqueue=``: a duplicate is refused when it is sent, not when it runs.

A send takes the claim ``queued:<lock name>`` for the task about to be sent, in one atomic
acquire, before the task reaches the queue; the run frees it when it ends, whichever way. Each
task queue says how it names the claim's owner and when it frees it (``celery/enqueue.py`` and
``celery/worker.py``; ``tasks/claims.py``); the rule for a claim found held is here.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .._core.lock_arguments import HOST
from ..backends.base import AcquireRequest, ReleaseRequest, holder_metadata
from ..exceptions import DuplicateTaskError
from ..handler import locks
from ..listing import describe_holder, task_id
from .config import SingleInstance

__all__ = ["CLAIM_PREFIX", "NAMING_WAIT", "claim", "claim_metadata", "claim_name"]

logger = logging.getLogger("django_redis_lock")

#: The claim of a queued or running ``enqueue=`` task is named this, then its lock's name.
CLAIM_PREFIX = "queued:"

#: How often a send tries again when a claim it found held was freed before it could tell
#: by whom.
CLAIM_ATTEMPTS = 3

#: How long a send waits for a claim it found held to name its task: one taken a moment ago
#: names it once its send has the id from the queue (``django.tasks`` gives it late).
NAMING_WAIT = 2.0


def claim_name(lock_name: str) -> str:
    """Return the name of the claim that a queued or running task with ``lock_name`` holds."""
    return f"{CLAIM_PREFIX}{lock_name}"


def claim_metadata(record: dict[str, Any]) -> bytes:
    """Return the holder metadata of a claim taken by a send in this thread."""
    return holder_metadata(
        host=HOST, pid=os.getpid(), thread=threading.current_thread().name, data=record
    )


def claim(
    config: SingleInstance,
    task_name: str,
    name: str,
    owner: str,
    request: AcquireRequest,
    *,
    again: bool = False,
) -> str | None:
    """Claim ``name`` for a task about to be sent; return None, or the task id holding it.

    The claim is taken for ``owner`` in one atomic acquire. When another send holds it, the
    answer is that task's id (``enqueue="skip"``: the caller returns its result instead of
    sending), or :class:`~django_redis_lock.DuplicateTaskError` is raised (``"raise"``, or
    no id to return). An owner that holds the claim already is the same task sent twice: it
    is refused the same way, unless ``again`` says it is the task itself sent on (a retry),
    which keeps the claim whatever the acquire found.
    """
    backend = locks[config.using]
    for _ in range(CLAIM_ATTEMPTS):
        taken = backend.acquire(name, owner, request)
        if again or (taken.acquired and taken.holds == 1):
            return None
        if taken.acquired:  # this owner held it already: the same task sent twice
            backend.release(name, owner, ReleaseRequest(holds=taken.holds))
        holder = _holder_of(config, task_name, name)
        if holder is not None:
            return holder
    raise DuplicateTaskError(
        f"Did not send {task_name}: its claim {name!r} was taken and freed "
        f"{CLAIM_ATTEMPTS} times while sending.",
        lock_name=name,
    )


def _holder_of(config: SingleInstance, task_name: str, name: str) -> str | None:
    # The task id holding the claim, or raise; None if the claim was freed meanwhile. A claim
    # taken a moment ago may not name its task yet: its send records the id once it has it.
    backend = locks[config.using]
    deadline = time.monotonic() + NAMING_WAIT
    while True:
        holders = backend.lock_info(name)
        ids = [found for info in holders if (found := task_id(info)) is not None]
        if not holders or ids or config.enqueue != "skip" or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if not holders:
        return None
    if config.enqueue == "raise" or not ids:
        holder = "; ".join(describe_holder(info) for info in holders)
        raise DuplicateTaskError(
            f"Did not send {task_name}: an instance with the same key is queued or running "
            f"({name!r} is held by {holder}).",
            lock_name=name,
            task_id=ids[0] if ids else None,
        )
    logger.info("Did not send %s: it is queued or running as %s.", task_name, ids[0])
    return ids[0]
