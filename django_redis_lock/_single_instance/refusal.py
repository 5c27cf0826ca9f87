"""What a ``@single_instance`` run does when it finds its lock held: skip, raise or retry."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..backends.base import LockInfo
from ..exceptions import LockNotAcquiredError
from ..listing import describe_holder, retry_after
from .config import SingleInstance

__all__ = ["refuse_run"]

logger = logging.getLogger("django_redis_lock")


def refuse_run(
    config: SingleInstance,
    name: str,
    holders: Sequence[LockInfo],
    retry: Callable[[float, LockNotAcquiredError], None] | None = None,
) -> None:
    """Do what a run that found its lock ``name`` held by ``holders`` must do instead.

    Log a warning and return (skip), or raise
    :class:`~django_redis_lock.LockNotAcquiredError`. With ``retry`` (the task queue's way
    to run the task again later), the retry policy calls it with the seconds to wait and
    the error to report; without it, retry raises.
    """
    holder = "; ".join(describe_holder(info) for info in holders) or "unknown"
    policy = config.then if config.on_conflict == "wait" else config.on_conflict
    message = f"Lock {name!r} is held by {holder}"
    if policy == "retry" and retry is not None:
        countdown = retry_after(holders) if config.countdown is None else config.countdown
        retry(countdown, LockNotAcquiredError(f"{message}.", lock_name=name))
        return
    if policy in {"raise", "retry"}:
        raise LockNotAcquiredError(f"{message}.", lock_name=name)
    logger.warning("Skipped a run of %s: %s.", name, message)
