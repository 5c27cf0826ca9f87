"""``@rate_limit`` for ``django.tasks``: at most N runs per period, across every worker.

::

    @task()
    @rate_limit("10/s", key="{customer_id}")
    def sync_customer(customer_id): ...

The decorator is Celery's (:mod:`django_redis_lock.celery.rate_limited`), with the same rates,
keys and policies, written once in :mod:`django_redis_lock._single_instance.run_rate`. A run
counts one hit when its body starts. Without room, ``"retry"`` (the default) enqueues the
task again with ``run_after`` at the moment the backend gives it (a slot free, and at most the
limit's worth of retries per period), as a new task result. A run that cannot be enqueued
again (its backend does not ``supports_defer``, it runs on ``ImmediateBackend``, or its result
is unknown because ``@single_instance`` runs around it) waits for its slot instead.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.utils import timezone

from .._single_instance.run_rate import (
    OnLimit,
    TaskRateLimit,
    configure_rate_limit,
    refuse_hit,
    retry_countdown,
)
from ..backends.base import Admission
from ..conf import DEFAULT_ALIAS
from ..exceptions import DuplicateTaskError
from ..ratelimit import AsyncRateLimit, RateLimit
from ._compat import ImmediateBackend, TaskContext, TaskResult
from .decorator import QUEUE, KeySpec, current_result

__all__ = ["rate_limit"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")


def rate_limit(
    rate: str | Sequence[str],
    *,
    key: KeySpec = None,
    on_limit: OnLimit = "retry",
    cost: int = 1,
    using: str = DEFAULT_ALIAS,
    name: str | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Let the decorated ``django.tasks`` task's runs start at most ``rate`` (per ``key``).

    Put it under ``@task``, and over ``@single_instance`` when the task has both (so that a
    refused run is enqueued again rather than waiting). ``rate`` is what
    :func:`~django_redis_lock.rate_limit` takes; ``key`` narrows the limit to some arguments
    (a context, with ``takes_context=True``, is not one of them); the rate limit is named
    ``task:<module.function>[:<key part>]``, or ``task:<name>[...]`` with ``name``. A run
    without room: ``"retry"`` enqueues the task again for later (see the module),
    ``"skip"`` logs a warning and returns None, ``"raise"`` raises
    :class:`~django_redis_lock.RateLimitExceededError`. Sync and ``async def`` functions.
    """
    settings = configure_rate_limit(
        queue=QUEUE, rate=rate, key=key, cost=cost, using=using, on_limit=on_limit, name=name
    )

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = settings.of(func)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def arun(*args: P.args, **kwargs: P.kwargs) -> Any:
                run = _Run(config, arun, func, args, kwargs)
                admission = await run.ahit()
                if admission.admitted:
                    return await func(*args, **kwargs)
                await sync_to_async(run.refused, thread_sensitive=True)(admission)
                return None

            wrapper: Callable[..., Any] = arun
        else:

            @functools.wraps(func)
            def run(*args: P.args, **kwargs: P.kwargs) -> Any:
                one = _Run(config, run, func, args, kwargs)
                admission = one.hit()
                if admission.admitted:
                    return func(*args, **kwargs)
                one.refused(admission)
                return None

            wrapper = run
        wrapper.__rate_limit__ = config  # type: ignore[attr-defined]
        wrapper.__signature__ = config.signature  # type: ignore[attr-defined]
        return wrapper

    return decorate


class _Run:
    """One run of a rate-limited task: its rate limit, and how it can be enqueued again."""

    def __init__(
        self,
        config: TaskRateLimit,
        wrapper: Callable[..., Any],
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        context = args[0] if args and isinstance(args[0], TaskContext) else None
        self.args, self.kwargs = (args[1:] if context else args), kwargs
        if context is not None:
            parameters = list(config.signature.parameters.values())[1:]
            signature = config.signature.replace(parameters=parameters)
            config = dataclasses.replace(config, signature=signature)
        self.config = config
        self.result = context.task_result if context is not None else current_result(wrapper)
        task_name = f"{func.__module__}.{func.__qualname__}"
        self.name = config.limit_name(task_name, self.args, kwargs)
        self.waits = config.on_limit == "retry" and not self._can_enqueue_again()

    def _can_enqueue_again(self) -> bool:
        if self.result is None:
            return False
        backend = self.result.task.get_backend()
        return bool(backend.supports_defer) and not isinstance(backend, ImmediateBackend)

    def hit(self) -> Admission:
        """Count the run's hit; wait for a slot if it cannot be enqueued again."""
        return self.config.handle(self.name).admit(blocking=self.waits)

    async def ahit(self) -> Admission:
        """Do what :meth:`hit` does, without blocking the event loop."""
        config = self.config
        handle = AsyncRateLimit(self.name, config.rate, using=config.using, cost=config.cost)
        return await handle.admit(blocking=self.waits)

    def refused(self, admission: Admission) -> None:
        """Skip, raise, or enqueue the task again for its place among the retries."""
        handle: RateLimit = self.config.handle(self.name)
        if self.config.on_limit != "retry":
            refuse_hit(handle, admission, self.config.on_limit)
            return
        assert self.result is not None  # a run that could not be enqueued again waited
        countdown = retry_countdown(handle, admission)
        later = timezone.now() + dt.timedelta(seconds=countdown)
        try:
            again: TaskResult[Any, Any] = self.result.task.using(run_after=later).enqueue(
                *self.args, **self.kwargs
            )
        except DuplicateTaskError as exc:
            logger.warning("Did not enqueue a run of %s again: %s", self.name, exc)
            return
        logger.info(
            "Enqueued a run of %s again as %s, in %.2fs: %s",
            self.name,
            again.id,
            countdown,
            handle.exceeded(admission),
        )
