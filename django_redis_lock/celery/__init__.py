"""``@single_instance``: at most one running instance of a Celery task, per task or per key.

::

    from celery import shared_task
    from django_redis_lock.celery import single_instance

    @shared_task(bind=True)
    @single_instance(key="{customer_id}", on_conflict="skip", ttl=60)
    def bill(self, customer_id): ...

The lock is taken when the task's body starts (so beat, chains, chords, ``send_task``,
``apply()`` and eager mode are all covered) and held, renewed, only while it runs. Its owner
is the run: each delivery of a message gets a random run id from the worker's main process,
so two deliveries of one task id never share a hold, and that process can free the lock of a
child that died: it does so at once when the child is killed, hits the hard time limit or is
terminated by a revoke; a whole worker killed frees its locks when their short leases end. A
``self.retry()`` frees the lock before the retry is published, so the retried run can take it.

Only this module, and the private modules it uses, import Celery
(``pip install django-redis-lock[celery]``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar

from .._core.extras import missing_extra

try:
    from celery import Task, current_app
    from celery._state import get_current_task
    from celery.signals import before_task_publish
except ImportError as exc:
    raise missing_extra(
        exc, feature="django_redis_lock.celery", package="Celery", extra="celery"
    ) from exc

from .._single_instance.config import configure
from .._single_instance.refusal import refuse_run
from ..conf import DEFAULT_ALIAS
from ..exceptions import LockNotAcquiredError
from ..lock import Lock
from .enqueue import SingleInstanceTask, report_unclaimed, take_over_claim
from .rate_limited import rate_limit
from .run_names import (
    MAX_READABLE_NAME,
    QUEUE,
    Enqueue,
    KeySpec,
    Policy,
    SingleInstance,
    config_of,
    task_record,
)
from .worker import (
    CHILD_EXIT_WAIT,
    RUN_ID_FIELD,
    new_run_id,
    release_claim,
    release_run,
    run_id_of,
    run_owner,
)

__all__ = [
    "CHILD_EXIT_WAIT",
    "MAX_READABLE_NAME",
    "SingleInstance",
    "SingleInstanceTask",
    "config_of",
    "rate_limit",
    "release_claim",
    "release_run",
    "run_owner",
    "single_instance",
]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")

#: Locks of the task runs in this process, by run id (for releasing before a retry).
_running: dict[str, Lock] = {}


def single_instance(
    key: KeySpec = None,
    *,
    on_conflict: Policy = "skip",
    ttl: float | None = None,
    timeout: float | None = None,
    then: Literal["skip", "raise"] = "skip",
    limit: int = 1,
    using: str = DEFAULT_ALIAS,
    countdown: float | None = None,
    max_retries: int | None = None,
    enqueue: Enqueue = "allow",
    enqueue_ttl: float = 3600.0,
    min_hold: float = 0.0,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Let at most ``limit`` runs of the decorated task run at once (per ``key``).

    Put it under ``@app.task``/``@shared_task``. ``key`` narrows the lock to some arguments:
    a format template over their names (``"{customer_id}"``), a list of names, or a callable
    taking the task's arguments; model instances count by primary key. In the values a
    template or a list puts into the lock name, ``%`` becomes ``%25`` and ``:`` becomes
    ``%3A``, so ``("x:y", "z")`` and ``("x", "y:z")`` never share a lock; a callable's result
    is used as it is. ``on_conflict`` says
    what a run does when the lock is held: ``"skip"`` (log a warning, return None),
    ``"raise"`` (:class:`~django_redis_lock.LockNotAcquiredError`), ``"retry"`` (Celery
    retry after ``countdown`` seconds, by default when the holder's lease ends, within
    ``max_retries``) or ``"wait"`` (up to ``timeout`` seconds, then as ``then`` says).
    ``ttl`` is the lease, renewed while the body runs.

    ``enqueue`` refuses duplicates when they are sent, by a task whose class is
    :class:`SingleInstanceTask` (``@shared_task(base=SingleInstanceTask)``): with ``"skip"``
    or ``"raise"``, ``delay()`` and ``apply_async()`` of a run whose key is queued or running
    send nothing and return the :class:`~celery.result.AsyncResult` of that one, or raise
    :class:`~django_redis_lock.DuplicateTaskError`. A message never run holds its claim for
    at most ``enqueue_ttl`` seconds (plus its countdown).

    ``min_hold`` keeps the lock (and the claim of ``enqueue``) held until at least that many
    seconds after the run took it, however soon the body ends: a duplicate within that window
    meets ``on_conflict`` (or ``enqueue``), as if the run were still running.
    """
    settings = configure(
        queue=QUEUE,
        key=key,
        on_conflict=on_conflict,
        ttl=ttl,
        timeout=timeout,
        then=then,
        limit=limit,
        using=using,
        countdown=countdown,
        max_retries=max_retries,
        enqueue=enqueue,
        enqueue_ttl=enqueue_ttl,
        min_hold=min_hold,
    )

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = settings.of(func)

        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            result: R | None = _run_single(config, func, args, kwargs)
            return result

        run.__single_instance__ = config  # type: ignore[attr-defined]
        # For tools that do not follow __wrapped__, such as Celery's argument check.
        run.__signature__ = config.signature  # type: ignore[attr-defined]
        return run

    return decorate


def _run_single(
    config: SingleInstance, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    task = get_current_task()
    task_name = task.name if task is not None else f"{func.__module__}.{func.__qualname__}"
    run_id = None if task is None or task.request.id is None else _run_id(task.request)
    name = config.lock_name(task_name, args, kwargs)
    request = None if task is None else task.request
    metadata = task_record(
        task_name,
        config,
        args,
        kwargs,
        task_id=None if request is None else request.id,
        hostname=None if request is None else request.hostname,
        worker_pid=os.getpid(),
    )
    owner = None if run_id is None else run_owner(run_id)
    held = Lock(name, **config.lock_options(owner=owner, metadata=metadata))
    try:
        held._enter()
    except LockNotAcquiredError:
        return _conflict(config, task, held)
    if run_id is not None:
        _running[run_id] = held
        take_over_claim(task, config, name, run_id, metadata)
    try:
        result = func(*args, **kwargs)
    except BaseException as exc:
        # The body's exception (a Retry among them) wins over a lost lease, which is logged
        # and signalled all the same. A lock released before a retry is not released again.
        held._leave(exc)
        raise
    finally:
        if run_id is not None:
            _running.pop(run_id, None)
    held._leave()
    return result


def _run_id(request: Any) -> str:
    # The worker's main process gave each delivery its own run id. Eager runs, apply() and a
    # worker that did not run that hook come without one: the run makes its own and keeps it
    # on its request, where a retry it asks for finds it.
    run_id = run_id_of(request)
    if run_id is None:
        run_id = new_run_id()
        setattr(request, RUN_ID_FIELD, run_id)
    return run_id


def _conflict(config: SingleInstance, task: Task | None, held: Lock) -> Any:
    def retry(countdown: float, exc: LockNotAcquiredError) -> None:
        assert task is not None
        raise task.retry(countdown=countdown, max_retries=config.max_retries, exc=exc)

    refuse_run(
        config, held.name, held.backend.lock_info(held.name), None if task is None else retry
    )
    return None


def _release_before_retry(
    sender: str | None = None, headers: dict[str, Any] | None = None, **kwargs: Any
) -> None:
    # A run that calls self.retry() publishes its next run (same task id) before it ends:
    # free the lock first, so that run can take it.
    if not headers:
        return
    _report_unclaimed_send(sender)
    # A run id names one delivery: no message sent from here carries it on (Celery copies a
    # request's unknown fields into the headers of its retry).
    headers.pop(RUN_ID_FIELD, None)
    task = get_current_task()
    if task is None or task.request.id is None or headers.get("id") != task.request.id:
        return
    run_id = run_id_of(task.request)
    held = None if run_id is None else _running.pop(run_id, None)
    if held is not None and held.fencing_token is not None:
        held.release()


def _report_unclaimed_send(name: str | None) -> None:
    # A send of a task with enqueue= whose class does not claim: say so in the sender too.
    task = None if name is None else current_app.tasks.get(name)
    config = None if task is None else config_of(task)
    if task is not None and config is not None and config.enqueue != "allow":
        report_unclaimed(task, config)


# Connected here rather than with the decorator form, which Celery does not type.
before_task_publish.connect(_release_before_retry, weak=False)
