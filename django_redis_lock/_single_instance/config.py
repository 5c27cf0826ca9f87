"""The settings of a ``@single_instance`` decorator: checked once, when it is applied.

:func:`configure` checks the decorator's arguments and returns a :class:`SingleInstance`,
which the task's function keeps; :meth:`SingleInstance.of` binds it to the function whose
arguments its key reads. A wrong argument raises the package's own
:class:`~django_redis_lock.InvalidLockArgumentError` when the task is defined.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._core.lock_arguments import LockKeywords
from .._core.validation import validate_limit, validate_min_hold, validate_timeout, validate_ttl
from ..conf import DEFAULT_ALIAS
from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError
from ..listing import TaskRecord
from .lock_names import KeySpec, arguments, key_part, key_signature, lock_name

__all__ = ["Enqueue", "KeySpec", "Policy", "SingleInstance", "configure"]

Policy = Literal["skip", "raise", "retry", "wait"]
Enqueue = Literal["allow", "skip", "raise"]


@dataclass(frozen=True)
class SingleInstance:
    """The settings of one ``@single_instance`` decorator, kept on the task's function.

    ``queue`` is the first part of every lock name (``celery`` or ``task``); ``signature``
    is the function's, whose arguments the key reads.
    """

    queue: str
    key: KeySpec
    on_conflict: Policy
    then: Literal["skip", "raise"]
    ttl: float | None
    timeout: float | None
    limit: int
    using: str
    countdown: float | None
    max_retries: int | None
    signature: inspect.Signature
    enqueue: Enqueue = "allow"
    enqueue_ttl: float = 3600.0
    min_hold: float = 0.0

    def of(self, func: Callable[..., Any]) -> SingleInstance:
        """Return these settings for the function ``func``, whose arguments the key reads.

        Raise :class:`~django_redis_lock.InvalidLockArgumentError` if a list key, or a
        template's fields, name arguments ``func`` does not have: when the task is defined,
        not at its first run.
        """
        signature = key_signature(self.key, func, decorator="single_instance")
        return dataclasses.replace(self, signature=signature)

    def lock_name(self, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name of a run of ``task_name`` with these arguments."""
        return lock_name(self.queue, task_name, self.key_part(args, kwargs))

    def key_part(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
        """Return the part of the lock name that the task's arguments give, if any."""
        return key_part(self.key, self.signature, args, kwargs)

    def arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, object]:
        """Return the task's arguments by name, defaults applied, as key-friendly values."""
        return arguments(self.signature, args, kwargs)

    def record(
        self,
        task_name: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        runner: str,
        task_id: str | None,
        hostname: str | None = None,
        worker_pid: int | None = None,
        hidden: tuple[type, ...] = (),
    ) -> dict[str, Any]:
        """Return what a run, or a task sent and not yet run, records in its lock's metadata.

        ``args`` and ``kwargs`` are the function's; values of the ``hidden`` types (a bound
        Celery task, a ``django.tasks`` context) are left out of the record.
        """
        summary = ", ".join(
            f"{k}={v!r}"
            for k, v in self.arguments(args, kwargs).items()
            if not isinstance(v, hidden)
        )
        return TaskRecord(
            task_id=task_id,
            task_name=task_name,
            hostname=hostname,
            worker_pid=worker_pid,
            args=summary[:500],
            started_at=dt.datetime.now(dt.timezone.utc).isoformat(),
            runner=runner,
        ).as_metadata()

    def lock_options(self, *, owner: str | None, metadata: dict[str, Any]) -> LockKeywords:
        """Return the keyword arguments of a run's :class:`~django_redis_lock.Lock`.

        ``owner`` is the run's own (None: the calling thread or task), ``metadata`` its record.
        """
        waits = self.on_conflict == "wait"
        return {
            "owner": owner,
            "metadata": metadata,
            "ttl": self.ttl,
            "using": self.using,
            "limit": self.limit,
            "blocking": waits,
            "timeout": self.timeout if waits else None,
            "min_hold": self.min_hold,
        }


def configure(
    *,
    queue: str,
    key: KeySpec,
    on_conflict: Policy,
    ttl: float | None,
    timeout: float | None,
    then: Literal["skip", "raise"],
    limit: int,
    using: str = DEFAULT_ALIAS,
    countdown: float | None = None,
    max_retries: int | None = None,
    enqueue: Enqueue = "allow",
    enqueue_ttl: float = 3600.0,
    min_hold: float = 0.0,
) -> SingleInstance:
    """Check a ``@single_instance`` decorator's arguments; return its settings.

    Raise :class:`~django_redis_lock.InvalidLockArgumentError` (or, for a key of the wrong
    type, :class:`~django_redis_lock.LockArgumentTypeError`) naming the wrong argument.
    The settings have no signature yet: :meth:`SingleInstance.of` gives them the function's.
    """
    choices: dict[str, tuple[object, Collection[str]]] = {
        "on_conflict": (on_conflict, ("skip", "raise", "retry", "wait")),
        "then": (then, ("skip", "raise")),
        "enqueue": (enqueue, ("allow", "skip", "raise")),
    }
    for argument, (value, allowed) in choices.items():
        if value not in allowed:
            *first, last = (repr(choice) for choice in allowed)
            raise InvalidLockArgumentError(
                f"single_instance {argument} must be {', '.join(first)} or {last}, got {value!r}."
            )
    if on_conflict != "wait" and timeout is not None:
        raise InvalidLockArgumentError(
            f"single_instance timeout only applies to on_conflict='wait' (got {on_conflict!r})."
        )
    if not (key is None or isinstance(key, (str, list, tuple)) or callable(key)):
        raise LockArgumentTypeError(
            f"single_instance key must be None, a template, a list of argument names or a "
            f"callable, got {key!r}."
        )
    config = SingleInstance(
        queue=queue,
        key=key,
        on_conflict=on_conflict,
        then=then,
        ttl=None if ttl is None else validate_ttl(ttl),
        timeout=validate_timeout(timeout),
        limit=validate_limit(limit),
        using=using,
        countdown=validate_timeout(countdown, argument="countdown"),
        max_retries=max_retries,
        signature=inspect.Signature(),
        enqueue=enqueue,
        enqueue_ttl=validate_ttl(enqueue_ttl, argument="enqueue_ttl"),
        min_hold=validate_min_hold(min_hold),
    )
    if config.min_hold and config.limit != 1:
        raise InvalidLockArgumentError(
            f"single_instance min_hold cannot be given with limit={limit}: it keeps the "
            "lock of one run for a window, which a semaphore cannot."
        )
    return config
