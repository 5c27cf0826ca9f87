"""Each delivery's run id, and the worker's main process freeing the lock of a dead child.

A run's lock is held by the owner ``celery:<run id>``. The run id is random and new for each
delivery of a task message: the worker's main process makes one when it receives the message
(Celery's ``task_received`` signal) and puts it into the request that the pool sends to the
process running the body, where Celery makes it an attribute of ``task.request``. Two
deliveries of one task id therefore never share an owner, in any pool (prefork, threads,
gevent, eventlet, solo) nor across workers whose children have the same process id (PID
namespaces), and the main process still knows the owner of the run its dead child held.

The signal is connected when :mod:`django_redis_lock.celery` is imported, which a worker does
when it loads the tasks that use ``@single_instance``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import secrets
from collections.abc import Sequence
from typing import Any

from celery import Task
from celery.exceptions import TimeLimitExceeded, WorkerLostError
from celery.signals import task_received, task_revoked

from ..backends.base import ReleaseRequest
from ..handler import locks
from . import children
from .children import ChildWatch
from .run_names import SingleInstance, claim_name, claim_owner, config_of, message_lock_name

__all__ = [
    "CHILD_EXIT_WAIT",
    "RUN_ID_FIELD",
    "keep_claim",
    "new_run_id",
    "release_claim",
    "release_run",
    "resending",
    "run_id_of",
    "run_owner",
]

logger = logging.getLogger("django_redis_lock")

#: How long the worker's main process waits for a timed-out or terminated child to exit before
#: it frees the child's lock and claim itself (a child that outlives this keeps, and frees,
#: its lock on its own).
CHILD_EXIT_WAIT = 60.0

#: The key of the run id in a worker's request dict, and so the attribute of ``task.request``.
RUN_ID_FIELD = "django_redis_lock_run_id"

_RUN_ID = re.compile(r"[0-9a-f]{32}")

#: Task ids whose retry this process is sending for a lost child (``retry_on_worker_lost``):
#: the send is the instance itself, and keeps its claim.
resending: set[str] = set()


def new_run_id() -> str:
    """Return a new run id: 128 random bits from :mod:`secrets`, in hexadecimal."""
    return secrets.token_hex(16)


def run_id_of(request: Any) -> str | None:
    """Return the run id that the worker's main process gave this task request, if any."""
    run_id = getattr(request, RUN_ID_FIELD, None)
    return run_id if isinstance(run_id, str) and _RUN_ID.fullmatch(run_id) else None


def run_owner(run_id: str) -> str:
    """Return the owner token of the run ``run_id``."""
    return f"celery:{run_id}"


def release_run(task: Task, run_id: str, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """Free the lock that the run ``run_id`` of ``task`` holds; safe to repeat.

    For a worker's main process whose child ran the task and died or was killed: only that
    run's hold is freed, whatever other runs hold. ``args`` and ``kwargs`` are the task
    message's, as the worker's request has them (without the task of a bound task). Return
    how many holds were freed.
    """
    config = config_of(task)
    if config is None:
        return 0
    name = message_lock_name(config, task, args, kwargs)
    backend, owner = locks[config.using], run_owner(run_id)
    if config.min_hold:  # the run's window is kept, as its own release would have kept it
        release = ReleaseRequest(holds=1, min_hold=config.min_hold)
        freed = int(backend.release(name, owner, release) is not None)
    else:
        freed = backend.force_release(name, owner=owner)
    if freed:
        logger.warning(
            "Freed lock %r of task %s (run %s), whose run ended abnormally.",
            name,
            task.name,
            run_id,
        )
    return freed


def release_claim(
    task: Task,
    task_id: str | None,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    min_hold: float | None = None,
) -> bool:
    """Free the claim that the task ``task_id`` of ``task`` holds as queued or running.

    For the end of a run of an ``enqueue=`` task, whichever way it ended; safe to repeat,
    and a claim held by another task id is left alone. ``args`` and ``kwargs`` are the task
    message's. The claim is kept for a ``min_hold`` window measured from when it was sent
    (default: the task's ``min_hold``). Return whether a claim was freed (or kept).
    """
    claim = _claim_of(task, task_id, args, kwargs)
    if claim is None:
        return False
    config, name, owner = claim
    window = config.min_hold if min_hold is None else min_hold
    release = ReleaseRequest(holds=1, min_hold=window)
    return locks[config.using].release(name, owner, release) is not None


def keep_claim(
    task: Task, task_id: str | None, args: Sequence[Any], kwargs: dict[str, Any]
) -> bool:
    """Keep the claim of the task ``task_id`` for its message put back on the queue.

    Its lease becomes the task's ``enqueue_ttl``, as when the message was sent. Return
    whether the task id held the claim.
    """
    claim = _claim_of(task, task_id, args, kwargs)
    if claim is None:
        return False
    config, name, owner = claim
    return locks[config.using].extend(name, owner, config.enqueue_ttl, replace=True) is not None


def _claim_of(
    task: Task, task_id: str | None, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[SingleInstance, str, str] | None:
    # The settings, claim name and owner of a message of an enqueue= task; None for others.
    config = config_of(task)
    if config is None or config.enqueue == "allow" or not task_id:
        return None
    return config, claim_name(message_lock_name(config, task, args, kwargs)), claim_owner(task_id)


def _watch_request(sender: object = None, request: Any = None, **kwargs: Any) -> None:
    # In the worker's main process: give the delivery its run id (the request dict is sent
    # to the pool after this signal). Once a child accepts the run, watch the child: if it
    # dies with the run (killed, terminated, past its hard time limit), free the run's lock at
    # once, not when the pool's maintenance next looks. When the pool reports that end, free
    # the lock and settle the claim as soon as the child is gone (the pool reports a time
    # limit before it kills the child, and a child may ignore SIGTERM for a while), and
    # before Celery's own handler publishes a retry when the child is gone already. Celery
    # versions differ in which signals they send on these paths; these handlers are called on
    # all of them.
    task = getattr(request, "task", None)
    request_dict = getattr(request, "request_dict", None)
    if task is None or config_of(task) is None or not isinstance(request_dict, dict):
        return
    # Set, not kept: a run id that came with the message names another delivery.
    run_id = request_dict[RUN_ID_FIELD] = new_run_id()

    def release(goes_on: bool) -> None:
        # The claim of a message that Celery requeues or retries goes on with it.
        try:
            release_run(task, run_id, request.args, request.kwargs)
            end_claim = keep_claim if goes_on else release_claim
            end_claim(task, request.id, request.args, request.kwargs)
        except Exception:
            logger.exception("Could not free the lock of task %s[%s].", task.name, request.id)

    child: list[ChildWatch] = []  # the watch of the run's child, once it accepted the run

    def free_run() -> None:
        # The child died with the run: free its lock now. Its claim waits for the pool's
        # report, which tells whether the message goes on.
        try:
            release_run(task, run_id, request.args, request.kwargs)
        except Exception:
            logger.exception("Could not free the lock of task %s[%s].", task.name, request.id)

    def release_once_gone(goes_on: bool) -> None:
        if child:  # else never started, or ran in this process (a non-forking pool)
            child[0].then(functools.partial(release, goes_on), CHILD_EXIT_WAIT)

    on_accepted, on_success = request.on_accepted, request.on_success

    def accepted(pid: int, time_accepted: float) -> Any:
        # Watched from now, while the pool cannot have reaped the child: its pid is its own.
        if pid != os.getpid():
            child.append(children.watch(pid, free_run))
        return on_accepted(pid, time_accepted)

    def succeeded(*args: Any, **kwargs: Any) -> Any:
        # The body returned or raised: it freed its lock itself.
        if child:
            child[0].cancel()
        return on_success(*args, **kwargs)

    on_failure, on_timeout = request.on_failure, request.on_timeout

    def failed(*args: Any, **kwargs: Any) -> Any:
        # Only the pool's error callback (a child lost, terminated or out of time) comes
        # here without return_ok: a body that raised or retried reports through on_success,
        # with return_ok=True, and its own run has freed the lock already.
        if kwargs.get("return_ok", False):
            return on_failure(*args, **kwargs)
        error = _error(args[0] if args else kwargs.get("exc_info"))
        retried = isinstance(error, WorkerLostError) and getattr(
            task, "retry_on_worker_lost", False
        )
        release_once_gone(_requeued(task, error) or bool(retried))
        if not retried:
            return on_failure(*args, **kwargs)
        resending.add(request.id)  # Celery sends the retry now, from this process
        try:
            return on_failure(*args, **kwargs)
        finally:
            resending.discard(request.id)

    def timed_out(soft: bool, timeout: float) -> Any:
        if not soft:
            release_once_gone(_requeued(task, TimeLimitExceeded(timeout)))
        return on_timeout(soft, timeout)

    request.on_accepted = accepted
    request.on_success = succeeded
    request.on_failure = failed
    request.on_timeout = timed_out


def _error(exc_info: Any) -> BaseException | None:
    error = getattr(exc_info, "exception", None)
    return getattr(error, "exc", error)  # unwrap an ExceptionWithTraceback


def _requeued(task: Task, error: BaseException | None) -> bool:
    # Whether Celery puts the message back on its queue after this failure (as
    # celery.worker.request.Request.on_failure decides).
    if not task.acks_late:
        return False
    if isinstance(error, TimeLimitExceeded):
        return not task.acks_on_timeout
    return bool(task.reject_on_worker_lost) and isinstance(error, WorkerLostError)


def _discarded(
    sender: Task | None = None, request: Any = None, terminated: bool = False, **kwargs: Any
) -> None:
    # In the worker's main process: a message revoked or expired before its run started is
    # discarded, and its claim freed. A run terminated by a revoke may still be running (a
    # child slow to obey SIGTERM): the pool reports its end, and its claim is freed then.
    if terminated or sender is None or request is None or config_of(sender) is None:
        return
    try:
        release_claim(sender, request.id, request.args or (), request.kwargs or {})
    except Exception:
        logger.exception("Could not free the claim of task %s[%s].", sender.name, request.id)


# Connected here rather than with the decorator form, which Celery does not type.
task_received.connect(_watch_request, weak=False)
task_revoked.connect(_discarded, weak=False)
