"""Rate-limit a view per key: the work shared by ``@rate_limit_view`` and ``RateLimitMixin``.

A :class:`ViewRateLimit` holds the options of one rate-limited view. For each request whose
method it limits, it names the rate limit from the key (the view lock's key vocabulary),
admits one hit, and runs the view; a request over the limit is answered by
:meth:`ViewRateLimit.limited`: ``429 Too Many Requests`` with ``Retry-After`` by default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponseBase

from .._core.rate_limiting import parse_rates, validate_cost
from .._core.validation import validate_timeout
from ..backends.base import Admission
from ..conf import DEFAULT_ALIAS
from ..exceptions import InvalidLockArgumentError
from ..ratelimit import AsyncRateLimit, RateLimit
from .engine import refusal_response, validate_methods
from .key_functions import Key, arequest_key, request_key, validate_key, view_name

__all__ = ["LIMITED_STATUSES", "LimitedHook", "ViewRateLimit", "limited_response"]

#: The statuses a request over the limit may be answered with.
LIMITED_STATUSES = frozenset({429, 503})

#: An answer of your own to a request over the limit: ``(request, admission) -> response``.
LimitedHook = Callable[[HttpRequest, Admission], HttpResponseBase]


@dataclass(frozen=True)
class ViewRateLimit:
    """The rate-limit options of one view, checked when the view is defined.

    ``methods`` None limits every method.
    """

    key: Key
    rate: str | Sequence[str]
    name: str
    where: str
    methods: Collection[str] | None = None
    cost: int = 1
    timeout: float = 0.0
    status: int = 429
    using: str = DEFAULT_ALIAS
    on_limit: LimitedHook | None = None
    template_name: str | None = None

    def __post_init__(self) -> None:
        validate_key(self.key, where=self.where)
        try:
            validate_cost(self.cost, parse_rates(self.rate), name=None)
            timeout = validate_timeout(self.timeout)
        except InvalidLockArgumentError as exc:
            raise type(exc)(f"{self.where}: {exc}") from None
        if timeout is None:
            raise InvalidLockArgumentError(
                f"{self.where}: timeout must be a number of seconds >= 0 (0: do not wait), got "
                "None."
            )
        if self.status not in LIMITED_STATUSES:
            raise InvalidLockArgumentError(
                f"{self.where}: status must be 429 or 503, got {self.status!r}."
            )
        if self.methods is not None:
            every = "None (every method) or "
            methods = validate_methods(self.methods, where=self.where, every=every)
            object.__setattr__(self, "methods", methods)

    def applies(self, request: HttpRequest) -> bool:
        """Return whether ``request`` is one this view limits (by its method)."""
        return self.methods is None or request.method in self.methods

    def limit_name(self, request: HttpRequest, args: Any, kwargs: dict[str, Any]) -> str:
        """Return the name of the rate limit ``request`` counts against."""
        return view_name(self.name, request_key(request, self.key, args, kwargs, where=self.where))

    def _options(self) -> dict[str, Any]:
        return {
            "using": self.using,
            "cost": self.cost,
            "blocking": self.timeout > 0,
            "timeout": self.timeout if self.timeout > 0 else None,
        }

    def call(
        self,
        view: Callable[..., HttpResponseBase],
        request: HttpRequest,
        args: Any,
        kwargs: dict[str, Any],
    ) -> HttpResponseBase:
        """Run ``view`` if the request's rate limit admits it, else answer the refusal."""
        limit = RateLimit(self.limit_name(request, args, kwargs), self.rate, **self._options())
        admission = limit.admit()
        if not admission.admitted:
            return self.limited(request, admission)
        return view(request, *args, **kwargs)

    async def acall(
        self, view: Callable[..., Any], request: HttpRequest, args: Any, kwargs: dict[str, Any]
    ) -> HttpResponseBase:
        """Do what :meth:`call` does for an async ``view``, without blocking the loop."""
        key = await arequest_key(request, self.key, args, kwargs, where=self.where)
        name = view_name(self.name, key)
        admission = await AsyncRateLimit(name, self.rate, **self._options()).admit()
        if not admission.admitted:
            return self.limited(request, admission)
        response: HttpResponseBase = await view(request, *args, **kwargs)
        return response

    def limited(self, request: HttpRequest, admission: Admission) -> HttpResponseBase:
        """Answer a request over the limit."""
        if self.on_limit is not None:
            return self.on_limit(request, admission)
        return limited_response(
            request, admission, status=self.status, template_name=self.template_name
        )


def limited_response(
    request: HttpRequest,
    admission: Admission,
    *,
    status: int = 429,
    template_name: str | None = None,
) -> HttpResponseBase:
    """Return the default answer to a request over the limit: a template, JSON, or text.

    ``Retry-After`` is the whole seconds until a slot frees, rounded up, at least 1: a client
    told "0" would ask again at once.
    """
    return refusal_response(
        request,
        status=status,
        error="rate_limited",
        message="Too many requests. Try again later.",
        seconds=max(1, math.ceil(admission.retry_after)),
        template_name=template_name,
        context={"admission": admission},
    )
