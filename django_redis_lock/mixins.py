"""View mixins for class-based views, sync or async: ``LockMixin`` (one request at a time per
key) and ``RateLimitMixin`` (at most N requests per period per key)."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from .backends.base import Admission, LockInfo
from .conf import DEFAULT_ALIAS
from .viewlock.engine import UNSAFE_METHODS, ViewLock, conflict_response
from .viewlock.key_functions import Key
from .viewlock.limits import ViewRateLimit, limited_response

__all__ = ["LockMixin", "RateLimitMixin"]


class LockMixin:
    """Run ``dispatch()`` under a lock keyed by ``lock_key``, like ``@lock_view`` does.

    Put it first among the bases, as with Django's ``AccessMixin`` subclasses. Each attribute
    has a ``get_*()`` method to compute it per request; a conflict is answered by
    :meth:`handle_lock_conflict`.
    """

    lock_key: Key = "user"
    lock_name: str | None = None
    lock_ttl: float | None = None
    lock_timeout: float = 0
    lock_methods: Collection[str] = UNSAFE_METHODS
    lock_using: str = DEFAULT_ALIAS
    lock_status: int = 409
    lock_template_name: str | None = None
    lock_retry_after: int | None = None
    request: HttpRequest

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A wrong class attribute fails when the class is defined, not at its first request.
        super().__init_subclass__(**kwargs)
        # The decorator's own check, on the class attributes: one path for both faces.
        ViewLock(
            key=cls.lock_key,
            name=cls.lock_name or cls.__qualname__,
            where=f"LockMixin on {cls.__module__}.{cls.__qualname__}",
            ttl=cls.lock_ttl,
            timeout=cls.lock_timeout,
            methods=cls.lock_methods,
            using=cls.lock_using,
            status=cls.lock_status,
            template_name=cls.lock_template_name,
            retry_after=cls.lock_retry_after,
        )

    def get_lock_key(self) -> Key:
        """Return what requests are keyed by (see :func:`~.decorators.lock_view`)."""
        return _key_as_written(self, "lock_key")

    def get_lock_name(self) -> str:
        """Return the fixed part of the lock's name (default: the view's dotted path)."""
        return self.lock_name or f"{type(self).__module__}.{type(self).__qualname__}"

    def get_lock_ttl(self) -> float | None:
        """Return the lease in seconds (None: the backend's default)."""
        return self.lock_ttl

    def get_lock_timeout(self) -> float:
        """Return how long a request waits for the lock before the conflict answer."""
        return self.lock_timeout

    def get_lock_methods(self) -> Collection[str]:
        """Return the HTTP methods that take the lock."""
        return self.lock_methods

    def get_lock_using(self) -> str:
        """Return the LOCKS alias of the lock."""
        return self.lock_using

    def get_lock_retry_after(self, holders: list[LockInfo]) -> float | None:
        """Return the ``Retry-After`` seconds of a conflict (None: the holder's lease left).

        The seconds are rounded up, and at least 1.
        """
        return self.lock_retry_after

    def handle_lock_conflict(self, holders: list[LockInfo]) -> HttpResponseBase:
        """Answer a request whose lock is held (``holders`` says by whom, for how long)."""
        return conflict_response(
            self.request,
            holders,
            status=self.lock_status,
            template_name=self.lock_template_name,
            retry_after=self.get_lock_retry_after(holders),
        )

    def _view_lock(self) -> ViewLock:
        return ViewLock(
            key=self.get_lock_key(),
            name=self.get_lock_name(),
            where=f"LockMixin on {type(self).__module__}.{type(self).__qualname__}",
            ttl=self.get_lock_ttl(),
            timeout=self.get_lock_timeout(),
            methods=self.get_lock_methods(),
            using=self.get_lock_using(),
            status=self.lock_status,
            template_name=self.lock_template_name,
            on_conflict=lambda request, holders: self.handle_lock_conflict(holders),
        )

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        parent = super().dispatch  # type: ignore[misc]
        is_async = getattr(self, "view_is_async", False)
        return _dispatch(self._view_lock(), parent, request, args, kwargs, is_async=is_async)


class RateLimitMixin:
    """Admit at most ``rate_limit_rate`` requests per key to ``dispatch()``, like
    ``@rate_limit_view`` does.

    Put it first among the bases. ``rate_limit_rate`` has no default: set it (``"5/m"``, or a
    list of rates). Each attribute has a ``get_*()`` method to compute it per request; a
    request over the limit is answered by :meth:`handle_rate_limited`.
    """

    rate_limit_key: Key = "user"
    rate_limit_rate: str | Sequence[str] = ()
    rate_limit_name: str | None = None
    rate_limit_methods: Collection[str] | None = None
    rate_limit_cost: int = 1
    rate_limit_timeout: float = 0
    rate_limit_using: str = DEFAULT_ALIAS
    rate_limit_status: int = 429
    rate_limit_template_name: str | None = None
    request: HttpRequest

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A wrong class attribute fails when the class is defined, not at its first request.
        super().__init_subclass__(**kwargs)
        if not cls.rate_limit_rate:
            return  # a class that computes it in get_rate_limit_rate(): checked per request
        ViewRateLimit(
            key=cls.rate_limit_key,
            rate=cls.rate_limit_rate,
            name=cls.rate_limit_name or cls.__qualname__,
            where=f"RateLimitMixin on {cls.__module__}.{cls.__qualname__}",
            methods=cls.rate_limit_methods,
            cost=cls.rate_limit_cost,
            timeout=cls.rate_limit_timeout,
            using=cls.rate_limit_using,
            status=cls.rate_limit_status,
            template_name=cls.rate_limit_template_name,
        )

    def get_rate_limit_key(self) -> Key:
        """Return what requests are keyed by (see :func:`~.decorators.lock_view`)."""
        return _key_as_written(self, "rate_limit_key")

    def get_rate_limit_rate(self) -> str | Sequence[str]:
        """Return the rate (or rates) a key's requests are admitted at."""
        return self.rate_limit_rate

    def get_rate_limit_name(self) -> str:
        """Return the fixed part of the rate limit's name (default: the view's dotted path)."""
        return self.rate_limit_name or f"{type(self).__module__}.{type(self).__qualname__}"

    def get_rate_limit_methods(self) -> Collection[str] | None:
        """Return the HTTP methods that are limited (None: every one)."""
        return self.rate_limit_methods

    def get_rate_limit_cost(self) -> int:
        """Return the weight of this request."""
        return self.rate_limit_cost

    def get_rate_limit_timeout(self) -> float:
        """Return how long a request over the limit waits for a slot before the answer."""
        return self.rate_limit_timeout

    def get_rate_limit_using(self) -> str:
        """Return the LOCKS alias of the rate limit."""
        return self.rate_limit_using

    def handle_rate_limited(self, admission: Admission) -> HttpResponseBase:
        """Answer a request over the limit (``admission.retry_after``: when a slot frees)."""
        return limited_response(
            self.request,
            admission,
            status=self.rate_limit_status,
            template_name=self.rate_limit_template_name,
        )

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        config = ViewRateLimit(
            key=self.get_rate_limit_key(),
            rate=self.get_rate_limit_rate(),
            name=self.get_rate_limit_name(),
            where=f"RateLimitMixin on {type(self).__module__}.{type(self).__qualname__}",
            methods=self.get_rate_limit_methods(),
            cost=self.get_rate_limit_cost(),
            timeout=self.get_rate_limit_timeout(),
            using=self.get_rate_limit_using(),
            status=self.rate_limit_status,
            on_limit=lambda request, admission: self.handle_rate_limited(admission),
        )
        parent = super().dispatch  # type: ignore[misc]
        is_async = getattr(self, "view_is_async", False)
        return _dispatch(config, parent, request, args, kwargs, is_async=is_async)


def _key_as_written(view: object, attribute: str) -> Key:
    # A key function given as a class attribute is the key itself, not a method of the view:
    # read as an attribute of the instance, it would be bound, and get the view as request.
    value = inspect.getattr_static(view, attribute)
    if isinstance(value, (staticmethod, classmethod)):
        value = getattr(view, attribute)
    return value  # type: ignore[no-any-return]


def _dispatch(
    config: ViewLock | ViewRateLimit,
    parent: Any,
    request: HttpRequest,
    args: Any,
    kwargs: dict[str, Any],
    *,
    is_async: bool,
) -> Any:
    """Run ``parent`` (the next ``dispatch()``) through ``config``, if it applies."""
    if not config.applies(request):
        return parent(request, *args, **kwargs)
    if is_async:
        return config.acall(parent, request, args, kwargs)
    return config.call(parent, request, args, kwargs)
