"""``@lock_view``: one request at a time per key, for function-based views, sync or async."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponseBase

from .conf import DEFAULT_ALIAS
from .viewlock.engine import UNSAFE_METHODS, ConflictHook, RetryAfter, ViewLock
from .viewlock.key_functions import Key

__all__ = ["lock_view"]

V = TypeVar("V", bound=Callable[..., Any])


def lock_view(
    key: Key = "user",
    *,
    name: str | None = None,
    ttl: float | None = None,
    timeout: float = 0,
    methods: Collection[str] = UNSAFE_METHODS,
    status: int = 409,
    using: str = DEFAULT_ALIAS,
    on_conflict: ConflictHook | None = None,
    template_name: str | None = None,
    retry_after: RetryAfter | None = None,
) -> Callable[[V], V]:
    """Decorate a view so that requests with the same ``key`` never run it at once.

    ``key`` says what "the same" means (see :mod:`django_redis_lock.viewlock.key_functions`):
    ``"user"``, ``"ip"``, ``"path"``, ``"session"``, ``"url:<kwarg>"``, ``"header:<name>"``,
    ``"post:<field>"``, a list of these, or a callable ``(request, *args, **kwargs) -> str``.
    Only ``methods`` are locked (default: POST, PUT, PATCH, DELETE). The lock is named
    ``view:<name>:<key>``, ``name`` defaulting to the view's dotted path; give two views one
    ``name`` to make them exclude each other.

    A request that finds the lock held waits up to ``timeout`` seconds (default: not at all),
    then gets ``on_conflict(request, holders)``, or ``template_name`` rendered, or a
    ``409 Conflict`` (``status`` may be 423, 429 or 503) with ``Retry-After`` set to the
    seconds left of the holder's lease; in JSON for clients that ask for JSON. A view that
    knows better how long it runs says so with ``retry_after``: whole seconds, or a callable
    ``(request, holders) -> seconds`` (rounded up, at least 1).
    """

    def decorator(view: V) -> V:
        # A callable object or a partial has no __qualname__ of its own: name it by its type.
        path = f"{getattr(view, '__module__', None) or type(view).__module__}." + getattr(
            view, "__qualname__", type(view).__qualname__
        )
        where = f"lock_view on {path}"
        config = ViewLock(
            key=key,
            name=name or path,
            where=where,
            ttl=ttl,
            timeout=timeout,
            methods=methods,
            status=status,
            using=using,
            on_conflict=on_conflict,
            template_name=template_name,
            retry_after=retry_after,
        )
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_locked(
                request: HttpRequest, *args: Any, **kwargs: Any
            ) -> HttpResponseBase:
                if not config.applies(request):
                    response: HttpResponseBase = await view(request, *args, **kwargs)
                    return response
                return await config.acall(view, request, args, kwargs)

            return async_locked  # type: ignore[return-value]

        @functools.wraps(view)
        def locked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not config.applies(request):
                return view(request, *args, **kwargs)  # type: ignore[no-any-return]
            return config.call(view, request, args, kwargs)

        return locked  # type: ignore[return-value]

    return decorator
