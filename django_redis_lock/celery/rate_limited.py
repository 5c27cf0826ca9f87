"""``@rate_limit`` for Celery tasks: at most N runs per period across every worker.

::

    @app.task(bind=True)
    @rate_limit("10/s", key="{customer_id}", on_limit="retry")
    def sync_customer(self, customer_id): ...

Celery's own ``rate_limit`` task option is kept by each worker process for itself; this one
is shared by every process that uses the ``LOCKS`` alias. A run counts one hit when its body
starts. Without room, ``"retry"`` (the default) sends the run again, with the same task id,
for the moment the backend gives it (:func:`~django_redis_lock._single_instance.run_rate.
retry_countdown`: a slot free, and at most the limit's worth of retries per period); the
resend does not count against the task's ``max_retries``. An eager run, or a call outside a
worker, has no queue to go back to: it waits for its slot instead.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from celery import Task
from celery._state import get_current_task
from celery.exceptions import Retry

from .._single_instance.run_rate import (
    OnLimit,
    TaskRateLimit,
    configure_rate_limit,
    refuse_hit,
    retry_countdown,
)
from ..backends.base import Admission
from ..conf import DEFAULT_ALIAS
from ..ratelimit import RateLimit
from .publish import may_have_sent
from .run_names import QUEUE, KeySpec

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
    """Let the decorated task's runs start at most ``rate`` (per ``key``), across workers.

    Put it under ``@app.task``/``@shared_task`` (and under ``@single_instance``, so that a
    run takes its lock before it spends a hit). ``rate`` is what
    :func:`~django_redis_lock.rate_limit` takes (``"10/s"``, or a list of rates that must all
    admit). ``key`` narrows the limit to some arguments, as ``@single_instance``'s does; the
    rate limit is named ``celery:<task name>[:<key part>]``, or ``celery:<name>[...]`` with
    ``name``. A run without room: ``"retry"`` sends it again for later (not counted against
    ``max_retries``), ``"skip"`` logs a warning and returns None, ``"raise"`` raises
    :class:`~django_redis_lock.RateLimitExceededError`.
    """
    settings = configure_rate_limit(
        queue=QUEUE, rate=rate, key=key, cost=cost, using=using, on_limit=on_limit, name=name
    )

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = settings.of(func)

        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            result: R | None = _run_limited(config, func, args, kwargs)
            return result

        run.__rate_limit__ = config  # type: ignore[attr-defined]
        # For tools that do not follow __wrapped__, such as Celery's argument check.
        run.__signature__ = config.signature  # type: ignore[attr-defined]
        return run

    return decorate


def _run_limited(
    config: TaskRateLimit, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    task = get_current_task()
    task_name = task.name if task is not None else f"{func.__module__}.{func.__qualname__}"
    handle = config.handle(config.limit_name(task_name, args, kwargs))
    queued = task is not None and not task.request.called_directly and not task.request.is_eager
    if config.on_limit == "retry" and not queued:
        admission = handle.admit(blocking=True)  # nowhere to send it again: wait for a slot
    else:
        admission = handle.admit()
    if admission.admitted:
        return func(*args, **kwargs)
    if config.on_limit != "retry":
        refuse_hit(handle, admission, config.on_limit)
        return None
    assert task is not None
    _send_again(task, handle, admission)
    return None  # not reached: _send_again raises Retry


def _send_again(task: Task, handle: RateLimit, admission: Admission) -> None:
    """Send the run again for its place among the retries, and end this one as retried.

    The new message is the request's own (same id, arguments and options) with a countdown,
    and its ``retries`` unchanged: a rate limit's resend is no retry of the task's. A publish
    that failed after it may have reached the broker is treated as sent.
    """
    countdown = retry_countdown(handle, admission)
    request = task.request
    again = task.signature_from_request(request, countdown=countdown, retries=request.retries)
    error = handle.exceeded(admission)
    try:
        again.apply_async()
    except Exception as exc:
        if not may_have_sent(task.app, [exc]):
            raise  # nothing was sent: the run fails with the broker's error
        logger.warning("The resend of a run of %s may have been sent: %r", handle.name, exc)
    logger.info("Sent a run of %s again, in %.2fs: %s", handle.name, countdown, error)
    raise Retry(exc=error, when=countdown, sig=again)
