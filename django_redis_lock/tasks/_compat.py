"""Django's task framework: ``django.tasks`` (Django 6.0+), else the ``django-tasks`` backport.

The only module of this package that imports either; both have the same API.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING

from .._core.extras import missing_extra

__all__ = [
    "BaseTaskBackend",
    "ImmediateBackend",
    "Task",
    "TaskContext",
    "TaskResult",
    "task_enqueued",
    "task_finished",
    "task_started",
]

if TYPE_CHECKING or find_spec("django.tasks") is not None:
    from django.tasks import Task, TaskContext, TaskResult
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.backends.immediate import ImmediateBackend
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:  # pragma: no cover - Django 5.2 with the backport
    try:
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.backends.immediate import ImmediateBackend
        from django_tasks.base import Task, TaskContext, TaskResult
        from django_tasks.signals import task_enqueued, task_finished, task_started
    except ImportError as exc:
        raise missing_extra(
            exc,
            feature="django_redis_lock.tasks",
            package="Django's task framework (Django 6.0 or later, or the django-tasks backport)",
            extra="tasks",
        ) from exc
