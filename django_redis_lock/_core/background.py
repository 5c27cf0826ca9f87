"""Tasks started and not awaited, kept until done: an event loop holds its tasks weakly."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

__all__ = ["keep_until_done"]

F = TypeVar("F", bound="asyncio.Future[Any]")

_running: set[asyncio.Future[Any]] = set()


def keep_until_done(task: F) -> F:
    """Keep a reference to ``task`` until it is done, so it is not collected while it runs."""
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
