"""The test suite's ``django.tasks`` backends: the usual ones, supplying ``SingleInstanceTask``.

``enqueue=`` is honoured by the task class a backend supplies (its ``task_class``), as
docs/tasks.rst tells a project to do.
"""

from __future__ import annotations

from django.utils.module_loading import import_string
from django_tasks_db import DatabaseBackend as DjangoTasksDatabaseBackend

from django_redis_lock.tasks import SingleInstanceTask
from tests.settings import _TASKS

_Immediate = import_string(f"{_TASKS}.backends.immediate.ImmediateBackend")
_Dummy = import_string(f"{_TASKS}.backends.dummy.DummyBackend")


class ImmediateBackend(_Immediate):
    """Runs a task at once, inside its ``enqueue()``."""

    task_class = SingleInstanceTask


class DummyBackend(_Dummy):
    """Keeps what is enqueued, runs nothing."""

    task_class = SingleInstanceTask


class DatabaseBackend(DjangoTasksDatabaseBackend):
    """django-tasks-db's: a table of tasks that its ``db_worker`` runs."""

    task_class = SingleInstanceTask
