"""View decorators for function-based views, sync or async: ``@lock_view`` (one request at a
time per key) and ``@rate_limit_view`` (at most N requests per period per key)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponseBase

from .conf import DEFAULT_ALIAS
from .viewlock.engine import UNSAFE_METHODS, ConflictHook, RetryAfter, ViewLock
from .viewlock.key_functions import Key
from .viewlock.limits import LimitedHook, ViewRateLimit

__all__ = ["lock_view", "rate_limit_view"]

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
        path = _dotted_path(view)
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
        return _wrapped(view, config)

    return decorator


def rate_limit_view(
    key: Key,
    rate: str | Sequence[str],
    *,
    name: str | None = None,
    methods: Collection[str] | None = None,
    cost: int = 1,
    timeout: float = 0,
    status: int = 429,
    using: str = DEFAULT_ALIAS,
    on_limit: LimitedHook | None = None,
    template_name: str | None = None,
) -> Callable[[V], V]:
    """Decorate a view so that requests with the same ``key`` are admitted at most ``rate``.

    ``key`` is what :func:`lock_view` takes (``"user"``, ``"ip"``, ``"path"``, ``"session"``,
    ``"url:<kwarg>"``, ``"header:<name>"``, ``"post:<field>"``, a list of these, or a
    callable); ``rate`` what :func:`~django_redis_lock.rate_limit` takes (``"5/m"``, or a list
    of rates that must all admit). Every method is limited unless ``methods`` lists some.
    The rate limit is named ``view:<name>:<key>``, ``name`` defaulting to the view's dotted
    path; give two views one ``name`` to make them share a limit. ``cost`` weighs a request.

    A request over the limit waits up to ``timeout`` seconds for a slot (default: not at
    all), then gets ``on_limit(request, admission)``, or ``template_name`` rendered, or
    ``429 Too Many Requests`` (``status`` may be 503) with ``Retry-After`` set to the whole
    seconds until a slot frees; in JSON for clients that ask for JSON.
    """

    def decorator(view: V) -> V:
        path = _dotted_path(view)
        config = ViewRateLimit(
            key=key,
            rate=rate,
            name=name or path,
            where=f"rate_limit_view on {path}",
            methods=methods,
            cost=cost,
            timeout=timeout,
            status=status,
            using=using,
            on_limit=on_limit,
            template_name=template_name,
        )
        return _wrapped(view, config)

    return decorator


def _dotted_path(view: Callable[..., Any]) -> str:
    # A callable object or a partial has no __qualname__ of its own: name it by its type.
    return f"{getattr(view, '__module__', None) or type(view).__module__}." + getattr(
        view, "__qualname__", type(view).__qualname__
    )


def _wrapped(view: V, config: ViewLock | ViewRateLimit) -> V:
    """Return ``view`` running through ``config`` for the requests it applies to."""
    if inspect.iscoroutinefunction(view):

        @functools.wraps(view)
        async def async_guarded(
            request: HttpRequest, *args: Any, **kwargs: Any
        ) -> HttpResponseBase:
            if not config.applies(request):
                response: HttpResponseBase = await view(request, *args, **kwargs)
                return response
            return await config.acall(view, request, args, kwargs)

        return async_guarded  # type: ignore[return-value]

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not config.applies(request):
            return view(request, *args, **kwargs)  # type: ignore[no-any-return]
        return config.call(view, request, args, kwargs)

    return guarded  # type: ignore[return-value]
