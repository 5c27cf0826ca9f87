"""Who owns a lock: one random token per thread, or per asyncio task; new in a forked child.

Each acquire call also has an id of its own (:func:`new_attempt`), so that what one call did
can be undone later without touching what another call of the same owner did.

Owner tokens starting with :data:`MIN_HOLD_PREFIX` are the backends' own: a hold kept for its
``min_hold`` window after its release belongs to no owner that could take, release or extend it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import threading
import weakref
from collections.abc import Callable

from ..exceptions import LockError

__all__ = [
    "MIN_HOLD_PREFIX",
    "TASKS",
    "THREADS",
    "Owners",
    "current_owner",
    "current_task_owner",
    "new_attempt",
]

#: The owner of a hold kept for its ``min_hold`` window after its release: this prefix, then
#: the token of the owner that released it. No owner given to a lock may start with it.
MIN_HOLD_PREFIX = "min_hold:"

_owner = threading.local()
_task_owners: weakref.WeakKeyDictionary[asyncio.Task[object], str] = weakref.WeakKeyDictionary()


def current_owner() -> str:
    """Return the owner token of the calling thread: random, from :mod:`secrets`."""
    token: str | None = getattr(_owner, "token", None)
    if token is None:
        token = _owner.token = secrets.token_hex(16)
    return token


def current_task_owner() -> str:
    """Return the owner token of the running asyncio task: random, from :mod:`secrets`.

    Each task is its own owner, whatever it shares with others (a lock object, a context):
    a task never inherits the token of the task that created it.
    """
    task = asyncio.current_task()
    if task is None:
        raise LockError("An asyncio lock must be used from inside an asyncio task.")
    token = _task_owners.get(task)
    if token is None:
        token = _task_owners[task] = secrets.token_hex(16)
    return token


class Owners:
    """Who owns a hold when the caller names no owner: each thread; see :data:`TASKS`."""

    def token(self) -> str:
        """Return the owner token of the caller."""
        return current_owner()

    def where(self) -> str:
        """Return what runs the caller, as shown in listings."""
        return threading.current_thread().name

    def orphan_check(self, own_token: bool) -> Callable[[], str | None] | None:
        """Return how the renewal thread learns that the caller can no longer release: why not.

        ``own_token``: the caller gave an owner token of its own, which outlives a thread.
        """
        if own_token:
            return None
        thread = threading.current_thread()

        def orphaned() -> str | None:
            if thread.is_alive():
                return None
            return "the thread holding it ended without releasing it"

        return orphaned


class TaskOwners(Owners):
    """Each asyncio task is an owner; a hold is orphaned when its task or event loop ends."""

    def token(self) -> str:
        return current_task_owner()

    def where(self) -> str:
        task = asyncio.current_task()
        thread = threading.current_thread().name
        return thread if task is None else f"{thread}/{task.get_name()}"

    def orphan_check(self, own_token: bool) -> Callable[[], str | None]:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        by_task = not own_token

        def orphaned() -> str | None:
            if loop.is_closed():
                return "its event loop closed while holding it"
            if by_task and task is not None and task.done():
                return "the task holding it ended without releasing it"
            return None

        return orphaned


#: The owners of blocking handles (threads) and of asyncio handles (tasks).
THREADS, TASKS = Owners(), TaskOwners()


_attempt_prefix = secrets.token_hex(4)
_attempts = itertools.count()


def new_attempt() -> str:
    """Return an id for one acquire call, unique among this process's calls.

    Its form, ``<process>.<sequence>`` in hex, tells the Lua scripts which of an owner's
    attempts came later (``later()`` in ``_helpers.lua``).
    """
    return f"{_attempt_prefix}.{next(_attempts):x}"


def _forget_owners_in_child() -> None:
    # A forked child is a new owner: it must not release or extend its parent's locks. It
    # numbers its acquire calls apart from its parent's, too.
    global _owner, _task_owners, _attempt_prefix  # noqa: PLW0603
    _owner = threading.local()
    _task_owners = weakref.WeakKeyDictionary()
    _attempt_prefix = secrets.token_hex(4)


os.register_at_fork(after_in_child=_forget_owners_in_child)
