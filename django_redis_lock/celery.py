"""``@single_instance``: at most one running instance of a Celery task, per task or per key.

::

    from celery import shared_task
    from django_redis_lock.celery import single_instance

    @shared_task(bind=True)
    @single_instance(key="{customer_id}", on_conflict="skip", ttl=60)
    def bill(self, customer_id): ...

The lock is taken when the task's body starts (so beat, chains, chords, ``send_task``,
``apply()`` and eager mode are all covered) and held, renewed, only while it runs. Its owner
is the task id, so the worker's main process can free a lock whose child process died: it
does so at once when the child is killed, hits the hard time limit or is terminated by a
revoke; a whole worker killed frees its locks when their short leases end. A ``self.retry()``
frees the lock before the retry is published, so the retried run can take it.

Only this module imports Celery (``pip install django-redis-lock[celery]``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import hashlib
import inspect
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar

from celery import Task
from celery._state import get_current_task
from celery.signals import before_task_publish, task_received
from django.core.exceptions import ImproperlyConfigured

from ._validation import validate_limit, validate_timeout, validate_ttl
from .conf import DEFAULT_ALIAS
from .exceptions import LockNotAcquiredError
from .handler import locks
from .lock import Lock

__all__ = ["SingleInstance", "single_instance"]

P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("django_redis_lock")

Policy = Literal["skip", "raise", "retry", "wait"]
KeySpec = str | Sequence[str] | Callable[..., object] | None

#: Lock names longer than this are hashed; the readable arguments go into the metadata.
MAX_READABLE_NAME = 200

#: How long the worker's main process waits for a timed-out child to exit before it frees the
#: child's lock itself (a child that outlives this keeps, and frees, its lock on its own).
CHILD_EXIT_WAIT = 60.0

#: Locks of the task runs in this process, by task id (for releasing before a retry).
_running: dict[str, Lock] = {}


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

    def lock_name(self, task_name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the lock name of a run of ``task_name`` with these arguments."""
        part = self.key_part(args, kwargs)
        name = f"celery:{task_name}" if part is None else f"celery:{task_name}:{part}"
        if len(name) > MAX_READABLE_NAME:
            digest = hashlib.sha256(name.encode()).hexdigest()[:32]
            name = f"celery:{task_name}:sha256:{digest}"
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
                return self.key.format_map(values)
            except (KeyError, IndexError, AttributeError) as exc:
                raise ImproperlyConfigured(
                    f"single_instance key {self.key!r} does not fit the task's arguments "
                    f"({', '.join(values)}): {exc!r}. Use their names in braces, a list of "
                    "names, or a callable taking the task's arguments."
                ) from exc
        return ":".join(str(values[name]) for name in self.key)

    def arguments(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, object]:
        """Return the task's arguments by name, defaults applied, as key-friendly values."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return {name: _key_value(value) for name, value in bound.arguments.items()}


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


def single_instance(
    key: KeySpec = None,
    *,
    on_conflict: Policy = "skip",
    ttl: float | None = None,
    timeout: float | None = None,
    then: Literal["skip", "raise"] = "skip",
    limit: int = 1,
    using: str = DEFAULT_ALIAS,
    countdown: float | None = None,
    max_retries: int | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Let at most ``limit`` runs of the decorated task run at once (per ``key``).

    Put it under ``@app.task``/``@shared_task``. ``key`` narrows the lock to some arguments:
    a format template over their names (``"{customer_id}"``), a list of names, or a callable
    taking the task's arguments; model instances count by primary key. ``on_conflict`` says
    what a run does when the lock is held: ``"skip"`` (log a warning, return None),
    ``"raise"`` (:class:`~django_redis_lock.LockNotAcquiredError`), ``"retry"`` (Celery
    retry after ``countdown`` seconds, by default when the holder's lease ends, within
    ``max_retries``) or ``"wait"`` (up to ``timeout`` seconds, then as ``then`` says).
    ``ttl`` is the lease, renewed while the body runs.
    """
    if on_conflict not in ("skip", "raise", "retry", "wait"):
        raise ImproperlyConfigured(
            f"single_instance on_conflict must be 'skip', 'raise', 'retry' or 'wait', got "
            f"{on_conflict!r}."
        )
    if then not in ("skip", "raise"):
        raise ImproperlyConfigured(
            f"single_instance then must be 'skip' or 'raise', got {then!r}."
        )
    if on_conflict != "wait" and timeout is not None:
        raise ImproperlyConfigured(
            f"single_instance timeout only applies to on_conflict='wait' (got {on_conflict!r})."
        )
    if not (key is None or isinstance(key, (str, list, tuple)) or callable(key)):
        raise ImproperlyConfigured(
            f"single_instance key must be None, a template, a list of argument names or a "
            f"callable, got {key!r}."
        )

    def decorate(func: Callable[P, R]) -> Callable[P, R | None]:
        config = SingleInstance(
            key=key,
            on_conflict=on_conflict,
            then=then,
            ttl=None if ttl is None else validate_ttl(ttl),
            timeout=validate_timeout(timeout),
            limit=validate_limit(limit),
            using=using,
            countdown=validate_timeout(countdown, argument="countdown"),
            max_retries=max_retries,
            signature=inspect.signature(func),
        )
        if isinstance(key, (list, tuple)):
            unknown = [name for name in key if name not in config.signature.parameters]
            if unknown:
                raise ImproperlyConfigured(
                    f"single_instance key names {unknown!r} are not arguments of "
                    f"{func.__qualname__}{config.signature}."
                )

        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R | None:
            result: R | None = _run_single(config, func, args, kwargs)
            return result

        run.__single_instance__ = config  # type: ignore[attr-defined]
        # For tools that do not follow __wrapped__, such as Celery's argument check.
        run.__signature__ = config.signature  # type: ignore[attr-defined]
        return run

    return decorate


def _run_single(
    config: SingleInstance, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    task = get_current_task()
    task_name = task.name if task is not None else f"{func.__module__}.{func.__qualname__}"
    task_id = task.request.id if task is not None else None
    name = config.lock_name(task_name, args, kwargs)
    held = Lock(
        name,
        ttl=config.ttl,
        using=config.using,
        limit=config.limit,
        blocking=config.on_conflict == "wait",
        timeout=config.timeout if config.on_conflict == "wait" else None,
        owner=None if task_id is None else run_owner(task_id, os.getpid()),
        metadata=_metadata(task, task_name, config, args, kwargs),
    )
    try:
        held.__enter__()
    except LockNotAcquiredError:
        return _conflict(config, task, held)
    if task_id is not None:
        _running[task_id] = held
    try:
        result = func(*args, **kwargs)
    except BaseException as exc:
        # The body's exception (a Retry among them) wins over a lost lease, which is logged
        # and signalled all the same. A lock released before a retry is not released again.
        held.__exit__(type(exc), exc, exc.__traceback__)
        raise
    finally:
        if task_id is not None:
            _running.pop(task_id, None)
    held.__exit__(None, None, None)
    return result


def _metadata(
    task: Task | None,
    task_name: str,
    config: SingleInstance,
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    request = None if task is None else task.request
    summary = ", ".join(
        f"{k}={v!r}" for k, v in config.arguments(args, kwargs).items() if v is not task
    )
    return {
        "task_id": None if request is None else request.id,
        "task_name": task_name,
        "hostname": None if request is None else request.hostname,
        "worker_pid": os.getpid(),
        "args": summary[:500],
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(),
    }


def _conflict(config: SingleInstance, task: Task | None, held: Lock) -> Any:
    holders = held.backend.lock_info(held.name)
    holder = ", ".join(str(i.metadata.get("task_id") or i.owner) for i in holders) or "unknown"
    policy = config.then if config.on_conflict == "wait" else config.on_conflict
    message = f"Lock {held.name!r} is held by task {holder}"
    if policy == "retry" and task is not None:
        countdown = config.countdown
        if countdown is None:
            countdown = max(1, math.ceil(min((i.ttl for i in holders), default=1)))
        raise task.retry(
            countdown=countdown,
            max_retries=config.max_retries,
            exc=LockNotAcquiredError(f"{message}.", lock_name=held.name),
        )
    if policy in {"raise", "retry"}:
        raise LockNotAcquiredError(f"{message}.", lock_name=held.name)
    logger.warning("Skipped a run of %s: %s.", held.name, message)
    return None


# The worker's side ---------------------------------------------------------------------------


def config_of(task: Task) -> SingleInstance | None:
    """Return the ``@single_instance`` settings of ``task``, or None if it has none."""
    config = getattr(getattr(task, "run", None), "__single_instance__", None)
    return config if isinstance(config, SingleInstance) else None


def run_owner(task_id: str, pid: int) -> str:
    """Return the owner token of the run of task ``task_id`` in process ``pid``.

    The task id alone would not do: a retried or redelivered run has the same id, and must not
    share (or free) the hold of the run before it.
    """
    return f"celery:{task_id}:{pid}"


def release_run(
    task: Task, task_id: str, pid: int, args: Sequence[Any], kwargs: dict[str, Any]
) -> int:
    """Free the lock that the run of ``task`` in process ``pid`` holds; safe to repeat.

    For a worker's main process whose child ran the task and died or was killed: only that
    run's hold is freed, whatever other runs hold. Return how many holds were freed.
    """
    config = config_of(task)
    if config is None:
        return 0
    name = config.lock_name(task.name, args, kwargs)
    freed = locks[config.using].force_release(name, owner=run_owner(task_id, pid))
    if freed:
        logger.warning(
            "Freed lock %r of task %s[%s], whose run ended abnormally.", name, task.name, task_id
        )
    return freed


def _watch_request(sender: object = None, request: Any = None, **kwargs: Any) -> None:
    # In the worker's main process: when the pool reports that the run's child was killed,
    # terminated or went past its hard time limit, free the run's lock, as soon as the child
    # is gone (the pool reports a time limit before it kills the child, and a child may
    # ignore SIGTERM for a while), and before Celery's own handler publishes a retry when the
    # child is gone already. Celery versions differ in which signals they send on these
    # paths; these handlers are called on all of them.
    task = getattr(request, "task", None)
    if task is None or config_of(task) is None:
        return

    def release(pid: int) -> None:
        try:
            release_run(task, request.id, pid, request.args, request.kwargs)
        except Exception:
            logger.exception("Could not free the lock of task %s[%s].", task.name, request.id)

    def release_once_gone() -> None:
        pid: int | None = request.worker_pid
        if pid is None or pid == os.getpid():
            return  # never started, or ran in this process (a non-forking pool)
        if _process_gone(pid):
            release(pid)
        else:
            threading.Thread(
                target=_release_when_gone, args=(pid, release), name="drl-release", daemon=True
            ).start()

    on_failure, on_timeout = request.on_failure, request.on_timeout

    def failed(*args: Any, **kwargs: Any) -> Any:
        # Only the pool's error callback (a child lost, terminated or out of time) comes
        # here without return_ok: a body that raised or retried reports through on_success,
        # with return_ok=True, and its own run has freed the lock already.
        if not kwargs.get("return_ok", False):
            release_once_gone()
        return on_failure(*args, **kwargs)

    def timed_out(soft: bool, timeout: float) -> Any:
        if not soft:
            release_once_gone()
        return on_timeout(soft, timeout)

    request.on_failure = failed
    request.on_timeout = timed_out


def _release_when_gone(pid: int, release: Callable[[int], None]) -> None:
    deadline = time.monotonic() + CHILD_EXIT_WAIT
    while not _process_gone(pid):
        if time.monotonic() > deadline:
            return  # still alive: its own renewal keeps (and its exit releases) the lock
        time.sleep(0.02)
    release(pid)


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # dead, not reaped
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)  # no /proc: ask the kernel
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _release_before_retry(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    # A run that calls self.retry() publishes its next run (same task id) before it ends:
    # free the lock first, so that run can take it.
    if not headers:
        return
    held = _running.pop(str(headers.get("id")), None)
    if held is not None and held.fencing_token is not None:
        held.release()


# Connected here rather than with the decorator form, which Celery does not type.
task_received.connect(_watch_request, weak=False)
before_task_publish.connect(_release_before_retry, weak=False)
