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
  or expired. A retry keeps it: the retry's send takes it again for the same task id.

Sends are seen by wrapping :meth:`celery.app.task.Task.apply_async` once, when this package's
Celery integration is imported; tasks without ``enqueue=`` pass straight through. ``send_task``
by name, which never looks at the task's code, is not covered, nor is eager mode (where the
run itself is the send).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from celery import Task, states
from celery._state import get_current_task
from celery.result import AsyncResult
from celery.signals import task_postrun
from celery.utils import uuid

from ..backends.base import AcquireRequest, holder_metadata
from ..exceptions import DuplicateTaskError, LockError
from ..handler import locks
from ..holds import held
from ..listing import describe_holder, task_id
from ..lock import Lock
from ..renewal import renewer
from .keys import SingleInstance, call_args, claim_name, claim_owner, config_of, task_record
from .worker import release_claim, run_id_of

__all__ = ["take_over_claim"]

logger = logging.getLogger("django_redis_lock")

#: Claims taken over by the runs in this process, by run id, with the min_hold window that
#: their release keeps (measured from the send, so it ends with the run's own window).
_taken_over: dict[str, tuple[Lock, float]] = {}

#: How often a send tries again when a claim it found held was freed before it could tell
#: by whom.
_ATTEMPTS = 3


def _claiming(publish: Callable[..., AsyncResult]) -> Callable[..., AsyncResult]:
    @functools.wraps(publish)
    def apply_async(
        self: Task,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> AsyncResult:
        config = config_of(self)
        if config is None or config.enqueue == "allow" or self.app.conf.task_always_eager:
            return publish(self, args, kwargs, task_id, *rest, **options)
        task_id = task_id or uuid()
        args, kwargs = tuple(args or ()), dict(kwargs or {})
        name = claim_name(config.message_lock_name(self, args, kwargs))
        backend, owner = locks[config.using], claim_owner(task_id)
        current = get_current_task()
        retry = current is not None and current.request.id == task_id
        if retry:
            _forget(_taken_over.pop(run_id_of(current.request) or "", None))
        request = AcquireRequest(
            ttl=config.enqueue_ttl + _delay(options),
            metadata=_claim_metadata(self, config, task_id, args, kwargs),
            limit=config.limit,
            holds=0,
        )
        for _ in range(_ATTEMPTS):
            if backend.acquire(name, owner, request).acquired or retry:
                break  # a retry is the same instance: it is sent, claimed or not
            refused = _refuse(self, config, name)
            if refused is not None:
                return refused
        else:
            raise DuplicateTaskError(
                f"Did not send {self.name}: its claim {name!r} was taken and freed "
                f"{_ATTEMPTS} times while sending.",
                lock_name=name,
            )
        try:
            return publish(self, args, kwargs, task_id, *rest, **options)
        except BaseException:
            backend.release(name, owner, 1)  # nothing was sent
            raise

    return apply_async


def _delay(options: dict[str, Any]) -> float:
    # How long the message waits before it may run: its countdown, or until its ETA.
    countdown, eta = options.get("countdown"), options.get("eta")
    if isinstance(countdown, (int, float)):
        return max(0.0, float(countdown))
    if isinstance(eta, dt.datetime):
        now = dt.datetime.now(eta.tzinfo or None)
        return max(0.0, (eta - now).total_seconds())
    return 0.0


def _claim_metadata(
    task: Task, config: SingleInstance, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> bytes:
    record = task_record(
        task.name,
        config,
        call_args(task, args),
        kwargs,
        task_id=task_id,
        hostname=None,  # no worker has it yet
        worker_pid=None,
    )
    return holder_metadata(
        host=socket.gethostname(),
        pid=os.getpid(),
        thread=threading.current_thread().name,
        data=record,
    )


def _refuse(task: Task, config: SingleInstance, name: str) -> AsyncResult | None:
    # Return the result of the instance that holds the claim, or raise; None if the claim
    # was freed meanwhile (the send tries again).
    holders = locks[config.using].lock_info(name)
    if not holders:
        return None
    ids = [found for info in holders if (found := task_id(info)) is not None]
    holder = "; ".join(describe_holder(info) for info in holders)
    if config.enqueue == "raise" or not ids:
        raise DuplicateTaskError(
            f"Did not send {task.name}: an instance with the same key is queued or running "
            f"({name!r} is held by {holder}).",
            lock_name=name,
            task_id=ids[0] if ids else None,
        )
    logger.info("Did not send %s: it is queued or running as %s.", task.name, ids[0])
    return task.AsyncResult(ids[0])


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
    claim = None if taken is None else taken[0]
    if claim is None or claim.owner is None:
        return
    hold = held.pop((claim.backend, claim.name, claim.owner), None)
    if hold is not None and hold.lease is not None:
        renewer.remove(hold.lease)


def _after_run(
    sender: Task | None = None,
    task_id: str | None = None,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    state: str | None = None,
    **extra: Any,
) -> None:
    # In the run's process, when the run ended (its body returned, raised, was skipped or
    # asked for a retry): free its claim, unless a retry took it again. A run that took the
    # claim over keeps it for the task's min_hold window; one that never ran its body does
    # not.
    if sender is None or config_of(sender) is None or sender.request.is_eager:
        return
    taken = _taken_over.pop(run_id_of(sender.request) or "", None)
    _forget(taken)
    if state == states.RETRY:
        return
    try:
        release_claim(
            sender, task_id, args or (), kwargs or {}, 0.0 if taken is None else taken[1]
        )
    except Exception:
        logger.exception("Could not free the claim of task %s[%s].", sender.name, task_id)


Task.apply_async = _claiming(Task.apply_async)
task_postrun.connect(_after_run, weak=False)
