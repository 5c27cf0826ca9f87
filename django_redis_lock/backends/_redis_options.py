"""What a Redis URL and the OPTIONS of a Redis backend may hold, and how they are shown."""

from __future__ import annotations

import inspect
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
import redis.asyncio

__all__ = ["ASYNC_CONNECTION_OPTIONS", "CONNECTION_OPTIONS", "URL_SCHEMES", "redact_url"]


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
