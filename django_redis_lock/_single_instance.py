"""What ``@single_instance`` means, written once for every task queue it decorates.

:mod:`django_redis_lock.celery` and :mod:`django_redis_lock.tasks` (Django's ``django.tasks``)
differ only in how they see a run start, end and be sent. The rest is here: the decorator's
settings and their checks, the lock name built from a run's arguments, what a run records
about itself, what a run does when it finds its lock held, and the claim that refuses a
duplicate when it is sent (``enqueue=``).

A name is ``<queue>:<task name>`` (``celery:`` or ``task:``), followed by ``:<key part>`` when
the decorator has a key. In the task name and in each argument value that goes into the key
part, ``%`` is written ``%25`` and ``:`` is written ``%3A`` (percent-encoding, as in URLs), so
a ``:`` that joins parts never comes from a value: ``("x:y", "z")`` and ``("x", "y:z")`` give
different names, while ints, slugs and e-mail addresses read as they are. A callable key's
result is used as it is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import inspect
import logging
import os
import re
import string
import threading
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._core.lock_arguments import HOST
from ._core.names import MAX_READABLE, digest
from ._core.validation import validate_limit, validate_min_hold, validate_timeout, validate_ttl
from .backends.base import AcquireRequest, LockInfo, ReleaseRequest, holder_metadata
from .conf import DEFAULT_ALIAS
from .exceptions import (
    DuplicateTaskError,
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockNotAcquiredError,
)
from .handler import locks
from .listing import TaskRecord, describe_holder, retry_after, task_id

__all__ = [
    "CLAIM_PREFIX",
    "MAX_READABLE_NAME",
    "Enqueue",
    "KeySpec",
    "Policy",
    "SingleInstance",
    "claim",
    "claim_name",
    "configure",
    "encode_key_value",
    "refuse_run",
]

Policy = Literal["skip", "raise", "retry", "wait"]
Enqueue = Literal["allow", "skip", "raise"]
KeySpec = str | Sequence[str] | Callable[..., object] | None

logger = logging.getLogger("django_redis_lock")

#: Lock names longer than this are hashed; the readable arguments go into the metadata.
MAX_READABLE_NAME = MAX_READABLE

#: The claim of a queued or running ``enqueue=`` task is named this, then its lock's name.
CLAIM_PREFIX = "queued:"

#: How often a send tries again when a claim it found held was freed before it could tell
#: by whom.
CLAIM_ATTEMPTS = 3

#: How long a send waits for a claim it found held to name its task: one taken a moment ago
#: names it once its send has the id from the queue (``django.tasks`` gives it late).
NAMING_WAIT = 2.0


def encode_key_value(text: str) -> str:
    """Percent-encode ``%`` and ``:`` in ``text``, one value of a lock name."""
    return text.replace("%", "%25").replace(":", "%3A")


class _KeyFormatter(string.Formatter):
    # Encodes each field once formatted, so that format specifications apply to the value
    # itself and the template's own text (its ':' included) is kept as written.
    def format_field(self, value: Any, format_spec: str) -> str:
        return encode_key_value(super().format_field(value, format_spec))


_formatter = _KeyFormatter()


def _fields(key: object) -> list[str]:
    """Return the argument names a key template's fields read (none for other keys)."""
    if not isinstance(key, str):
        return []
    fields = (field for _, field, _, _ in _formatter.parse(key) if field is not None)
    return [re.split(r"[.\[]", field, maxsplit=1)[0] for field in fields]


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
        signature = inspect.signature(func)
        named = self.key if isinstance(self.key, (list, tuple)) else _fields(self.key)
        unknown = [name for name in named if name not in signature.parameters]
        if unknown:
            raise InvalidLockArgumentError(
                f"single_instance key names {unknown!r} are not arguments of "
                f"{func.__qualname__}{signature}."
            )
        return dataclasses.replace(self, signature=signature)

    def lock_name(self, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name of a run of ``task_name`` with these arguments."""
        part = self.key_part(args, kwargs)
        head = f"{self.queue}:{encode_key_value(task_name)}"
        name = head if part is None else f"{head}:{part}"
        if len(name) > MAX_READABLE_NAME:
            name = f"{head}:sha256:{digest(name)}"
        return name

    def key_part(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
        """Return the part of the lock name that the task's arguments give, if any."""
        if self.key is None:
            return None
        if callable(self.key):
            return str(self.key(*args, **kwargs))
        values = self.arguments(args, kwargs)
        if isinstance(self.key, str):
            try:
                return _formatter.vformat(self.key, (), values)
            except (KeyError, IndexError, AttributeError) as exc:
                raise InvalidLockArgumentError(
                    f"single_instance key {self.key!r} does not fit the task's arguments "
                    f"({', '.join(values)}): {exc!r}. Use their names in braces, a list of "
                    "names, or a callable taking the task's arguments."
                ) from exc
        return ":".join(encode_key_value(str(values[name])) for name in self.key)

    def arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, object]:
        """Return the task's arguments by name, defaults applied, as key-friendly values."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return {name: _key_value(value) for name, value in bound.arguments.items()}

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

    def lock_options(self) -> dict[str, Any]:
        """Return the keyword arguments of a run's :class:`~django_redis_lock.Lock`."""
        waits = self.on_conflict == "wait"
        return {
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


def claim_name(lock_name: str) -> str:
    """Return the name of the claim that a queued or running task with ``lock_name`` holds."""
    return f"{CLAIM_PREFIX}{lock_name}"


def claim_metadata(record: dict[str, Any]) -> bytes:
    """Return the holder metadata of a claim taken by a send in this thread."""
    return holder_metadata(
        host=HOST, pid=os.getpid(), thread=threading.current_thread().name, data=record
    )


def claim(
    config: SingleInstance,
    task_name: str,
    name: str,
    owner: str,
    request: AcquireRequest,
    *,
    again: bool = False,
) -> str | None:
    """Claim ``name`` for a task about to be sent; return None, or the task id holding it.

    The claim is taken for ``owner`` in one atomic acquire. When another send holds it, the
    answer is that task's id (``enqueue="skip"``: the caller returns its result instead of
    sending), or :class:`~django_redis_lock.DuplicateTaskError` is raised (``"raise"``, or
    no id to return). An owner that holds the claim already is the same task sent twice: it
    is refused the same way, unless ``again`` says it is the task itself sent on (a retry),
    which keeps the claim whatever the acquire found.
    """
    backend = locks[config.using]
    for _ in range(CLAIM_ATTEMPTS):
        taken = backend.acquire(name, owner, request)
        if again or (taken.acquired and taken.holds == 1):
            return None
        if taken.acquired:  # this owner held it already: the same task sent twice
            backend.release(name, owner, ReleaseRequest(holds=taken.holds))
        holder = _holder_of(config, task_name, name)
        if holder is not None:
            return holder
    raise DuplicateTaskError(
        f"Did not send {task_name}: its claim {name!r} was taken and freed "
        f"{CLAIM_ATTEMPTS} times while sending.",
        lock_name=name,
    )


def _holder_of(config: SingleInstance, task_name: str, name: str) -> str | None:
    # The task id holding the claim, or raise; None if the claim was freed meanwhile. A claim
    # taken a moment ago may not name its task yet: its send records the id once it has it.
    backend = locks[config.using]
    deadline = time.monotonic() + NAMING_WAIT
    while True:
        holders = backend.lock_info(name)
        ids = [found for info in holders if (found := task_id(info)) is not None]
        if not holders or ids or config.enqueue != "skip" or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if not holders:
        return None
    if config.enqueue == "raise" or not ids:
        holder = "; ".join(describe_holder(info) for info in holders)
        raise DuplicateTaskError(
            f"Did not send {task_name}: an instance with the same key is queued or running "
            f"({name!r} is held by {holder}).",
            lock_name=name,
            task_id=ids[0] if ids else None,
        )
    logger.info("Did not send %s: it is queued or running as %s.", task_name, ids[0])
    return ids[0]


def _key_value(value: object) -> object:
    # Values that format predictably in a key: model instances by primary key, UUIDs and
    # decimals as text, dates in ISO 8601.
    pk = getattr(getattr(value, "_meta", None), "pk", None)
    if pk is not None:
        return getattr(value, "pk", value)
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return value
