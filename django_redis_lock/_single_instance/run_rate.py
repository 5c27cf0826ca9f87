"""What a task's ``@rate_limit`` means, written once for Celery and ``django.tasks``.

A run counts one hit (``cost``) against its rate limit when its body starts, so beat, chains,
``send_task`` and eager runs are all counted. The rate limit is named as a
``@single_instance`` run's lock is (``celery:<task>[:<key part>]``, see :mod:`.lock_names`),
from the same key vocabulary; its keys in Redis are a rate limit's, never the lock's. A run
that finds no room skips, raises, or is sent again for later (``"retry"``): each task queue
says how it sends a run again, and :func:`retry_countdown` says when.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .._core.rate_limiting import parse_rates, validate_cost
from ..backends.base import Admission, Rate
from ..conf import DEFAULT_ALIAS
from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError
from ..ratelimit import AsyncRateLimit, RateLimit
from .lock_names import KeySpec, key_part, key_signature, lock_name

__all__ = ["OnLimit", "TaskRateLimit", "configure_rate_limit", "refuse_hit", "retry_countdown"]

logger = logging.getLogger("django_redis_lock")

OnLimit = Literal["retry", "skip", "raise"]

#: A rate limit's handle: blocking or asyncio.
H = TypeVar("H", RateLimit, AsyncRateLimit)

#: The most jitter added to a retry's countdown, as a share of the spacing of retries.
RETRY_JITTER = 0.25


@dataclass(frozen=True)
class TaskRateLimit:
    """The settings of one task ``@rate_limit`` decorator, kept on the task's function."""

    queue: str
    rate: str | tuple[str, ...]
    rates: tuple[Rate, ...]
    key: KeySpec
    cost: int
    using: str
    on_limit: OnLimit
    name: str | None
    signature: inspect.Signature

    def of(self, func: Callable[..., Any]) -> TaskRateLimit:
        """Return these settings for ``func``, refusing a key that names no argument of it."""
        signature = key_signature(self.key, func, decorator="rate_limit")
        return dataclasses.replace(self, signature=signature)

    def limit_name(self, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the name of the rate limit a run of ``task_name`` counts against."""
        part = key_part(self.key, self.signature, args, kwargs)
        return lock_name(self.queue, self.name or task_name, part)

    def handle(self, name: str, kind: type[H] = RateLimit) -> H:  # type: ignore[assignment]
        """Return the rate limit ``name``, a handle of ``kind`` that does not wait by default."""
        return kind(name, self.rate, using=self.using, cost=self.cost, blocking=False)


def configure_rate_limit(
    *,
    queue: str,
    rate: str | Sequence[str],
    key: KeySpec,
    cost: int,
    using: str,
    on_limit: OnLimit,
    name: str | None,
) -> TaskRateLimit:
    """Check a task ``@rate_limit`` decorator's arguments; return its settings."""
    if on_limit not in ("retry", "skip", "raise"):
        raise InvalidLockArgumentError(
            f"rate_limit on_limit must be 'retry', 'skip' or 'raise', got {on_limit!r}."
        )
    if not (key is None or isinstance(key, (str, list, tuple)) or callable(key)):
        raise LockArgumentTypeError(
            f"rate_limit key must be None, a template, a list of argument names or a "
            f"callable, got {key!r}."
        )
    if not (name is None or (isinstance(name, str) and name)):
        raise LockArgumentTypeError(f"rate_limit name must be None or a str, got {name!r}.")
    if not isinstance(using, str):
        raise LockArgumentTypeError(f"rate_limit using must be a LOCKS alias, got {using!r}.")
    rates = parse_rates(rate)
    return TaskRateLimit(
        queue=queue,
        rate=rate if isinstance(rate, str) else tuple(rate),
        rates=rates,
        key=key,
        cost=validate_cost(cost, rates),
        using=using if using else DEFAULT_ALIAS,
        on_limit=on_limit,
        name=name,
        signature=inspect.Signature(),
    )


def refuse_hit(handle: RateLimit, admission: Admission, on_limit: OnLimit) -> None:
    """Skip (log a warning and return) or raise, for a run its rate limit refused."""
    error = handle.exceeded(admission)
    if on_limit == "skip":
        logger.warning("Skipped a run of %s: %s", handle.name, error)
        return
    raise error


def retry_countdown(handle: RateLimit, admission: Admission) -> float:
    """Return in how many seconds a refused run should run again: its place among retries.

    The backend spaces the retries of one rate limit a period/limit apart from the moment a
    slot frees (:meth:`~django_redis_lock.backends.base.BaseLockBackend.schedule_retry`), so
    at most the limit's worth of runs is sent for each period; a little jitter keeps two
    processes' retries from landing on the same instant.
    """
    rate = admission.rate or handle.rates[0]
    countdown = handle.backend.schedule_retry(handle.name, rate, admission.retry_after)
    return countdown + random.uniform(0, RETRY_JITTER * rate.period / rate.limit)  # noqa: S311
