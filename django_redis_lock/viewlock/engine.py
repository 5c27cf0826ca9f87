"""Lock a view per request: the work shared by ``@lock_view`` and ``LockMixin``.

A :class:`ViewLock` holds the options of one locked view. For each request whose method it
locks, it builds the lock name from the key, takes the lock under an owner token of the
request's own (so a response streamed from another thread or task can still release it),
runs the view, and answers a conflict with :meth:`ViewLock.conflict`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.template.loader import render_to_string

from .._core.aio import keep_until_done
from .._core.lock_arguments import LockKeywords
from .._core.validation import validate_timeout, validate_ttl
from ..backends.base import LockInfo
from ..conf import DEFAULT_ALIAS
from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError, LockNotAcquiredError
from ..handler import locks
from ..listing import retry_after as lease_left
from ..lock import AsyncLock, Lock
from .key_functions import Key, arequest_key, request_key, validate_key, view_name

__all__ = [
    "CONFLICT_STATUSES",
    "UNSAFE_METHODS",
    "RetryAfter",
    "ViewLock",
    "conflict_response",
    "refusal_response",
    "validate_methods",
]

logger = logging.getLogger("django_redis_lock")

#: The methods locked by default: the ones that change something.
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: The statuses a conflict may answer with.
CONFLICT_STATUSES = frozenset({409, 423, 429, 503})

ConflictHook = Callable[[HttpRequest, list[LockInfo]], HttpResponseBase]
#: A view's own ``Retry-After``: whole seconds, or ``(request, holders) -> seconds``.
RetryAfter = int | Callable[[HttpRequest, list[LockInfo]], float]


@dataclass(frozen=True)
class ViewLock:
    """The lock options of one view, checked when the view is defined."""

    key: Key
    name: str
    where: str
    ttl: float | None = None
    timeout: float = 0.0
    methods: Collection[str] = UNSAFE_METHODS
    status: int = 409
    using: str = DEFAULT_ALIAS
    on_conflict: ConflictHook | None = None
    template_name: str | None = None
    retry_after: RetryAfter | None = None

    def __post_init__(self) -> None:
        validate_key(self.key, where=self.where)
        validate_status(self.status, where=self.where)
        validate_retry_after(self.retry_after, where=self.where)
        if self.ttl is not None:
            validate_ttl(self.ttl)  # a bad lease or timeout fails when the view is defined
        if self.timeout is None or validate_timeout(self.timeout) is None:
            raise InvalidLockArgumentError(
                f"{self.where}: timeout must be a number of seconds >= 0 (0: do not wait), got "
                f"{self.timeout!r}."
            )
        object.__setattr__(self, "methods", validate_methods(self.methods, where=self.where))

    def applies(self, request: HttpRequest) -> bool:
        """Return whether ``request`` is one this view locks (by its method)."""
        return request.method in self.methods

    def lock_name(self, request: HttpRequest, args: Any, kwargs: dict[str, Any]) -> str:
        """Return the name of the lock that ``request`` takes."""
        return view_name(self.name, request_key(request, self.key, args, kwargs, where=self.where))

    def _options(self, request: HttpRequest, user: Any) -> LockKeywords:
        metadata = {"method": request.method, "path": request.path[:200]}
        if user is not None and user.is_authenticated:
            metadata["user"] = str(user.pk)
        return {
            "ttl": self.ttl,
            "timeout": self.timeout if self.timeout > 0 else None,
            "blocking": self.timeout > 0,
            "using": self.using,
            "metadata": metadata,
            "owner": f"request:{secrets.token_hex(12)}",
        }

    # Sync views ------------------------------------------------------------------------------

    def call(
        self,
        view: Callable[..., HttpResponseBase],
        request: HttpRequest,
        args: Any,
        kwargs: dict[str, Any],
    ) -> HttpResponseBase:
        """Run ``view`` holding the request's lock, or answer the conflict."""
        user = getattr(request, "user", None)
        held = Lock(self.lock_name(request, args, kwargs), **self._options(request, user))
        try:
            held._enter()
        except LockNotAcquiredError:
            return self.conflict(request, locks[self.using].lock_info(held.name))
        try:
            response = view(request, *args, **kwargs)
        except BaseException as exc:
            held._leave(exc)
            raise
        if response.streaming:
            _release_when_streamed(response, held)
        else:
            held._leave()
        return response

    # Async views -----------------------------------------------------------------------------

    async def acall(
        self, view: Callable[..., Any], request: HttpRequest, args: Any, kwargs: dict[str, Any]
    ) -> HttpResponseBase:
        """Run the async ``view`` holding the request's lock, or answer the conflict."""
        key = await arequest_key(request, self.key, args, kwargs, where=self.where)
        # request.user would be loaded from the database in the loop, which Django refuses.
        auser = getattr(request, "auser", None)
        user = await auser() if auser is not None else getattr(request, "user", None)
        held = AsyncLock(view_name(self.name, key), **self._options(request, user))
        try:
            await held._enter()
        except LockNotAcquiredError:
            info = await sync_to_async(locks[self.using].lock_info, thread_sensitive=False)(
                held.name
            )
            return self.conflict(request, info)
        try:
            response: HttpResponseBase = await view(request, *args, **kwargs)
        except BaseException as exc:
            await held._leave(exc)
            raise
        if response.streaming:
            _release_when_streamed(response, held)
        else:
            await held._leave()
        return response

    # Conflicts -------------------------------------------------------------------------------

    def conflict(self, request: HttpRequest, holders: list[LockInfo]) -> HttpResponseBase:
        """Answer a request whose lock another request holds."""
        if self.on_conflict is not None:
            return self.on_conflict(request, holders)
        hint = self.retry_after
        seconds = hint(request, holders) if callable(hint) else hint
        return conflict_response(
            request,
            holders,
            status=self.status,
            template_name=self.template_name,
            retry_after=seconds,
        )


def validate_methods(methods: object, *, where: str, every: str = "") -> frozenset[str]:
    """Return ``methods`` (a list of HTTP method names) in capitals, or refuse it.

    ``every`` says, in the message, what else the caller takes (None, for every method).
    """
    if isinstance(methods, str) or not (
        isinstance(methods, Collection) and all(isinstance(m, str) for m in methods)
    ):
        raise LockArgumentTypeError(
            f"{where}: methods must be {every}a list of HTTP method names such as ['POST'], "
            f"got {methods!r}."
        )
    return frozenset(m.upper() for m in methods)


def validate_status(status: object, *, where: str) -> None:
    """Refuse ``status`` unless it is one a conflict may answer with."""
    if status not in CONFLICT_STATUSES:
        raise InvalidLockArgumentError(
            f"{where}: status must be one of 409, 423, 429 or 503, got {status!r}."
        )


def validate_retry_after(value: object, *, where: str) -> None:
    """Refuse ``value`` unless it is None, whole seconds >= 1, or a callable."""
    if value is None or callable(value):
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise LockArgumentTypeError(
            f"{where}: retry_after must be a whole number of seconds >= 1 or a callable "
            f"(request, holders) -> seconds, got {value!r}."
        )
    if value < 1:
        raise InvalidLockArgumentError(
            f"{where}: retry_after must be a whole number of seconds >= 1 or a callable "
            f"(request, holders) -> seconds, got {value!r}."
        )


def conflict_response(
    request: HttpRequest,
    holders: list[LockInfo],
    *,
    status: int = 409,
    template_name: str | None = None,
    retry_after: float | None = None,
) -> HttpResponseBase:
    """Return the default answer to a conflict: a template, JSON, or a line of text.

    JSON goes to clients that prefer it (their ``Accept`` header, or a JSON request body).
    ``Retry-After`` is ``retry_after`` seconds if given, else when the holder's lease ends;
    rounded up, at least 1.
    """
    # Rounded up as the lease left is: a client told "0" or a fraction would retry at once.
    seconds = lease_left(holders) if retry_after is None else max(1, math.ceil(retry_after))
    return refusal_response(
        request,
        status=status,
        error="locked",
        message="This request is already being processed. Try again later.",
        seconds=seconds,
        template_name=template_name,
        context={"holders": holders},
    )


def refusal_response(
    request: HttpRequest,
    *,
    status: int,
    error: str,
    message: str,
    seconds: int,
    template_name: str | None,
    context: dict[str, Any],
) -> HttpResponseBase:
    """Return a refused request's answer: a template, JSON, or ``message`` as text.

    JSON (``error``, ``message`` as ``detail``, ``retry_after``) goes to clients that prefer
    it; the template gets ``context`` with ``retry_after`` and ``status``. ``Retry-After`` is
    ``seconds``.
    """
    response: HttpResponseBase
    if template_name is not None:
        context = {**context, "retry_after": seconds, "status": status}
        response = HttpResponse(render_to_string(template_name, context, request), status=status)
    elif wants_json(request):
        response = JsonResponse(
            {"error": error, "detail": message, "retry_after": seconds}, status=status
        )
    else:
        response = HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(seconds)
    return response


def wants_json(request: HttpRequest) -> bool:
    """Return whether the client prefers JSON: its ``Accept`` header, or a JSON body."""
    if request.content_type == "application/json":
        return True
    accept = request.headers.get("Accept", "")
    return (
        "json" in accept
        and request.get_preferred_type(["text/html", "application/json"]) == "application/json"
    )


def _release_when_streamed(response: HttpResponseBase, held: Lock | AsyncLock) -> None:
    # The lock is kept until the last chunk is sent, or the response is closed (a client that
    # went away, say), whichever comes first; Django closes every response it sent.
    content = response.streaming_content  # type: ignore[attr-defined]
    release = _Release(held)
    if response.is_async:  # type: ignore[attr-defined]
        response.streaming_content = _AsyncStream(content, release)  # type: ignore[attr-defined]
    else:
        response.streaming_content = _Stream(content, release)  # type: ignore[attr-defined]


class _Release:
    """Release a view's lock once, from blocking or asyncio code, whichever comes first."""

    def __init__(self, held: Lock | AsyncLock) -> None:
        self.held = held
        self.done = False

    def now(self) -> None:
        if self.done:
            return
        self.done = True
        if isinstance(self.held, Lock):
            self.held._leave()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            async_to_sync(self.held._leave)()
        else:  # closed from an event loop's own thread: release on that loop
            keep_until_done(loop.create_task(self.held._leave()))

    async def anow(self) -> None:
        if self.done:
            return
        self.done = True
        if isinstance(self.held, AsyncLock):
            await self.held._leave()
        else:
            await sync_to_async(self.held._leave, thread_sensitive=False)()


class _Stream:
    """A streaming response's content that releases the view's lock at its end, or close."""

    def __init__(self, content: Iterator[bytes], release: _Release) -> None:
        self._content = content
        self._release = release

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._content)
        except StopIteration:
            self._release.now()
            raise

    def close(self) -> None:
        self._release.now()


class _AsyncStream:
    """The asynchronous twin of :class:`_Stream`."""

    def __init__(self, content: AsyncIterator[bytes], release: _Release) -> None:
        self._content = content
        self._release = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._content.__anext__()
        except StopAsyncIteration:
            await self._release.anow()
            raise

    def close(self) -> None:
        self._release.now()
