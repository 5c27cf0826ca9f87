"""``@single_instance``: at most one running instance of a ``django.tasks`` task, per key.

::

    from django.tasks import task  # Django 6.0+; on 5.2: from django_tasks import task
    from django_redis_lock.tasks import single_instance

    @task()
    @single_instance(key="{customer_id}", ttl=60)
    def bill(customer_id): ...

The decorator is Celery's (:mod:`django_redis_lock.celery`), with the same key vocabulary,
policies, settings and records, written once in :mod:`django_redis_lock._single_instance`.
The lock is taken when the body starts, renewed while it runs, and freed when it ends. Each
run is an owner of its own, so a run never shares a hold with another, nested ones included.
No ``django.tasks`` worker tells anyone that it was killed: the lock of a run whose worker
died is freed when its lease (``ttl``) ends, and never sooner.

A run knows its task's result id from its context (``@task(takes_context=True)``) or from the
``task_started`` signal that every backend sends; it records it in its lock's metadata, so
listings and the admin show which task holds a lock.

Only this package imports ``django.tasks`` (or its backport, ``django-tasks``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import inspect
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.dispatch import receiver
from django.utils import timezone

from .._core.lock_arguments import HOST
from .._single_instance.config import KeySpec, SingleInstance, configure
from .._single_instance.refusal import refuse_run
from ..conf import DEFAULT_ALIAS
from ..exceptions import DuplicateTaskError, LockNotAcquiredError
from ..lock import AsyncLock, Lock
from ._compat import TaskResult, task_enqueued
from .claims import (
    RUNNER,
    C,
    claiming_config,
    release_claim,
    take_over_claim,
    without_context,
)
from .current import WRAPPER, before_retry, calling, result_of, split_context
from .task_class import SingleInstanceTask

__all__ = ["QUEUE", "KeySpec", "run_arguments", "single_instance"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")

#: The first part of a ``django.tasks`` run's lock name.
QUEUE = "task"

#: The tasks whose enqueues without a claim were reported already.
_reported: set[str] = set()


def run_arguments(
    config: C, wrapper: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[C, tuple[Any, ...], TaskResult[Any, Any] | None]:
    """Return what a run's key reads: ``config`` for its arguments, the arguments, its result.

    A task that takes its context gets it first: the key reads the arguments after it, and
    the context names the run's result; otherwise :func:`.current.result_of` finds it.
    """
    context, rest = split_context(args)
    config = without_context(config) if context is not None else config
    return config, rest, result_of(wrapper, context)


def single_instance(
    key: KeySpec = None,
    *,
    on_conflict: Literal["skip", "raise", "retry", "wait"] = "skip",
    ttl: float | None = None,
    timeout: float | None = None,
    then: Literal["skip", "raise"] = "skip",
    limit: int = 1,
    using: str = DEFAULT_ALIAS,
    countdown: float | None = None,
    enqueue: Literal["allow", "skip", "raise"] = "allow",
    enqueue_ttl: float = 3600.0,
    min_hold: float = 0.0,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Let at most ``limit`` runs of the decorated ``django.tasks`` task run at once.

    Put it under ``@task``; the function keeps its name, module and signature, so ``@task``
    accepts it and workers import it. Sync and ``async def`` functions both work.

    ``key`` narrows the lock to some arguments, as for Celery: a format template over their
    names (``"{customer_id}"``), a list of names, or a callable taking the task's arguments
    (a context, with ``takes_context=True``, is not one of them). ``on_conflict`` says what a
    run does when the lock is held: ``"skip"`` (log a warning, return None), ``"raise"``
    (:class:`~django_redis_lock.LockNotAcquiredError`), ``"wait"`` (up to ``timeout``
    seconds, then as ``then`` says) or ``"retry"`` (enqueue the task again with
    ``run_after`` ``countdown`` seconds on, by default when the holder's lease ends; only on
    a backend that ``supports_defer``, checked when the task is defined). ``ttl`` is the
    lease, renewed while the body runs; ``min_hold`` keeps the lock at least that long.

    ``enqueue="skip"`` or ``"raise"`` refuses duplicates when they are enqueued:
    ``enqueue()`` of a task whose key is queued or running enqueues nothing and returns
    that task's :class:`TaskResult`, or raises
    :class:`~django_redis_lock.DuplicateTaskError`, on a backend whose ``task_class`` is
    :class:`~django_redis_lock.tasks.SingleInstanceTask`. A task that never runs holds its
    claim for ``enqueue_ttl`` seconds (plus its wait until ``run_after``): see
    :mod:`django_redis_lock.tasks.claims`.
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
        enqueue=enqueue,
        enqueue_ttl=enqueue_ttl,
        min_hold=min_hold,
    )

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = settings.of(func)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def arun(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await _arun(config, arun, func, args, kwargs)

            wrapper: Callable[..., Any] = arun
        else:

            @functools.wraps(func)
            def run(*args: P.args, **kwargs: P.kwargs) -> Any:
                return _run(config, run, func, args, kwargs)

            wrapper = run
        wrapper.__single_instance__ = config  # type: ignore[attr-defined]
        wrapper.__signature__ = config.signature  # type: ignore[attr-defined]
        setattr(wrapper, WRAPPER, True)
        return wrapper

    return decorate


class _Run:
    """One run of a decorated task: its lock name, record, result and lock, for both drivers."""

    def __init__(
        self,
        config: SingleInstance,
        wrapper: Callable[..., Any],
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.config, self.args, self.result = run_arguments(config, wrapper, args)
        self.kwargs = kwargs
        self.task_name = f"{func.__module__}.{func.__qualname__}"
        self.name = self.config.lock_name(self.task_name, self.args, kwargs)
        self.record = self.config.record(
            self.task_name,
            self.args,
            kwargs,
            runner=RUNNER,
            task_id=self.result_id,
            hostname=HOST,
            worker_pid=os.getpid(),
        )
        # An owner of its own: a run nested in another (ImmediateBackend runs a task inside
        # the enqueue() of the body that sent it) never shares the other's hold.
        self.owner = f"task-run:{secrets.token_hex(16)}"
        self.claim: tuple[Lock, float] | None = None  # the task's claim, taken over
        self.claimed_at = 0.0
        self.claim_freed = False
        self.started_at: float | None = None  # when the body started, holding the lock

    def take_claim(self) -> None:
        """Take over the task's claim, if it has one, on the run's lease."""
        if self.result_id is not None:
            self.claim = take_over_claim(self.config, self.name, self.result_id, self.record)
            self.claimed_at = time.monotonic()

    def start(self) -> None:
        """Note that the run holds its lock, and its body starts."""
        self.started_at = time.monotonic()

    def free_claim_for_retry(self) -> None:
        """Free the task's claim now: a decorator inside this one enqueues the task again.

        Its body did not run, so no min_hold window keeps the claim from the retry.
        """
        self.started_at = None
        self.free_claim()

    def free_claim(self) -> None:
        """Free the task's claim: the run is over. A body that ran keeps its min_hold window.

        Once only: a retry frees it before it enqueues, and the run's end then has nothing
        left to look up.
        """
        if self.claim_freed:
            return
        self.claim_freed = True
        taken, self.claim = self.claim, None
        if taken is not None:
            claim, window = taken
            # The window ends with the lock's, which began when the run stopped waiting.
            if self.started_at is None or not window:
                taken = (claim, 0.0)
            else:
                taken = (claim, window + self.started_at - self.claimed_at)
        release_claim(self.config, self.name, self.result_id, taken)

    @property
    def result_id(self) -> str | None:
        """Return the task result id of the run, if it is known."""
        return None if self.result is None else str(self.result.id)

    def lock(self, lock_class: type[Lock] | type[AsyncLock]) -> Any:
        """Return the run's lock, not taken yet."""
        options = self.config.lock_options(owner=self.owner, metadata=self.record)
        return lock_class(self.name, **options)

    def refuse(self, holders: list[Any]) -> None:
        """Skip, raise or retry, the run having found its lock held by ``holders``."""
        retry = None if self.result is None else self._retry
        refuse_run(self.config, self.name, holders, retry)

    def _retry(self, countdown: float, error: LockNotAcquiredError) -> None:
        # The run is over: free its claim, so that the retry, enqueued as any task is, can
        # take one of its own.
        assert self.result is not None
        for free in before_retry():  # a claim taken over by a decorator around this one
            free()
        self.free_claim()
        later = timezone.now() + dt.timedelta(seconds=countdown)
        try:
            again = self.result.task.using(run_after=later).enqueue(*self.args, **self.kwargs)
        except DuplicateTaskError:
            logger.warning("Did not retry %s: %s", self.name, error)
            return
        logger.warning("Retrying %s as %s in %.1fs: %s", self.name, again.id, countdown, error)


def _run(
    config: SingleInstance,
    wrapper: Callable[..., Any],
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    return _run_held(_Run(config, wrapper, func, args, kwargs), func, args, kwargs)


def _run_held(
    run: _Run, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    held: Lock = run.lock(Lock)
    try:
        # The claim first: a worker killed while the run waits for its lock then frees it
        # with the run's lease, not enqueue_ttl.
        run.take_claim()
        try:
            held._enter()
        except LockNotAcquiredError:
            run.refuse(held.backend.lock_info(held.name))
            return None
        run.start()
        try:
            with calling(func, run.free_claim_for_retry):
                value = func(*args, **kwargs)
        except BaseException as exc:
            held._leave(exc)
            raise
        held._leave()
        return value
    finally:
        run.free_claim()


async def _arun(
    config: SingleInstance,
    wrapper: Callable[..., Any],
    func: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    return await _arun_held(_Run(config, wrapper, func, args, kwargs), func, args, kwargs)


async def _arun_held(
    run: _Run, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    held: AsyncLock = run.lock(AsyncLock)
    try:
        await asyncio.to_thread(run.take_claim)  # first, as _run_held says
        try:
            await held._enter()
        except LockNotAcquiredError:
            backend = held.backend
            holders = await sync_to_async(backend.lock_info, thread_sensitive=False)(held.name)
            await sync_to_async(run.refuse, thread_sensitive=True)(holders)
            return None
        run.start()
        try:
            with calling(func, run.free_claim_for_retry):
                value = await func(*args, **kwargs)
        except BaseException as exc:
            await held._leave(exc)
            raise
        await held._leave()
        return value
    finally:
        await asyncio.to_thread(run.free_claim)


@receiver(task_enqueued, dispatch_uid="django_redis_lock.tasks.enqueued")
def _task_enqueued(sender: object, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
    # A task with enqueue= whose backend does not supply SingleInstanceTask enqueued without
    # its claim: its duplicates are not refused. Said once per task, as an error.
    task = task_result.task
    if isinstance(task, SingleInstanceTask) or task.module_path in _reported:
        return
    config = claiming_config(task)
    if config is None:
        return
    _reported.add(task.module_path)
    logger.error(
        "Enqueued %s without its enqueue=%r claim, so its duplicates are not refused: the "
        "task_class of its backend %r is not django_redis_lock.tasks.SingleInstanceTask.",
        task.module_path,
        config.enqueue,
        task.backend,
    )
