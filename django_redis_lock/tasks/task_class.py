"""``SingleInstanceTask``: the ``django.tasks`` task class that refuses duplicates when enqueued.

``django.tasks`` builds every task from the ``task_class`` of its backend (``@task()`` calls
``task_backends[alias].task_class(...)``): that is its seam for a task's own behaviour, and the
only one. A ``Task`` is a frozen dataclass made by ``@task()`` above ``@single_instance``, so
the decorator never sees it, and nothing else is called on the way to a backend's
``enqueue()``. A backend whose ``task_class`` is :class:`SingleInstanceTask` gives its tasks an
``enqueue()``/``aenqueue()`` that claim first when the function has ``enqueue=``, and a
definition that refuses settings the backend cannot honour; its other tasks enqueue exactly as
with Django's own class. ``django.tasks``' ``Task`` is never changed.
"""

from __future__ import annotations

from typing import Generic, ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from ._compat import Task, TaskResult
from .claims import check_backend, claiming_config, enqueue_claimed

__all__ = ["SingleInstanceTask"]

P = ParamSpec("P")
T = TypeVar("T")


# Generic through Generic[P, T]: the backport's Task is generic, Django 6's is not (and cannot
# be subscripted), so the base is named bare for both.
class SingleInstanceTask(Task, Generic[P, T]):  # type: ignore[type-arg]
    """A ``django.tasks`` task that honours ``@single_instance(enqueue=...)`` when enqueued.

    Name it as the ``task_class`` of the backends whose tasks use ``enqueue=``::

        class Backend(DatabaseBackend):
            task_class = SingleInstanceTask

    It also refuses, when the task is defined, an ``on_conflict`` or ``enqueue`` its backend
    cannot honour.
    """

    __slots__ = ()

    def __post_init__(self) -> None:
        """Validate the task as its backend does, then its ``@single_instance`` settings."""
        super().__post_init__()
        check_backend(self)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, T]:
        """Enqueue the task, unless its key is queued or running (with ``enqueue=``)."""
        config = claiming_config(self)
        enqueue = super().enqueue
        if config is None:
            return enqueue(*args, **kwargs)
        return enqueue_claimed(self, config, args, kwargs, lambda: enqueue(*args, **kwargs))

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, T]:
        """Enqueue the task from async code, as :meth:`enqueue` does."""
        config = claiming_config(self)
        if config is None:
            return await super().aenqueue(*args, **kwargs)
        # The claim's round trips block, and the backend's enqueue may use the database: both
        # run where Django runs sync database work for async code, as a backend's own
        # aenqueue() does (thread_sensitive), so its connection is managed as usual.
        return await sync_to_async(enqueue_claimed, thread_sensitive=True)(
            self,
            config,
            args,
            kwargs,
            lambda: self.get_backend().enqueue(self, list(args), kwargs),
        )
