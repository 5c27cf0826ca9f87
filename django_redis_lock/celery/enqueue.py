"""Refusing duplicates when they are sent: ``@single_instance(enqueue="skip" | "raise")``.

A task sent with ``delay()`` or ``apply_async()`` (a signature, chain, group or retry included)
first claims ``queued:<its lock name>`` for its task id, in one atomic acquire, and only then
publishes its message. A send that finds the claim held publishes nothing: it returns the
:class:`~celery.result.AsyncResult` of the task that holds it (``"skip"``) or raises
:class:`~django_redis_lock.DuplicateTaskError` (``"raise"``). The claim is held

- while the message waits, for at most ``enqueue_ttl`` seconds plus its countdown or ETA;
- while the run runs: the run takes it over as it starts (the same owner, so no other send
  finds it free in between) and renews it with its lock;
- until the run ends, whichever way: the run's process frees it when the body returned,
  raised or was skipped; the worker's main process when the run's child died, ran out of time
  or was terminated (see :mod:`.worker`), and when a worker discards the message as revoked
  or expired. A retry keeps it: the retry's send takes it again for the same task id;
- after a publish that raised but may have sent its message (see :mod:`.publish`), until
  its lease ends or the run takes it over.

Sends are seen by the task's class, Celery's own seam for a task's behaviour: a task whose
class derives from :class:`SingleInstanceTask` (``@shared_task(base=SingleInstanceTask)``, or
an app's ``task_cls``) claims in its ``apply_async``. Celery's :class:`~celery.app.task.Task`
and every other task are left as they are. ``@single_instance`` cannot do it alone: it sits
under ``@shared_task``/``@app.task`` and never sees the task object Celery makes of its
function, which Celery makes at moments no hook covers (when its app is finalized, when a
lazy ``@app.task`` is first used, at once on an app finalized already). ``send_task`` by name,
which never looks at the task's code, is not covered, nor is eager mode (where the run itself
is the send).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task, states
from celery._state import get_current_task
from celery.result import AsyncResult
from celery.signals import task_postrun
from celery.utils import uuid
from celery.utils.time import maybe_make_aware

from .._single_instance.enqueue_claim import claim, claim_metadata
from ..backends.base import AcquireRequest, BaseLockBackend, ReleaseRequest
from ..exceptions import LockError
from ..handler import locks
from ..listing import task_id as task_id_of
from ..lock import Lock
from .publish import may_have_sent, watch_attempts
from .run_names import (
    SingleInstance,
    call_args,
    claim_name,
    claim_owner,
    config_of,
    message_lock_name,
    task_record,
)
from .worker import keep_claim, release_claim, resending, run_id_of

__all__ = ["SingleInstanceTask", "take_over_claim"]

logger = logging.getLogger("django_redis_lock")

#: Claims taken over by the runs in this process, by run id, with the min_hold window that
#: their release keeps (measured from the send, so it ends with the run's own window).
_taken_over: dict[str, tuple[Lock, float]] = {}

#: Set on a run's request when its claim went on to a message it sent under its own task id
#: (its retry, or a replacement): the run's end then leaves the claim to that message.
HANDED_ON = "django_redis_lock_claim_handed_on"

#: The tasks with enqueue= whose class was found not to claim when sent (reported once).
_reported: set[str] = set()


class SingleInstanceTask(Task):  # type: ignore[misc]
    """Refuse duplicates when sent, for a task whose function has ``enqueue=``.

    ``@shared_task(base=SingleInstanceTask)`` or ``@app.task(base=SingleInstanceTask)``; or
    ``Celery(..., task_cls=SingleInstanceTask)`` for every task of an app, or a task class
    derived from it. A task without ``enqueue=`` sends as its base class does; a subclass that
    overrides ``apply_async`` calls ``super()``.
    """

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> AsyncResult:
        """Send the task, unless its key is queued or running: see ``single_instance``."""
        return _send(self, super().apply_async, args, kwargs, task_id, *rest, **options)


def _send(
    task: Task,
    publish: Callable[..., AsyncResult],
    args: Sequence[Any] | None,
    kwargs: dict[str, Any] | None,
    task_id: str | None,
    *rest: Any,
    **options: Any,
) -> AsyncResult:
    """Send ``task`` by ``publish`` (its class's ``apply_async``), claiming first.

    A task without ``enqueue=``, and eager mode, publish at once. A send that finds the claim
    held publishes nothing and returns the holder's result (or raises, for ``"raise"``).
    """
    config = config_of(task)
    if config is None or config.enqueue == "allow" or task.app.conf.task_always_eager:
        return publish(args, kwargs, task_id, *rest, **options)
    task_id = task_id or uuid()
    args, kwargs = tuple(args or ()), dict(kwargs or {})
    name = claim_name(message_lock_name(config, task, args, kwargs))
    backend, owner = locks[config.using], claim_owner(task_id)
    again = _hand_on(name, task_id)
    record = task_record(
        task.name,
        config,
        call_args(task, args),
        kwargs,
        task_id=task_id,
        hostname=None,  # no worker has it yet
        worker_pid=None,
    )
    request = AcquireRequest(
        ttl=config.enqueue_ttl + _delay(task, options),
        metadata=claim_metadata(record),
        limit=config.limit,
        holds=0 if again else None,
    )
    holder = claim(config, task.name, name, owner, request, again=again)
    if holder is not None:
        return task.AsyncResult(holder)
    attempts = watch_attempts(options, task.app.conf.task_publish_retry_policy or {})
    try:
        return publish(args, kwargs, task_id, *rest, **options)
    except BaseException as error:
        if not again:
            _after_failed_publish(task, backend, name, owner, [*attempts, error])
        raise


def _after_failed_publish(
    task: Task, backend: BaseLockBackend, name: str, owner: str, errors: list[BaseException]
) -> None:
    # Free the claim of a publish that surely sent nothing; keep, on its lease, that of one
    # whose message the broker may have queued all the same (see .publish): its run, if it
    # comes, takes the claim over as any run does.
    if not may_have_sent(task.app, errors):
        backend.release(name, owner, ReleaseRequest(holds=1))  # nothing was sent
        return
    logger.warning(
        "Kept the claim %r of %s until its lease ends: its publish failed, but the broker "
        "may have queued the message.",
        name,
        task.name,
    )


def _hand_on(name: str, task_id: str) -> bool:
    """Prepare a send made by a run, or for it; return whether it sends that same instance.

    A run's retry or replacement (its own task id, or a retry its worker's main process sends
    for a lost child) is the instance itself: its claim goes on with it, and a claim of other
    arguments than the new send's is freed. A run that sends the next instance of its own key
    (a chain, a link) hands its claim over: it is freed for the new send to take.
    """
    current = get_current_task()
    if current is None:
        return task_id in resending
    run_id = run_id_of(current.request) or ""
    if current.request.id == task_id:
        setattr(current.request, HANDED_ON, True)
        _forget(_taken_over.pop(run_id, None))
        config = config_of(current)
        if config is not None and config.enqueue != "allow":
            old = claim_name(
                message_lock_name(
                    config, current, current.request.args or (), current.request.kwargs or {}
                )
            )
            if old != name:
                locks[config.using].release(old, claim_owner(task_id), ReleaseRequest(holds=1))
        return True
    taken = _taken_over.get(run_id)
    if taken is not None and taken[0].name == name and taken[0].owner is not None:
        _forget(_taken_over.pop(run_id))
        taken[0].backend.release(name, taken[0].owner, ReleaseRequest(holds=1))
    return False


def _delay(task: Task, options: dict[str, Any]) -> float:
    # How long the message waits before it may run: its countdown, or until its ETA (a
    # naive one is in the app's time zone, as Celery reads it).
    countdown, eta = options.get("countdown"), options.get("eta")
    if isinstance(countdown, (int, float)):
        return max(0.0, float(countdown))
    if isinstance(eta, dt.datetime):
        due = maybe_make_aware(eta, task.app.timezone)
        waits: float = (due - task.app.now()).total_seconds()
        return max(0.0, waits)
    return 0.0


def report_unclaimed(task: Task, config: SingleInstance) -> None:
    """Log once, in this process, that ``task`` asks for ``enqueue=`` on a class that ignores it.

    The decorator sits under the task decorator and never sees the class, so this is said
    where the two meet: the first send of the task (the sending process) and its first run
    (the worker).
    """
    if isinstance(task, SingleInstanceTask) or task.name in _reported:
        return
    _reported.add(task.name)
    logger.error(
        "%s has enqueue=%r, but its sends do not refuse duplicates: its class is not "
        "django_redis_lock.celery.SingleInstanceTask (give it base=SingleInstanceTask).",
        task.name,
        config.enqueue,
    )


def take_over_claim(
    task: Task, config: SingleInstance, lock_name: str, run_id: str, metadata: dict[str, Any]
) -> None:
    """Take over, for the run ``run_id`` that holds ``lock_name``, the claim of its message.

    The run holds the claim under the owner its send used, renewed, until it ends (see
    :func:`_after_run`). A claim that lapsed is taken again; one held by another task id
    (sent after this one's lapsed) is left to it.
    """
    if config.enqueue == "allow" or task.request.id is None or task.request.is_eager:
        return
    report_unclaimed(task, config)
    claim = Lock(
        claim_name(lock_name),
        ttl=config.ttl,
        using=config.using,
        limit=config.limit,
        owner=claim_owner(task.request.id),
        metadata=metadata,
        auto_renew=True,
    )
    try:
        # From the send's long lease to the run's (a worker killed whole frees it soon), and
        # only then held, renewed: renewal is timed by the lease the acquire answers.
        lease = config.ttl or claim.backend.default_ttl
        claim.backend.extend(claim.name, claim_owner(task.request.id), lease, replace=True)
        if claim.acquire(blocking=False):
            _taken_over[run_id] = (claim, config.min_hold and config.min_hold + _age(claim))
    except LockError:
        logger.warning("Could not take over the claim %r.", claim.name, exc_info=True)


def _age(claim: Lock) -> float:
    # Seconds since the claim was taken, by its send (on the backend's clock).
    infos = claim.backend.lock_info(claim.name)
    return max((info.held_for for info in infos if info.owner == claim.owner), default=0.0)


def _forget(taken: tuple[Lock, float] | None) -> None:
    # Stop renewing a claim and forget it here, leaving it held on the server.
    if taken is not None and taken[0].owner is not None:
        taken[0]._forget(taken[0].owner)


def _after_run(
    sender: Task | None = None,
    *,
    task_id: str | None = None,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    retval: object = None,
    state: str | None = None,
    **extra: Any,
) -> None:
    # In the run's process, when the run ended (its body returned or raised, or the run was
    # refused by on_conflict): free its claim, unless its message goes on (a retry, a
    # replacement, a requeue) or another delivery of it runs. A run that took the claim over
    # keeps it for the task's min_hold window; one that never ran its body does not.
    config = None if sender is None else config_of(sender)
    if sender is None or config is None or config.enqueue == "allow" or not task_id:
        return
    if sender.request.is_eager:
        return
    args, kwargs = args or (), kwargs or {}
    taken = _taken_over.pop(run_id_of(sender.request) or "", None)
    _forget(taken)
    try:
        if state == states.RETRY or getattr(sender.request, HANDED_ON, False):
            return
        if state == states.REJECTED and getattr(retval, "requeue", False):
            keep_claim(sender, task_id, args, kwargs)
        elif taken is not None:
            release_claim(sender, task_id, args, kwargs, taken[1])
        elif not _running_elsewhere(sender, config, task_id, args, kwargs):
            release_claim(sender, task_id, args, kwargs, 0.0)
    except Exception:
        logger.exception("Could not free the claim of task %s[%s].", sender.name, task_id)


def _running_elsewhere(
    task: Task, config: SingleInstance, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> bool:
    # Whether another delivery of the same task id holds the run's lock (a redelivered
    # message, say): its claim is that delivery's.
    holders = locks[config.using].lock_info(message_lock_name(config, task, args, kwargs))
    return any(task_id_of(info) == task_id for info in holders)


task_postrun.connect(_after_run, weak=False)
