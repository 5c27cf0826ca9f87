"""Which task a run of a decorated ``django.tasks`` function is, for every decorator here.

A run reads its :class:`TaskResult` from its context (``@task(takes_context=True)``), else
from the ``task_started`` signal that every backend sends in the thread that runs the task,
just before it calls it. Decorators stack (``@single_instance`` over ``@rate_limit``, or the
other way round): each wrapper of the task's function finds the same result, and the body
they wrap finds none, so a task the body calls directly (``.call()``) never takes this run
for its own.

A wrapper that runs a body which is another wrapper of ours also lends it what must happen
before the run enqueues itself again (:func:`before_retry`): ``@single_instance`` frees the
``enqueue=`` claim it took over, so that the retry ``@rate_limit`` enqueues can claim anew.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.dispatch import receiver

from ._compat import TaskContext, TaskResult, task_finished, task_started

__all__ = ["WRAPPER", "before_retry", "calling", "result_of", "split_context"]

#: The attribute that marks the wrappers of this package's ``django.tasks`` decorators.
WRAPPER = "__django_redis_lock_task_wrapper__"

#: The result of the task this context is running, as ``task_started`` announced it.
_current: contextvars.ContextVar[TaskResult[Any, Any] | None] = contextvars.ContextVar(
    "django_redis_lock_task_result", default=None
)
_started: dict[str, contextvars.Token[TaskResult[Any, Any] | None]] = {}

#: What must happen before the run enqueues itself again, from the wrappers around this one.
_before_retry: contextvars.ContextVar[tuple[Callable[[], None], ...]] = contextvars.ContextVar(
    "django_redis_lock_task_before_retry", default=()
)


def split_context(args: tuple[Any, ...]) -> tuple[TaskContext[Any, Any] | None, tuple[Any, ...]]:
    """Return the run's context, if it takes one, and the task's own arguments after it."""
    if args and isinstance(args[0], TaskContext):
        return args[0], args[1:]
    return None, args


def result_of(
    wrapper: Callable[..., Any], context: TaskContext[Any, Any] | None
) -> TaskResult[Any, Any] | None:
    """Return the result of the task whose run calls ``wrapper``, if it is known."""
    if context is not None:
        return context.task_result
    current = _current.get()
    if current is None:
        return None
    func: Any = current.task.func
    while func is not None:  # the task's function, then the wrappers inside it
        if func is wrapper:
            return current
        func = getattr(func, "__wrapped__", None) if getattr(func, WRAPPER, False) else None
    return None


def before_retry() -> tuple[Callable[[], None], ...]:
    """Return what the wrappers around this run ask to be done before it is enqueued again."""
    return _before_retry.get()


@contextmanager
def calling(func: Callable[..., Any], then: Callable[[], None] | None = None) -> Iterator[None]:
    """Call ``func`` in the block: the run's body, or another wrapper of ours.

    A body runs as no task's run. Another wrapper finds this run, and ``then`` among what to
    do before a retry.
    """
    if getattr(func, WRAPPER, False):
        hooks = before_retry() if then is None else (*before_retry(), then)
        token = _before_retry.set(hooks)
        try:
            yield
        finally:
            _before_retry.reset(token)
        return
    outside, hooks_outside = _current.set(None), _before_retry.set(())
    try:
        yield
    finally:
        _before_retry.reset(hooks_outside)
        _current.reset(outside)


@receiver(task_started, dispatch_uid="django_redis_lock.tasks.started")
def _task_started(sender: object, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
    # Every backend announces a run in the thread that runs it, just before it calls the
    # task: the run reads its result here when it takes no context.
    _started[str(task_result.id)] = _current.set(task_result)


@receiver(task_finished, dispatch_uid="django_redis_lock.tasks.finished")
def _task_finished(sender: object, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
    token = _started.pop(str(task_result.id), None)
    if token is None:
        return
    try:
        _current.reset(token)  # the run that enqueued this one (ImmediateBackend) is current
    except ValueError:  # announced in another context
        _current.set(None)
