"""What the OPTIONS of a Redis backend may hold, how URLs are shown, and the clients built."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.connection

from .._options import Problem

__all__ = [
    "ASYNC_CONNECTION_OPTIONS",
    "CONNECTION_OPTIONS",
    "CONNECTION_OPTIONS_DESCRIBED",
    "REFUSED_CONNECTION_OPTIONS",
    "URL_SCHEMES",
    "UrlProblem",
    "pool_keywords",
    "redact_url",
    "secret_safe",
    "sentinel_connection",
    "sentinel_problems",
    "url_problem",
    "url_problems",
    "url_scheme",
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


def pool_keywords(client: Any, asyncio: Any) -> tuple[frozenset[str], frozenset[str]]:
    """Return what OPTIONS may pass to the pools of a client library, and the asyncio subset.

    ``client`` and ``asyncio`` are the library's modules (``redis`` and ``redis.asyncio``).
    """
    blocking = (
        _keywords(client.ConnectionPool, client.SSLConnection, client.UnixDomainSocketConnection)
        - _NOT_PASSED
    )
    return blocking, blocking & _keywords(
        asyncio.ConnectionPool, asyncio.SSLConnection, asyncio.UnixDomainSocketConnection
    )


#: Keyword arguments of redis-py's pool and connections that OPTIONS may pass through, and the
#: subset that its asyncio client also takes (the rest apply to sync calls only).
#: decode_responses is left out: the backend reads raw bytes.
CONNECTION_OPTIONS, ASYNC_CONNECTION_OPTIONS = pool_keywords(redis, redis.asyncio)

#: The schemes of the valkey client's own URLs; it reads redis:// and rediss:// URLs too.
VALKEY_SCHEMES = frozenset({"valkey", "valkeys"})
URL_SCHEMES = frozenset({"redis", "rediss", "unix"}) | VALKEY_SCHEMES

#: redis-py connection keywords that OPTIONS may not pass, and why (check E007 says it).
REFUSED_CONNECTION_OPTIONS = {
    "decode_responses": "the backend reads Redis's replies as bytes and decodes them itself",
}

#: How the hint of check E007 names :data:`CONNECTION_OPTIONS`.
CONNECTION_OPTIONS_DESCRIBED = (
    "redis-py connection keywords such as password, ssl_ca_certs or max_connections"
)

_redis_parse_url: Callable[[str], dict[str, Any]] = redis.connection.parse_url  # untyped


def _parse_url(url: str) -> dict[str, Any]:
    # valkey:// and valkeys:// read as redis:// and rediss:// do, in either client library.
    if url_scheme(url) in VALKEY_SCHEMES:
        at = url.lower().index("valkey")
        url = f"{url[:at]}redis{url[at + len('valkey') :]}"
    return _redis_parse_url(url)


#: What redis-py reads from a URL besides its query (OPTIONS may not set these).
_READ_FROM_URL = frozenset({"host", "port", "path", "connection_class"})
#: Where a query's password (or ssl_password) starts.
_QUERY_SECRET = re.compile("password=", re.IGNORECASE)


def url_scheme(url: object) -> str | None:
    """Return the scheme of ``url`` as redis-py reads it (in lower case), or None if none."""
    if not isinstance(url, str):
        return None
    # Only the text up to the first colon is parsed: urllib reads the scheme as redis-py does
    # (leading spaces and tabs dropped), and has no host part it could refuse to parse.
    return urlsplit(url[: url.find(":") + 1]).scheme or None


def redact_url(url: str) -> str:
    """Return ``url`` with anything that could be a password replaced by ``***``.

    No parser is trusted to find the password, since one that is not percent-encoded misleads
    urllib (a ``/``, ``?`` or ``#`` in it ends the host part early). Instead, everything
    between ``scheme://`` (or the start, without one) and the *last* ``@`` is credentials,
    unless a ``/`` starts the host part (``unix:///path``); only a user name before a ``:`` is
    kept of them. Everything after ``password=`` (``?password=``, ``&ssl_password=``) is
    hidden too, up to the end: a password may hold ``&``. Any text is safe to pass.
    """
    secret = _secret_spans(url)
    if not secret:
        return url  # unchanged, and not re-assembled
    shown, at = [], 0
    for start, end in secret:
        shown += [url[at:start], "***"]
        at = end
    return "".join([*shown, url[at:]])


def _secret_spans(url: str) -> list[tuple[int, int]]:
    """Return the (start, end) of each part of ``url`` that may be secret, merged, in order."""
    body, at = _credentials(url)
    spans = []
    if at >= 0:
        user, colon, _ = url[body:at].partition(":")
        plain_user = bool(colon) and not any(c in user for c in "/?#@")
        spans.append((body + len(user) + 1 if plain_user else body, at))
    query = _QUERY_SECRET.search(url, body)
    if query:
        spans.append((query.end(), len(url)))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _credentials(url: str) -> tuple[int, int]:
    """Return where credentials in ``url`` would start, and its last ``@`` (-1: none)."""
    scheme = url.find("://")
    body = 0 if scheme < 0 else scheme + 3
    if url.startswith("/", body):  # unix:///path: no host part, so an '@' is the path's
        return body, -1
    return body, url.rfind("@", body)


class UrlProblem(NamedTuple):
    """Why a URL cannot be used: what is wrong (quoting the URL redacted), and a hint."""

    message: str
    hint: str


def url_problem(url: str) -> UrlProblem | None:
    """Return why redis-py cannot use ``url`` as this package needs it, or None.

    The message follows "url" or "a URL that" and quotes the URL with its password hidden.
    """
    shown = redact_url(url)
    body, at = _credentials(url)
    if at >= 0 and any(c in url[body:at] for c in "/?#"):
        # urllib would end the host part at that character, and take part of the password for
        # a host or a port: connect elsewhere, and quote it in its errors.
        return UrlProblem(
            f"could not be parsed: {shown!r} (a '/', '?' or '#' comes before its last '@', so "
            "a user name or password holds one, or an '@' follows the host)",
            "Percent-encode the user name and password, e.g. with urllib.parse.quote(password, "
            "safe=''): '/' is %2F, '?' %3F, '#' %23 and '@' %40.",
        )
    try:
        parsed = _parse_url(url)
    except ValueError as exc:
        return UrlProblem(
            f"could not be parsed: {shown!r} ({secret_safe(url, exc)})",
            "Write it as redis://[[user]:password@]host[:port][/db], rediss://... or "
            "unix:///path/to/socket[?db=N], with the user name and password percent-encoded "
            "(urllib.parse.quote(password, safe='')).",
        )
    if "decode_responses" in parsed:
        return UrlProblem(
            f"sets decode_responses: {shown!r}",
            "Remove decode_responses from the URL: the backend reads raw bytes.",
        )
    unknown = sorted(set(parsed) - CONNECTION_OPTIONS - _READ_FROM_URL)
    if unknown:
        # Named only if the URL shows them: after password=, they are part of the password.
        named = [key for key in unknown if f"?{key}=" in shown or f"&{key}=" in shown]
        return UrlProblem(
            "sets options that redis-py's connections do not take"
            + (f" ({', '.join(map(repr, named))})" if named else "")
            + f": {shown!r}",
            "Remove them from the query; a password given as ?password= must write '&' as %26.",
        )
    return None


def url_problems(
    urls: Sequence[object], schemes: frozenset[str], options: Mapping[str, Any], *, where: str
) -> list[Problem]:
    """Return what is wrong with the ``urls`` that OPTIONS name, as ``where`` (E008, E012).

    Each URL must have one of ``schemes`` and be usable by redis-py; ``ssl_*`` options need
    every URL to be ``rediss://``.
    """
    found = []
    for url in urls:
        if not isinstance(url, str) or url_scheme(url) not in schemes:
            shown = redact_url(url if isinstance(url, str) else repr(url))
            found.append(
                Problem(
                    "django_redis_lock.E008",
                    f"{where} has a URL with an unsupported scheme: {shown!r}.",
                    f"Use one of: {', '.join(s + '://' for s in sorted(schemes))}.",
                )
            )
            continue
        problem = url_problem(url)
        if problem:
            found.append(
                Problem(
                    "django_redis_lock.E008",
                    f"{where} has a URL that {problem.message}.",
                    problem.hint,
                )
            )
    tls = sorted(name for name in options if name.startswith("ssl_"))
    secure = ("rediss", "valkeys")
    if tls and any(isinstance(url, str) and url_scheme(url) not in secure for url in urls):
        found.append(
            Problem(
                "django_redis_lock.E012",
                f"{where} sets TLS options ({', '.join(map(repr, tls))}) but its url does not "
                "start with rediss://.",
                "Use a rediss:// URL to connect with TLS, or remove the ssl_* options.",
            )
        )
    return found


def secret_safe(url: str, error: Exception) -> str:
    """Return the message of ``error``, raised for ``url``, unless it could quote a secret.

    Parsers quote the part of a URL they could not read, perhaps part of a password.
    """
    if redact_url(url) == url:
        return str(error)
    return "the error is not shown: it could quote the password"


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
    parts = _parse_url(url)
    found: dict[str, Any] = {k: parts[k] for k in ("db", "username", "password") if k in parts}
    if url_scheme(url) in ("rediss", "valkeys"):
        found["ssl"] = True
    return found
