"""The worker's main process: free the lock of a run whose child process ended abnormally.

Celery's ``task_received`` signal is connected when :mod:`django_redis_lock.celery` is
imported, which a worker does when it loads the tasks that use ``@single_instance``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task
from celery.signals import task_received

from ._celery_keys import config_of
from .handler import locks

__all__ = ["CHILD_EXIT_WAIT", "release_run", "run_owner"]

logger = logging.getLogger("django_redis_lock")

#: How long the worker's main process waits for a timed-out child to exit before it frees the
#: child's lock itself (a child that outlives this keeps, and frees, its lock on its own).
CHILD_EXIT_WAIT = 60.0


def run_owner(task_id: str, pid: int) -> str:
    """Return the owner token of the run of task ``task_id`` in process ``pid``.

    The task id alone would not do: a retried or redelivered run has the same id, and must not
    share (or free) the hold of the run before it.
    """
    return f"celery:{task_id}:{pid}"


def release_run(
    task: Task, task_id: str, pid: int, args: Sequence[Any], kwargs: dict[str, Any]
) -> int:
    """Free the lock that the run of ``task`` in process ``pid`` holds; safe to repeat.

    For a worker's main process whose child ran the task and died or was killed: only that
    run's hold is freed, whatever other runs hold. ``args`` and ``kwargs`` are the task
    message's, as the worker's request has them (without the task of a bound task). Return
    how many holds were freed.
    """
    config = config_of(task)
    if config is None:
        return 0
    name = config.message_lock_name(task, args, kwargs)
    freed = locks[config.using].force_release(name, owner=run_owner(task_id, pid))
    if freed:
        logger.warning(
            "Freed lock %r of task %s[%s], whose run ended abnormally.", name, task.name, task_id
        )
    return freed


def _watch_request(sender: object = None, request: Any = None, **kwargs: Any) -> None:
    # In the worker's main process: when the pool reports that the run's child was killed,
    # terminated or went past its hard time limit, free the run's lock, as soon as the child
    # is gone (the pool reports a time limit before it kills the child, and a child may
    # ignore SIGTERM for a while), and before Celery's own handler publishes a retry when the
    # child is gone already. Celery versions differ in which signals they send on these
    # paths; these handlers are called on all of them.
    task = getattr(request, "task", None)
    if task is None or config_of(task) is None:
        return

    def release(pid: int) -> None:
        try:
            release_run(task, request.id, pid, request.args, request.kwargs)
        except Exception:
            logger.exception("Could not free the lock of task %s[%s].", task.name, request.id)

    def release_once_gone() -> None:
        pid: int | None = request.worker_pid
        if pid is None or pid == os.getpid():
            return  # never started, or ran in this process (a non-forking pool)
        if _process_gone(pid):
            release(pid)
        else:
            threading.Thread(
                target=_release_when_gone, args=(pid, release), name="drl-release", daemon=True
            ).start()

    on_failure, on_timeout = request.on_failure, request.on_timeout

    def failed(*args: Any, **kwargs: Any) -> Any:
        # Only the pool's error callback (a child lost, terminated or out of time) comes
        # here without return_ok: a body that raised or retried reports through on_success,
        # with return_ok=True, and its own run has freed the lock already.
        if not kwargs.get("return_ok", False):
            release_once_gone()
        return on_failure(*args, **kwargs)

    def timed_out(soft: bool, timeout: float) -> Any:
        if not soft:
            release_once_gone()
        return on_timeout(soft, timeout)

    request.on_failure = failed
    request.on_timeout = timed_out


def _release_when_gone(pid: int, release: Callable[[int], None]) -> None:
    deadline = time.monotonic() + CHILD_EXIT_WAIT
    while not _process_gone(pid):
        if time.monotonic() > deadline:
            return  # still alive: its own renewal keeps (and its exit releases) the lock
        time.sleep(0.02)
    release(pid)


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # dead, not reaped
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)  # no /proc: ask the kernel
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


# Connected here rather than with the decorator form, which Celery does not type.
task_received.connect(_watch_request, weak=False)
