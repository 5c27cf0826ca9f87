"""What asyncio lock handles need beyond the shared loop: cancellations and the holder's loop.

An event loop holds its tasks weakly, so work started and not awaited is kept here until
done. A client library can swallow a cancellation; the handles count them to notice. An
``on_lost`` callback runs on the holder's own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = [
    "finish",
    "keep_until_done",
    "on_holders_loop",
    "pending_cancels",
    "raise_if_cancelled",
]

logger = logging.getLogger("django_redis_lock")

F = TypeVar("F", bound="asyncio.Future[Any]")

_running: set[asyncio.Future[Any]] = set()


def keep_until_done(task: F) -> F:
    """Keep a reference to ``task`` until it is done, so it is not collected while it runs."""
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


def pending_cancels(task: asyncio.Task[object] | None) -> int:
    """Return how many cancellations of ``task`` are pending (0 before Python 3.11)."""
    cancelling = getattr(task, "cancelling", None)
    return 0 if cancelling is None else int(cancelling())


def raise_if_cancelled(task: asyncio.Task[object] | None, before: int) -> None:
    """Raise the cancellation a client library swallowed while the task awaited it.

    redis-py's asyncio client can return a reply to a task cancelled meanwhile, as if the
    cancellation never came (its read timeout takes it for its own). A lock must not go on
    as if it had not been cancelled: that task would hold a lock its caller gave up.
    """
    if pending_cancels(task) > before:
        raise asyncio.CancelledError


async def finish(work: Awaitable[int]) -> int:
    """Await ``work`` to its end, even if the calling task is cancelled again meanwhile."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


def on_holders_loop(name: str, call: Callable[[], object]) -> Callable[[], None]:
    """Return what runs ``call`` (an ``on_lost`` callback) on the calling task's event loop.

    The renewal thread finds losses; the callback runs on the holder's loop instead. If it
    returns an awaitable, that runs as a task there. Its errors are logged, never raised.
    """
    loop = asyncio.get_running_loop()

    def run() -> None:
        try:
            result = call()
            if inspect.isawaitable(result):
                keep_until_done(asyncio.ensure_future(result)).add_done_callback(done)
        except Exception:
            logger.exception("The on_lost callback of lock %r failed.", name)

    def done(task: asyncio.Future[object]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "The on_lost callback of lock %r failed.", name, exc_info=task.exception()
            )

    def from_any_thread() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is left to tell
            loop.call_soon_threadsafe(run)

    return from_any_thread
