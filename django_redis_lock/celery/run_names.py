"""The lock name of a ``@single_instance`` Celery run, from its message or its function.

The rules for names, keys and records are the same for every task queue: see
:mod:`django_redis_lock._single_instance.lock_names`. A Celery run's lock is
``celery:<task name>[:<key part>]``; what is particular to Celery is how a bound task's
function gets the task in front of its arguments, and the claim's owner, named after the task
id that Celery chooses before it sends.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

from celery import Task
from celery.local import Proxy

from .._core.names import digest
from .._single_instance.config import Enqueue, KeySpec, Policy, SingleInstance
from .._single_instance.enqueue_claim import CLAIM_PREFIX, claim_name
from .._single_instance.lock_names import MAX_READABLE_NAME, encode_key_value

__all__ = [
    "CLAIM_PREFIX",
    "MAX_READABLE_NAME",
    "Enqueue",
    "KeySpec",
    "Policy",
    "SingleInstance",
    "call_args",
    "claim_name",
    "claim_owner",
    "config_of",
    "encode_key_value",
    "message_lock_name",
    "task_record",
]

#: The first part of a Celery run's lock name.
QUEUE = "celery"


def message_lock_name(
    config: SingleInstance, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str:
    """Return the lock name of a run of ``task`` whose message has these arguments.

    The function gets them as Celery calls it: with the task itself in front for a
    bound task (``bind=True``, or a task class whose ``run`` method is decorated).
    """
    return config.lock_name(task.name, call_args(task, args), dict(kwargs))


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


_PLAIN_ID = re.compile(r"[-\w.:@]{1,150}", re.ASCII)


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
    return config.record(
        task_name,
        args,
        kwargs,
        runner="celery",
        task_id=task_id,
        hostname=hostname,
        worker_pid=worker_pid,
        hidden=(Task,),
    )


def config_of(task: Task) -> SingleInstance | None:
    """Return the ``@single_instance`` settings of ``task``, or None if it has none."""
    config = getattr(getattr(task, "run", None), "__single_instance__", None)
    return config if isinstance(config, SingleInstance) else None
