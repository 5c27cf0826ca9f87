"""``LockMixin``: one request at a time per key, for class-based views, sync or async."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from .backends.base import LockInfo
from .conf import DEFAULT_ALIAS
from .viewlock.engine import UNSAFE_METHODS, ViewLock, conflict_response
from .viewlock.key_functions import Key

__all__ = ["LockMixin"]


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
        return self.lock_key

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
        config = self._view_lock()
        parent = super().dispatch  # type: ignore[misc]
        if not config.applies(request):
            return parent(request, *args, **kwargs)
        if getattr(self, "view_is_async", False):
            return config.acall(parent, request, args, kwargs)
        return config.call(parent, request, args, kwargs)
