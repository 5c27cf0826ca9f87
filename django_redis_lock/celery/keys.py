"""The lock name of a ``@single_instance`` run: its settings, and the key built from its arguments.

A name is ``celery:<task name>``, followed by ``:<key part>`` when the decorator has a key. In
the task name and in each argument value that goes into the key part, ``%`` is written
``%25`` and ``:`` is written ``%3A`` (percent-encoding, as in URLs), so a ``:`` that joins
parts never comes from a value: ``("x:y", "z")`` and ``("x", "y:z")`` give different names,
while ints, slugs and e-mail addresses read as they are. A callable key's result is used as
it is.
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import re
import string
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from celery import Task
from celery.local import Proxy
from django.core.exceptions import ImproperlyConfigured

from .._names import MAX_READABLE, digest
from ..listing import TaskRecord

__all__ = [
    "MAX_READABLE_NAME",
    "SingleInstance",
    "claim_name",
    "claim_owner",
    "config_of",
    "encode_key_value",
    "task_record",
]

Policy = Literal["skip", "raise", "retry", "wait"]
Enqueue = Literal["allow", "skip", "raise"]
KeySpec = str | Sequence[str] | Callable[..., object] | None

#: Lock names longer than this are hashed; the readable arguments go into the metadata.
MAX_READABLE_NAME = MAX_READABLE


def encode_key_value(text: str) -> str:
    """Percent-encode ``%`` and ``:`` in ``text``, one value of a lock name."""
    return text.replace("%", "%25").replace(":", "%3A")


class _KeyFormatter(string.Formatter):
    # Encodes each field once formatted, so that format specifications apply to the value
    # itself and the template's own text (its ':' included) is kept as written.
    def format_field(self, value: Any, format_spec: str) -> str:
        return encode_key_value(super().format_field(value, format_spec))


_formatter = _KeyFormatter()


@dataclass(frozen=True)
class SingleInstance:
    """The settings of one ``@single_instance`` decorator, kept on the task's function."""

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

    def lock_name(self, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name of a run of ``task_name`` with these arguments."""
        part = self.key_part(args, kwargs)
        task_part = encode_key_value(task_name)
        name = f"celery:{task_part}" if part is None else f"celery:{task_part}:{part}"
        if len(name) > MAX_READABLE_NAME:
            name = f"celery:{task_part}:sha256:{digest(name)}"
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
                raise ImproperlyConfigured(
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

    def message_lock_name(self, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """Return the lock name of a run of ``task`` whose message has these arguments.

        The function gets them as Celery calls it: with the task itself in front for a
        bound task (``bind=True``, or a task class whose ``run`` method is decorated).
        """
        return self.lock_name(task.name, call_args(task, args), dict(kwargs))


def call_args(task: Task, args: Sequence[Any]) -> tuple[Any, ...]:
    """Return the positional arguments the function of ``task`` gets for a message's ``args``.

    A bound task's function (``bind=True``, or a task class whose ``run`` method is
    decorated) gets the task itself in front.
    """
    if isinstance(task, Proxy):  # as shared_task and a lazy app.task return it
        task = task._get_current_object()
    # The task's class holds run as Celery made it: a function, so a method of the task,
    # when bound, and a staticmethod when not. The instance's own run may be a wrapper that
    # calls it (autoretry_for puts one there), and tells nothing.
    if inspect.isfunction(inspect.getattr_static(type(task), "run", None)):
        return (task, *args)
    return tuple(args)


#: The claim of a queued or running ``enqueue=`` task is named this, then its lock's name.
CLAIM_PREFIX = "queued:"

_PLAIN_ID = re.compile(r"[-\w.:@]{1,150}", re.ASCII)


def claim_name(lock_name: str) -> str:
    """Return the name of the claim that a queued or running task with ``lock_name`` holds."""
    return f"{CLAIM_PREFIX}{lock_name}"


def claim_owner(task_id: str) -> str:
    """Return the owner of the claim of the task ``task_id`` (a digest for unusual ids)."""
    plain = _PLAIN_ID.fullmatch(task_id)
    return f"celery-queued:{task_id if plain else 'sha256:' + digest(task_id)}"


def task_record(
    task_name: str,
    config: SingleInstance,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    task_id: str | None,
    hostname: str | None,
    worker_pid: int | None,
) -> dict[str, Any]:
    """Return what a run, or a message not yet run, records in its lock's metadata.

    ``args`` and ``kwargs`` are the function's (a bound task's task in front, left out of
    the record).
    """
    summary = ", ".join(
        f"{k}={v!r}" for k, v in config.arguments(args, kwargs).items() if not isinstance(v, Task)
    )
    return TaskRecord(
        task_id=task_id,
        task_name=task_name,
        hostname=hostname,
        worker_pid=worker_pid,
        args=summary[:500],
        started_at=dt.datetime.now(dt.timezone.utc).isoformat(),
    ).as_metadata()


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


def config_of(task: Task) -> SingleInstance | None:
    """Return the ``@single_instance`` settings of ``task``, or None if it has none."""
    config = getattr(getattr(task, "run", None), "__single_instance__", None)
    return config if isinstance(config, SingleInstance) else None
