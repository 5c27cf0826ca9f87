"""``@single_instance`` for Django's task framework, ``django.tasks``.

::

    from django.tasks import task  # Django 6.0+; on 5.2: from django_tasks import task
    from django_redis_lock.tasks import single_instance

    @task()
    @single_instance(key="{customer_id}", ttl=60)
    def bill(customer_id): ...

Celery's ``app.autodiscover_tasks()`` imports the ``tasks`` module of every installed app,
this one included, in projects that never use ``django.tasks``. So importing this module does
nothing: the decorators (:mod:`django_redis_lock.tasks.decorator`,
:mod:`django_redis_lock.tasks.rate_decorator`) and the task class a backend
supplies for ``enqueue=`` (:mod:`django_redis_lock.tasks.task_class`) are loaded when their
names are first asked for, and only then is ``django.tasks`` (or the ``django-tasks`` backport)
imported. Without either, that import fails with an :class:`ImportError` naming the extra to
install (``pip install "django-redis-lock[tasks]"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .decorator import single_instance
    from .rate_decorator import rate_limit
    from .task_class import SingleInstanceTask

__all__ = ["SingleInstanceTask", "rate_limit", "single_instance"]


def __getattr__(name: str) -> Any:
    """Load ``single_instance``, ``rate_limit`` or ``SingleInstanceTask`` on first use."""
    if name == "single_instance":
        from .decorator import single_instance

        return single_instance
    if name == "rate_limit":
        from .rate_decorator import rate_limit

        return rate_limit
    if name == "SingleInstanceTask":
        from .task_class import SingleInstanceTask

        return SingleInstanceTask
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
