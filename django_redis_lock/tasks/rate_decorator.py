"""``@rate_limit`` for ``django.tasks``: at most N runs per period, across every worker.

::

    @task()
    @rate_limit("10/s", key="{customer_id}")
    def sync_customer(customer_id): ...

The decorator is Celery's (:mod:`django_redis_lock.celery.rate_limited`), with the same rates,
keys and policies, written once in :mod:`django_redis_lock._single_instance.run_rate`. A run
counts one hit when its body starts. Without room, ``"retry"`` (the default) enqueues the
task again with ``run_after`` at the moment the backend gives it (a slot free, and at most the
limit's worth of retries per period), as a new task result; the ``enqueue=`` claim of a
``@single_instance`` around or under it is freed first, so the retry claims anew. A run that
cannot be enqueued again (its backend does not ``supports_defer``, it runs on
``ImmediateBackend``, or it was called directly) waits for its slot instead, ``max_wait``
seconds at most.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.utils import timezone

from .._core.validation import validate_ttl
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
from ._compat import ImmediateBackend, TaskResult
from .claims import free_queued_claim
from .current import WRAPPER, before_retry, calling
from .decorator import QUEUE, KeySpec, run_arguments

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
    max_wait: float = 60.0,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Let the decorated ``django.tasks`` task's runs start at most ``rate`` (per ``key``).

    Put it under ``@task``; with ``@single_instance``, above it (a refused run then never
    takes the lock) or below it (only runs holding the lock count). ``rate`` is what
    :func:`~django_redis_lock.rate_limit` takes; ``key`` narrows the limit to some arguments
    (a context, with ``takes_context=True``, is not one of them); the rate limit is named
    ``task:<module.function>[:<key part>]``, or ``task:<name>[...]`` with ``name``. A run
    without room: ``"retry"`` enqueues the task again for later (see the module),
    ``"skip"`` logs a warning and returns None, ``"raise"`` raises
    :class:`~django_redis_lock.RateLimitExceededError`. A run that cannot be enqueued again
    waits up to ``max_wait`` seconds, then raises. Sync and ``async def`` functions.
    """
    settings = configure_rate_limit(
        queue=QUEUE, rate=rate, key=key, cost=cost, using=using, on_limit=on_limit, name=name
    )
    max_wait = validate_ttl(max_wait, argument="max_wait")

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = settings.of(func)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def arun(*args: P.args, **kwargs: P.kwargs) -> Any:
                run = _Run(config, arun, func, args, kwargs, max_wait=max_wait)
                admission = await run.ahit()
                if admission.admitted:
                    with calling(func):
                        return await func(*args, **kwargs)
                await sync_to_async(run.refused, thread_sensitive=True)(admission)
                return None

            wrapper: Callable[..., Any] = arun
        else:

            @functools.wraps(func)
            def run(*args: P.args, **kwargs: P.kwargs) -> Any:
                one = _Run(config, run, func, args, kwargs, max_wait=max_wait)
                admission = one.hit()
                if admission.admitted:
                    with calling(func):
                        return func(*args, **kwargs)
                one.refused(admission)
                return None

            wrapper = run
        wrapper.__rate_limit__ = config  # type: ignore[attr-defined]
        wrapper.__signature__ = config.signature  # type: ignore[attr-defined]
        setattr(wrapper, WRAPPER, True)
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
        *,
        max_wait: float,
    ) -> None:
        self.config, self.args, self.result = run_arguments(config, wrapper, args)
        self.kwargs = kwargs
        task_name = f"{func.__module__}.{func.__qualname__}"
        self.name = self.config.limit_name(task_name, self.args, kwargs)
        self.waits = config.on_limit == "retry" and not self._can_enqueue_again()
        # A run that cannot be enqueued again waits for its slot, max_wait at most.
        self.timeout = max_wait if self.waits else None
        # What the wrappers around this one ask before the run enqueues itself again.
        self.hooks = before_retry()

    def _can_enqueue_again(self) -> bool:
        if self.result is None:
            return False
        backend = self.result.task.get_backend()
        return bool(backend.supports_defer) and not isinstance(backend, ImmediateBackend)

    def hit(self) -> Admission:
        """Count the run's hit; wait for a slot if it cannot be enqueued again."""
        return self.config.handle(self.name).admit(blocking=self.waits, timeout=self.timeout)

    async def ahit(self) -> Admission:
        """Do what :meth:`hit` does, without blocking the event loop."""
        handle = self.config.handle(self.name, AsyncRateLimit)
        return await handle.admit(blocking=self.waits, timeout=self.timeout)

    def refused(self, admission: Admission) -> None:
        """Skip, raise, or enqueue the task again for its place among the retries."""
        handle: RateLimit = self.config.handle(self.name)
        if self.config.on_limit != "retry" or self.waits:
            # A run that waited max_wait in vain raises, as "raise" does.
            refuse_hit(handle, admission, "skip" if self.config.on_limit == "skip" else "raise")
            return
        assert self.result is not None
        task = self.result.task
        for free in self.hooks:  # the claim a @single_instance around this run took over
            free()
        free_queued_claim(task, self.args, self.kwargs, str(self.result.id))
        countdown = retry_countdown(handle, admission)
        later = timezone.now() + dt.timedelta(seconds=countdown)
        try:
            again: TaskResult[Any, Any] = task.using(run_after=later).enqueue(
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
