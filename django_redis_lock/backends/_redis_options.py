"""What the OPTIONS of a Redis backend may hold, how URLs are shown, and the clients built."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel

__all__ = [
    "ASYNC_CONNECTION_OPTIONS",
    "CONNECTION_OPTIONS",
    "URL_SCHEMES",
    "async_client",
    "redact_url",
    "sentinel_problems",
    "sync_client",
]


def _keywords(*classes: type) -> frozenset[str]:
    """Return the named keyword arguments of the constructors of ``classes`` and their bases."""
    return frozenset(
        name
        for cls in classes
        for base in cls.__mro__
        if "__init__" in vars(base)
        for name, param in inspect.signature(vars(base)["__init__"]).parameters.items()
        if param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)
    )


_NOT_PASSED = {"self", "host", "port", "path", "connection_class", "decode_responses"}

#: Keyword arguments of redis-py's pool and connections that OPTIONS may pass through.
#: decode_responses is left out: the backend reads raw bytes.
CONNECTION_OPTIONS: frozenset[str] = (
    _keywords(redis.ConnectionPool, redis.SSLConnection, redis.UnixDomainSocketConnection)
    - _NOT_PASSED
)

#: The subset that redis-py's asyncio client also takes (the rest apply to sync calls only).
ASYNC_CONNECTION_OPTIONS: frozenset[str] = CONNECTION_OPTIONS & _keywords(
    redis.asyncio.ConnectionPool,
    redis.asyncio.SSLConnection,
    redis.asyncio.UnixDomainSocketConnection,
)

URL_SCHEMES = frozenset({"redis", "rediss", "unix"})


def redact_url(url: str) -> str:
    """Return ``url`` with any password (``user:pw@`` or ``?password=``) replaced by ``***``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a malformed port)
    except ValueError:
        return "<unparsable URL>"
    query = parse_qsl(parts.query, keep_blank_values=True)
    if parts.password is None and all(key != "password" for key, _ in query):
        return url  # unchanged, and not re-assembled (which would alter unix:/// URLs)
    if parts.password is not None:
        userinfo, _, host = parts.netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        parts = parts._replace(netloc=f"{user}:***@{host}")
    redacted = [(key, "***" if key == "password" else value) for key, value in query]
    return parts._replace(query=urlencode(redacted, safe="*/")).geturl()


#: How a Sentinel is named in OPTIONS: "host:port", or a [host, port] pair.
SentinelAddress = str | tuple[str, int] | list[Any]


def sentinel_problems(sentinels: object, service_name: object) -> list[str]:
    """Return what is wrong with the ``sentinels`` and ``service_name`` OPTIONS (if given)."""
    if sentinels is None:
        return [] if service_name is None else ["service_name is given without sentinels."]
    problems = []
    if not isinstance(sentinels, (list, tuple)) or not sentinels:
        problems.append(
            f'sentinels must be a non-empty list of "host:port" strings, got {sentinels!r}.'
        )
    else:
        problems += [
            f'sentinels holds {one!r}, which is not a "host:port" string or a [host, port] pair.'
            for one in sentinels
            if sentinel_address(one) is None
        ]
    if not isinstance(service_name, str) or not service_name:
        problems.append(
            f"service_name must name the Sentinel-monitored primary, got {service_name!r}."
        )
    return problems


def sentinel_address(value: object) -> tuple[str, int] | None:
    """Return ``(host, port)`` for one entry of the ``sentinels`` option, or None if invalid."""
    if isinstance(value, str):
        host, _, port = value.rpartition(":")
        return (host, int(port)) if host and port.isdigit() else None
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    ):
        return value[0], value[1]
    return None


def sentinel_connection(url: str) -> dict[str, Any]:
    """Return what a URL says about the primary behind Sentinel: database, credentials, TLS."""
    parse_url: Any = redis.connection.parse_url  # untyped in redis-py
    parts: dict[str, Any] = parse_url(url)
    found: dict[str, Any] = {k: parts[k] for k in ("db", "username", "password") if k in parts}
    if urlsplit(url).scheme == "rediss":
        found["ssl"] = True
    return found


def sync_client(
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> redis.Redis:
    """Return the blocking client: of ``url``, or of the primary that Sentinel names."""
    client: redis.Redis = _client(
        (redis.Redis, redis.sentinel.Sentinel), url, sentinels, service_name, options
    )
    return client


def async_client(
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> redis.asyncio.Redis:
    """Return an asyncio client, as :func:`sync_client` does a blocking one."""
    client: redis.asyncio.Redis = _client(
        (redis.asyncio.Redis, redis.asyncio.sentinel.Sentinel),
        url,
        sentinels,
        service_name,
        options,
    )
    return client


def _client(
    classes: tuple[Any, Any],  # a client class and its Sentinel class (untyped in redis-py)
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> Any:
    redis_class, sentinel_class = classes
    if not sentinels:
        return redis_class.from_url(url, **options)
    addresses = [sentinel_address(one) for one in sentinels]
    sentinel = sentinel_class(
        [a for a in addresses if a is not None],
        sentinel_kwargs=_sentinel_kwargs(options),
        **options,
    )
    assert service_name is not None
    return sentinel.master_for(service_name, **sentinel_connection(url))


def _sentinel_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    # The sentinels themselves are asked with the same timeouts (not the primary's password).
    return {k: options[k] for k in ("socket_timeout", "socket_connect_timeout") if k in options}
