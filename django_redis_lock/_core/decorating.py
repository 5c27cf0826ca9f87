"""A lock handle as a decorator: each call of the function runs holding it.

Written once for every handle (a lock, a multi-lock, and their asyncio twins): a blocking
handle refuses a coroutine function, which it would hold only while the coroutine is created,
and an asyncio handle refuses a plain one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, ParamSpec, TypeVar

from ..exceptions import LockArgumentTypeError

__all__ = ["held_while_awaited", "held_while_called"]

P = ParamSpec("P")
R = TypeVar("R")


def held_while_called(
    handle: AbstractContextManager[Any],
    func: Callable[P, R],
    *,
    builder: str,
    lock_name: str | None = None,
) -> Callable[P, R]:
    """Return ``func`` running each call inside ``with handle:`` (built by ``builder()``)."""
    if inspect.iscoroutinefunction(func):
        raise LockArgumentTypeError(
            f"{builder}() cannot decorate the coroutine function {func.__qualname__}: it "
            "would hold the lock while the coroutine is created, not while it runs. "
            f"Use a{builder}() for coroutine functions.",
            lock_name=lock_name,
        )

    @functools.wraps(func)
    def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
        with handle:
            return func(*args, **kwargs)

    return locked_call


def held_while_awaited(
    handle: AbstractAsyncContextManager[Any],
    func: Callable[P, Awaitable[R]],
    *,
    builder: str,
    lock_name: str | None = None,
) -> Callable[P, Awaitable[R]]:
    """Return the coroutine function ``func`` running inside ``async with handle:``."""
    if not inspect.iscoroutinefunction(func):
        raise LockArgumentTypeError(
            f"a{builder}() decorates coroutine functions; {func!r} is not one. Use "
            f"{builder}() for plain functions.",
            lock_name=lock_name,
        )

    @functools.wraps(func)
    async def locked_call(*args: P.args, **kwargs: P.kwargs) -> R:
        async with handle:
            return await func(*args, **kwargs)

    return locked_call
