"""What a view lock is keyed by: the key vocabulary of :func:`~.decorators.lock_view`.

A key is one of the words below, a list of them (combined), or a callable
``(request, *args, **kwargs) -> str``:

``"user"``
    The authenticated user's primary key. An anonymous user is keyed by their session (one is
    started if they have none), so two anonymous visitors never share a lock.
``"ip"``
    The client's address: ``REMOTE_ADDR``, or, when that is one of the proxies listed in the
    ``LOCKS_TRUSTED_PROXIES`` setting, the last address in ``X-Forwarded-For`` that is not a
    trusted proxy. ``X-Forwarded-For`` is never believed from anyone else.
``"path"``, ``"session"``, ``"url:<kwarg>"``, ``"header:<name>"``, ``"post:<field>"``
    The request's path, its session key, a URL keyword argument, a request header, a POST
    field.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from .._core.names import MAX_READABLE, digest
from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError

__all__ = [
    "KEY_WORDS",
    "Key",
    "arequest_key",
    "client_ip",
    "request_key",
    "validate_key",
    "view_name",
]

KeyPart = str | Callable[..., str]
Key = KeyPart | Sequence[KeyPart]

#: The plain words, and the prefixes of the words that take an argument.
KEY_WORDS = ("user", "ip", "path", "session")
KEY_PREFIXES = ("url:", "header:", "post:")

_HOW_TO_FIX = (
    "Use one of 'user', 'ip', 'path', 'session', 'url:<kwarg>', 'header:<name>', "
    "'post:<field>', a list of these, or a callable (request, *args, **kwargs) -> str."
)


def validate_key(key: object, *, where: str) -> None:
    """Refuse ``key``, naming every way to fix it, if it is not a valid key.

    A key of the wrong type raises :class:`~django_redis_lock.LockArgumentTypeError`, a
    string that names no key :class:`~django_redis_lock.InvalidLockArgumentError`.
    """
    parts = key if isinstance(key, (list, tuple)) else [key]
    if not parts:
        raise InvalidLockArgumentError(f"{where}: the lock key list is empty. {_HOW_TO_FIX}")
    for part in parts:
        if callable(part):
            continue
        if not isinstance(part, str):
            raise LockArgumentTypeError(f"{where}: {part!r} is not a lock key. {_HOW_TO_FIX}")
        if part in KEY_WORDS:
            continue
        prefix = next((p for p in KEY_PREFIXES if part.startswith(p)), None)
        if prefix is None or part == prefix:
            raise InvalidLockArgumentError(f"{where}: {part!r} is not a lock key. {_HOW_TO_FIX}")


def request_key(
    request: HttpRequest, key: Key, args: Sequence[Any], kwargs: dict[str, Any], *, where: str
) -> str:
    """Return the text that ``key`` stands for in ``request``."""
    parts = key if isinstance(key, (list, tuple)) else [key]
    values = []
    for part in parts:
        if callable(part):
            value = part(request, *args, **kwargs)
            if not isinstance(value, str) or not value:
                raise ImproperlyConfigured(
                    f"{where}: the key function {part!r} returned {value!r}, not a non-empty "
                    f"str. {_HOW_TO_FIX}"
                )
        else:
            value = _word(request, str(part), kwargs, where=where)
        values.append(value if len(value) <= MAX_READABLE else f"sha256={digest(value)}")
    return ":".join(values)


def view_name(name: str, part: str) -> str:
    """Return the name of a view's lock or rate limit: ``view:<name>:<the request's key>``."""
    return f"view:{name}:{part}"


#: The words whose value may need the database: ``request.user`` and the session load lazily.
_DATABASE_WORDS = frozenset({"user", "session"})


async def arequest_key(
    request: HttpRequest, key: Key, args: Sequence[Any], kwargs: dict[str, Any], *, where: str
) -> str:
    """Do what :func:`request_key` does, from an event loop that must not block.

    A key function, ``"user"`` or ``"session"`` may query the database (``request.user`` is
    loaded lazily), which Django refuses in an event loop: such a key is computed in a
    thread, as Django runs any blocking code of an async view.
    """
    parts = key if isinstance(key, (list, tuple)) else [key]
    if any(callable(part) or part in _DATABASE_WORDS for part in parts):
        return await sync_to_async(request_key)(request, key, args, kwargs, where=where)
    return request_key(request, key, args, kwargs, where=where)


def _word(request: HttpRequest, word: str, kwargs: dict[str, Any], *, where: str) -> str:
    if word in _PLAIN:
        return _PLAIN[word](request, where)
    kind, _, name = word.partition(":")
    if kind == "url":
        if name not in kwargs:
            raise ImproperlyConfigured(
                f"{where}: the lock key {word!r} names the URL keyword argument {name!r}, but "
                f"the view was called with {sorted(kwargs)!r}. {_HOW_TO_FIX}"
            )
        return f"{name}={kwargs[name]}"
    if kind == "header":
        return f"{name.lower()}={request.headers.get(name, '')}"
    return f"{name}={request.POST.get(name, '')}"


def _user(request: HttpRequest, where: str) -> str:
    user = getattr(request, "user", None)
    if user is None:
        raise ImproperlyConfigured(
            f"{where}: the 'user' lock key needs "
            "django.contrib.auth.middleware.AuthenticationMiddleware in MIDDLEWARE. "
            f"{_HOW_TO_FIX}"
        )
    if user.is_authenticated:
        return f"user={user.pk}"
    return f"anon={_session_key(request, where=where)}"


_PLAIN: dict[str, Callable[[HttpRequest, str], str]] = {
    "user": _user,
    "session": lambda request, where: f"session={_session_key(request, where=where)}",
    "ip": lambda request, where: f"ip={client_ip(request)}",
    "path": lambda request, where: f"path={request.path}",
}


def _session_key(request: HttpRequest, *, where: str) -> str:
    session = getattr(request, "session", None)
    if session is None:
        raise ImproperlyConfigured(
            f"{where}: keying anonymous users needs "
            "django.contrib.sessions.middleware.SessionMiddleware in MIDDLEWARE. "
            f"{_HOW_TO_FIX}"
        )
    if session.session_key is None:
        session.save()  # a stable key for this visitor's next requests too
    return str(session.session_key)


def trusted_proxies() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Return the networks of the ``LOCKS_TRUSTED_PROXIES`` setting."""
    # Entries that are not strings are reported by check E013, and never trusted.
    return [
        ipaddress.ip_network(proxy, strict=False)
        for proxy in getattr(settings, "LOCKS_TRUSTED_PROXIES", ())
        if isinstance(proxy, str)
    ]


def client_ip(request: HttpRequest) -> str:
    """Return the client's address, believing ``X-Forwarded-For`` only from trusted proxies."""
    remote = str(request.META.get("REMOTE_ADDR", ""))
    proxies = trusted_proxies()
    if not proxies or not _trusted(remote, proxies):
        return remote
    header = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
    forwarded = [hop.strip() for hop in header.split(",")]
    for hop in reversed([hop for hop in forwarded if hop]):
        if not _trusted(hop, proxies):
            return hop
    return remote


def _trusted(address: str, proxies: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    # A dual-stack server reports an IPv4 peer as ::ffff:a.b.c.d: it is that IPv4 address.
    mapped = getattr(ip, "ipv4_mapped", None)
    return any(ip in network or (mapped is not None and mapped in network) for network in proxies)
