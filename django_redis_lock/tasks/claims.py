"""Refusing duplicates when they are enqueued: ``@single_instance(enqueue="skip" | "raise")``.

The design is Celery's (:mod:`django_redis_lock.celery.enqueue`), on the claim that
:mod:`django_redis_lock._single_instance` writes once. ``enqueue()`` or ``aenqueue()`` of a
task first claims ``queued:<its lock name>`` in one atomic acquire, and only then hands the
task to its backend. An enqueue that finds the claim held enqueues nothing: it returns the
:class:`TaskResult` of the task that holds it (``"skip"``) or raises
:class:`~django_redis_lock.DuplicateTaskError` (``"raise"``).

``django.tasks`` gives a task's result id only once the backend has enqueued it, so the claim
is taken under a random owner and names its task a moment later (the claim's metadata gets
the result id, atomically). A run finds its claim by that id when it starts, takes it over
(renewed with the run's lock, on the run's lease) and frees it when it ends, whichever way.

No ``django.tasks`` backend tells anyone that a queued task was dropped, or that the worker
running it was killed. A claim is therefore bounded by leases: ``enqueue_ttl`` seconds (plus
the wait until ``run_after``) while the task waits in its queue, the run's ``ttl`` while it
runs.

Enqueues come here from :class:`~.task_class.SingleInstanceTask`, the task class a backend
supplies (its ``task_class``); the ``Task`` class of ``django.tasks`` is never changed.
``ImmediateBackend`` runs a task inside its ``enqueue()``: there the run's own lock decides,
as Celery's eager mode does.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone

from .._single_instance.config import SingleInstance
from .._single_instance.enqueue_claim import NAMING_WAIT, claim, claim_metadata, claim_name
from .._single_instance.run_rate import TaskRateLimit
from ..backends.base import AcquireRequest, BaseLockBackend, ReleaseRequest
from ..exceptions import DuplicateTaskError, LockError
from ..handler import locks
from ..listing import task_id
from ..lock import Lock
from ._compat import ImmediateBackend, Task, TaskResult

#: The settings of a task decorator, whose ``signature`` its key reads.
C = TypeVar("C", SingleInstance, TaskRateLimit)

__all__ = [
    "RUNNER",
    "check_backend",
    "claiming_config",
    "config_of",
    "enqueue_claimed",
    "free_queued_claim",
    "release_claim",
    "take_over_claim",
]

logger = logging.getLogger("django_redis_lock")

#: What a ``django.tasks`` run records as its task queue (see :class:`~.listing.TaskRecord`).
RUNNER = "django.tasks"

#: How often an enqueue frees a claim naming a finished task, and claims again.
STALE_ATTEMPTS = 3

#: The lease of a claim until it names its task (seconds). An enqueue killed, or cut off
#: from Redis, after its backend enqueued and before it named the claim leaves a claim that
#: no run and no enqueue can tie to a task: it ends this soon, not after ``enqueue_ttl``.
NAMING_LEASE = 60.0


def config_of(task: Task[Any, Any]) -> SingleInstance | None:
    """Return the ``@single_instance`` settings of ``task`` as its enqueue sees its arguments.

    None if it has none. A task that takes its context gets it in front of the arguments
    given to ``enqueue()``: the settings then read the arguments after it.
    """
    config = getattr(task.func, "__single_instance__", None)
    if not isinstance(config, SingleInstance):
        return None
    return without_context(config) if task.takes_context else config


def without_context(config: C) -> C:
    """Return ``config`` for the arguments after a task's first one, its context."""
    parameters = list(config.signature.parameters.values())[1:]
    return dataclasses.replace(config, signature=config.signature.replace(parameters=parameters))


def check_backend(task: Task[Any, Any]) -> None:
    """Refuse, when ``task`` is defined, what its backend cannot do for its settings.

    ``on_conflict="retry"`` enqueues the task again to run later: only a backend that
    ``supports_defer`` can. ``enqueue="skip"`` returns the result of the task found queued:
    only a backend that ``supports_get_result`` can (``ImmediateBackend`` aside: it runs the
    task in ``enqueue()``, so nothing is ever queued).
    """
    config = config_of(task)
    if config is None:
        return
    backend = task.get_backend()
    where = f"{task.module_path}'s backend {task.backend!r} ({type(backend).__name__})"
    if config.on_conflict == "retry" and not backend.supports_defer:
        raise ImproperlyConfigured(
            f"single_instance on_conflict='retry' enqueues the task again with run_after, "
            f"which {where} does not support (supports_defer is False). Use 'wait', 'skip' "
            "or 'raise'."
        )
    if config.enqueue == "skip" and not (
        backend.supports_get_result or isinstance(backend, ImmediateBackend)
    ):
        raise ImproperlyConfigured(
            f"single_instance enqueue='skip' returns the result of the task found queued, "
            f"which {where} cannot read back (supports_get_result is False). Use "
            "enqueue='raise'."
        )


def claiming_config(task: Task[Any, Any]) -> SingleInstance | None:
    """Return the settings of ``task`` if its enqueue claims, else None.

    None for a task without ``enqueue=``, and on a backend that runs the task right away.
    """
    config = config_of(task)
    if config is None or config.enqueue == "allow":
        return None
    return None if isinstance(task.get_backend(), ImmediateBackend) else config


def enqueue_claimed(
    task: Task[Any, Any],
    config: SingleInstance,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    enqueue: Callable[[], TaskResult[Any, Any]],
) -> TaskResult[Any, Any]:
    """Enqueue ``task`` by ``enqueue``, claiming first; return the holder's result if held.

    Raise :class:`~django_redis_lock.DuplicateTaskError` for ``enqueue="raise"``.
    """
    name = claim_name(config.lock_name(task.module_path, args, kwargs))
    backend, owner = locks[config.using], f"task-queued:{secrets.token_hex(16)}"
    record = config.record(task.module_path, args, kwargs, runner=RUNNER, task_id=None)
    lease = config.enqueue_ttl + _delay(task)
    request = AcquireRequest(
        ttl=min(lease, NAMING_LEASE), metadata=claim_metadata(record), limit=config.limit
    )
    for _ in range(STALE_ATTEMPTS):
        try:
            holder = claim(config, task.module_path, name, owner, request)
        except DuplicateTaskError as exc:
            if exc.task_id is None or not _freed_if_finished(task, config, name, exc.task_id):
                raise
            continue
        if holder is None:
            break
        found = _result(task, holder, name)
        if not (found.is_finished and _free_stale(config, name, holder)):
            return found
    else:
        raise DuplicateTaskError(
            f"Did not enqueue {task.module_path}: {name!r} kept naming finished tasks.",
            lock_name=name,
        )
    try:
        result = enqueue()
    except BaseException:
        backend.release(name, owner, ReleaseRequest(holds=1))  # nothing was enqueued
        raise
    # The claim names its task now that the backend gave it an id (runs and enqueues look
    # for that id). It gets its full lease once the task is surely enqueued: a task enqueued
    # in an open transaction (DatabaseBackend's) is gone if it rolls back, and its claim
    # must then end soon. The task is enqueued whatever happens here: a claim left unnamed
    # ends with its short lease.
    record["task_id"] = result.id
    pending = [c.alias for c in connections.all(initialized_only=True) if c.in_atomic_block]
    short = min(lease, NAMING_LEASE) if pending else lease
    _lengthen(backend, name, owner, short, result.id, metadata=claim_metadata(record))
    for alias in pending:
        later = functools.partial(_lengthen, backend, name, owner, lease, result.id)
        transaction.on_commit(later, using=alias)
    return result


def _lengthen(
    backend: BaseLockBackend,
    name: str,
    owner: str,
    lease: float,
    result_id: str,
    *,
    metadata: bytes | None = None,
) -> None:
    # Give the claim of result_id this lease; given metadata, name its task in it.
    try:
        left = backend.extend(name, owner, lease, replace=True, metadata=metadata)
    except LockError:
        logger.warning("Could not record task %s in its claim %r.", result_id, name, exc_info=True)
        return
    if left is None:
        logger.warning("The claim %r of task %s had ended already.", name, result_id)


def _freed_if_finished(
    task: Task[Any, Any], config: SingleInstance, name: str, result_id: str
) -> bool:
    # Whether the claim of result_id was stale (its task finished) and is now freed.
    if not task.get_backend().supports_get_result:
        return False
    try:
        finished = task.get_result(result_id).is_finished
    except Exception:
        return False
    return finished and _free_stale(config, name, result_id)


def _free_stale(config: SingleInstance, name: str, result_id: str) -> bool:
    # Free the claim naming a task that has finished: a run that did not see its claim named
    # in time (its enqueue was paused before naming it) could not free it. A claim kept for
    # a min_hold window is not stale.
    backend, freed = locks[config.using], False
    for info in backend.lock_info(name):
        if task_id(info) == result_id and info.min_hold_of is None:
            logger.warning("Freed the claim %r of task %s, which has finished.", name, result_id)
            freed = backend.release(name, info.owner, ReleaseRequest(holds=1)) is not None or freed
    return freed


def _delay(task: Task[Any, Any]) -> float:
    # How long the task waits before it may run: until its run_after.
    if task.run_after is None:
        return 0.0
    return max(0.0, (task.run_after - timezone.now()).total_seconds())


def _result(task: Task[Any, Any], result_id: str, name: str) -> TaskResult[Any, Any]:
    try:
        return task.get_result(result_id)
    except Exception as exc:
        raise DuplicateTaskError(
            f"Did not enqueue {task.module_path}: task {result_id} holds {name!r}, and its "
            f"result could not be read ({exc!r}).",
            lock_name=name,
            task_id=result_id,
        ) from exc


def take_over_claim(
    config: SingleInstance, lock_name: str, result_id: str, metadata: dict[str, Any]
) -> tuple[Lock, float] | None:
    """Take over, for the run of the task ``result_id`` holding ``lock_name``, its claim.

    Return the claim, renewed on the run's lease until :func:`release_claim`, and the
    ``min_hold`` window its release keeps (measured from the enqueue, so it ends with the
    run's own window); None when the task holds no claim.
    """
    if config.enqueue == "allow":
        return None
    backend, name = locks[config.using], claim_name(lock_name)
    try:
        found = _claim_owner(config, name, result_id)
        if found is None:
            return None
        owner, age = found
        # From the enqueue's long lease to the run's (a worker killed frees it soon), and
        # only then held, renewed: renewal is timed by the lease the acquire answers.
        lease = config.ttl or backend.default_ttl
        record = claim_metadata(metadata)
        if backend.extend(name, owner, lease, replace=True, metadata=record) is None:
            return None  # it lapsed meanwhile
        claim = Lock(
            name,
            ttl=config.ttl,
            using=config.using,
            limit=config.limit,
            owner=owner,
            auto_renew=True,
        )
        if not claim.acquire(blocking=False):
            return None
    except LockError:
        logger.warning("Could not take over the claim %r.", name, exc_info=True)
        return None
    return claim, config.min_hold and config.min_hold + age


def _claim_owner(config: SingleInstance, name: str, result_id: str) -> tuple[str, float] | None:
    # The owner of the claim naming result_id, and its age. A claim not naming any task yet
    # may be this run's (its enqueue is about to name it): wait for it, a little.
    deadline = time.monotonic() + NAMING_WAIT
    while True:
        holders = locks[config.using].lock_info(name)
        for info in holders:
            if task_id(info) == result_id:
                return info.owner, info.held_for
        if time.monotonic() > deadline or all(task_id(info) for info in holders):
            return None
        time.sleep(0.02)


def release_claim(
    config: SingleInstance, lock_name: str, result_id: str | None, taken: tuple[Lock, float] | None
) -> None:
    """Free the claim of the run of ``result_id``, now that it ended; safe to repeat.

    A claim the run took over is kept for its ``min_hold`` window; one held by another task
    is left alone.
    """
    if config.enqueue == "allow" or result_id is None:
        return
    backend, name = locks[config.using], claim_name(lock_name)
    try:
        if taken is not None:
            claim, window = taken
            owner = claim.owner or ""
            claim._forget(owner)
            backend.release(name, owner, ReleaseRequest(holds=1, min_hold=window))
            return
        for info in backend.lock_info(name):
            if task_id(info) == result_id:
                backend.release(name, info.owner, ReleaseRequest(holds=1))
    except LockError:
        logger.warning("Could not free the claim %r.", name, exc_info=True)


def free_queued_claim(
    task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], result_id: str
) -> None:
    """Free the claim that the task ``result_id`` holds, before it enqueues itself again.

    For a run that a decorator refused before ``@single_instance`` took its claim over
    (``@rate_limit`` above it): the retry's ``enqueue()`` claims anew, and would otherwise
    find this run's claim and refuse itself. Nothing to do for a task without ``enqueue=``.
    """
    config = claiming_config(task)
    if config is not None:
        release_claim(config, config.lock_name(task.module_path, args, kwargs), result_id, None)
