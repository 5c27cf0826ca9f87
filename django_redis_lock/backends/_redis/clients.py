"""The client library a Redis backend speaks through: redis-py, or its fork valkey-py.

Both libraries have one API under different names (``redis.Redis``, ``valkey.Valkey``) and
exception classes of their own: an error that a valkey client raises is no
``redis.RedisError``. A :class:`ClientFamily` holds one library's client classes and the
exceptions this package catches from it. A backend picks its family once, from its OPTIONS
(``client``, or a ``valkey://`` URL), then builds its clients and catches their errors through
it alone. The valkey package is imported only when a backend asks for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ...exceptions import InvalidLockBackendError
from .._options import Problem
from .connections import (
    CONNECTION_OPTIONS,
    VALKEY_SCHEMES,
    SentinelAddress,
    pool_keywords,
    redact_url,
    sentinel_address,
    sentinel_connection,
    url_scheme,
)

__all__ = [
    "FAMILIES",
    "ClientFamily",
    "async_client",
    "client_family",
    "close_async_client",
    "close_client",
    "family_name",
    "family_problems",
    "sync_client",
]

#: The client libraries OPTIONS["client"] may name; the first is the default.
FAMILIES = ("redis", "valkey")

#: What to install for each family (the hint of check E016).
_INSTALL = {"valkey": 'pip install "django-redis-lock[valkey]"'}


@dataclass(frozen=True)
class ClientFamily:
    """One client library: the classes a backend builds, and the exceptions it catches.

    The classes are the library's own (untyped here: they are the same API under two names).
    """

    name: str
    #: Blocking and asyncio clients, their Sentinel and Cluster counterparts.
    client: Any
    async_client: Any
    sentinel: Any
    async_sentinel: Any
    cluster: Any
    cluster_node: Any
    async_cluster: Any
    async_cluster_node: Any
    #: Pools and connections, by kind ("tcp", "tls", "unix"): for a connection described by
    #: keyword arguments (a cache's), not by a URL.
    pool: Any
    async_pool: Any
    connections: dict[str, Any]
    async_connections: dict[str, Any]
    #: Retry policies: the backend turns automatic retries off (see docs/configuration.rst).
    retry: Any
    async_retry: Any
    no_backoff: Any
    #: The keywords its pools take (as OPTIONS may pass them), and the asyncio subset.
    connection_options: frozenset[str]
    async_connection_options: frozenset[str]
    #: The root of every error its clients raise, and the Cluster client's own root.
    error: type[Exception]
    cluster_error: type[Exception]
    connection_error: type[Exception]
    timeout_error: type[Exception]
    auth_error: type[Exception]
    response_error: type[Exception]
    no_script_error: type[Exception]
    moved_error: type[Exception]
    ask_error: type[Exception]

    def node_client(self, node: Any) -> Any:
        """Return the client of one node of a Cluster client (``node.redis_connection``)."""
        return getattr(node, f"{self.name}_connection")

    def no_retry(self) -> Any:
        """Return a blocking client's retry policy that never re-sends a command."""
        return self.retry(self.no_backoff(), 0)

    def async_no_retry(self) -> Any:
        """Return an asyncio client's retry policy that never re-sends a command."""
        return self.async_retry(self.no_backoff(), 0)


@cache
def client_family(name: str) -> ClientFamily:
    """Return the family ``name`` (one of :data:`FAMILIES`), importing its library.

    Raises :class:`~django_redis_lock.InvalidLockBackendError` if the library is missing.
    """
    if name not in FAMILIES:
        raise InvalidLockBackendError(f"client must be one of {FAMILIES!r}, got {name!r}.")
    try:
        root, aio, errors = (
            importlib.import_module(module)
            for module in (name, f"{name}.asyncio", f"{name}.exceptions")
        )
        parts = [
            importlib.import_module(f"{name}.{module}")
            for module in ("sentinel", "asyncio.sentinel", "cluster", "asyncio.cluster")
        ]
        retries = [
            importlib.import_module(f"{name}.{module}")
            for module in ("retry", "asyncio.retry", "backoff")
        ]
    except ImportError:
        raise InvalidLockBackendError(
            f"The {name} client is not installed: {_INSTALL.get(name, name)}."
        ) from None
    sentinel, async_sentinel, cluster, async_cluster = parts
    retry, async_retry, backoff = retries
    title = name.capitalize()  # the libraries' class names: Redis, RedisError; Valkey, ...
    blocking, asyncio = pool_keywords(root, aio)
    return ClientFamily(
        name=name,
        client=getattr(root, title),
        async_client=getattr(aio, title),
        sentinel=sentinel.Sentinel,
        async_sentinel=async_sentinel.Sentinel,
        cluster=getattr(cluster, f"{title}Cluster"),
        cluster_node=cluster.ClusterNode,
        async_cluster=getattr(async_cluster, f"{title}Cluster"),
        async_cluster_node=async_cluster.ClusterNode,
        pool=root.ConnectionPool,
        async_pool=aio.ConnectionPool,
        connections=_by_kind(root),
        async_connections=_by_kind(aio),
        retry=retry.Retry,
        async_retry=async_retry.Retry,
        no_backoff=backoff.NoBackoff,
        connection_options=blocking,
        async_connection_options=asyncio,
        error=getattr(errors, f"{title}Error"),
        cluster_error=getattr(errors, f"{title}ClusterException"),
        connection_error=errors.ConnectionError,
        timeout_error=errors.TimeoutError,
        auth_error=errors.AuthenticationError,
        response_error=errors.ResponseError,
        no_script_error=errors.NoScriptError,
        moved_error=errors.MovedError,
        ask_error=errors.AskError,
    )


def _by_kind(module: Any) -> dict[str, Any]:
    return {
        "tcp": module.Connection,
        "tls": module.SSLConnection,
        "unix": module.UnixDomainSocketConnection,
    }


def family_name(client: object, urls: Sequence[object]) -> str:
    """Return the family OPTIONS choose: ``client``, else valkey for a valkey:// URL, else redis.

    ``client`` is returned as given: :func:`family_problems` says whether it is one.
    """
    if client is not None:
        return str(client)
    return "valkey" if any(url_scheme(url) in VALKEY_SCHEMES for url in urls) else FAMILIES[0]


def family_problems(
    client: object, urls: Sequence[object], options: Sequence[str], *, where: str
) -> list[Problem]:
    """Return what is wrong with the client family OPTIONS choose, as ``where`` (E016).

    ``client`` is ``OPTIONS["client"]`` (None if not given), ``urls`` the URLs the backend
    connects to, ``options`` the names of the other OPTIONS.
    """
    if client is not None and client not in FAMILIES:
        return [
            _problem(
                f"{where}['client'] must be 'redis' or 'valkey', got {client!r}.",
                "'redis' (the default) uses redis-py; 'valkey' uses valkey-py "
                f"({_INSTALL['valkey']}), as a valkey:// URL does by itself.",
            )
        ]
    valkey_urls = [url for url in urls if url_scheme(url) in VALKEY_SCHEMES]
    if client == "redis" and valkey_urls:
        shown = redact_url(str(valkey_urls[0]))
        return [
            _problem(
                f"{where}['client'] is 'redis', but {shown!r} is a valkey:// URL, which "
                "redis-py cannot read.",
                "Remove 'client' (a valkey:// URL picks the valkey client), or write the URL "
                "as redis:// (rediss:// for valkeys://).",
            )
        ]
    name = family_name(client, urls)
    try:
        family = client_family(name)
    except InvalidLockBackendError:
        why = f"['client'] is {name!r}" if client is not None else " has a valkey:// URL"
        return [
            _problem(
                f"{where}{why}, but the {name} package is not installed.",
                f"Install it: {_INSTALL.get(name, name)}.",
            )
        ]
    refused = sorted(set(options) & CONNECTION_OPTIONS - family.connection_options)
    if refused:
        return [
            _problem(
                f"{where} sets options that the {name} client's connections do not take: "
                f"{', '.join(map(repr, refused))}.",
                "Remove them, or use the client they belong to.",
            )
        ]
    return []


def _problem(message: str, hint: str) -> Problem:
    return Problem("django_redis_lock.E016", message, hint)


def sync_client(
    family: ClientFamily,
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> Any:
    """Return the blocking client: of ``url``, or of the primary that Sentinel names."""
    return _client((family.client, family.sentinel), url, sentinels, service_name, options)


def async_client(
    family: ClientFamily,
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> Any:
    """Return an asyncio client, as :func:`sync_client` does a blocking one."""
    classes = (family.async_client, family.async_sentinel)
    return _client(classes, url, sentinels, service_name, options)


def close_client(client: Any) -> None:
    """Close the idle connections of a :func:`sync_client`, its Sentinel's included.

    A connection another thread is using (a lease being renewed, a waiter blocked on its
    wake-up call) is left to finish: closing its socket under it would fail that command for
    nothing, and cost a renewal its lease.
    """
    client.connection_pool.disconnect(inuse_connections=False)
    for sentinel in _sentinels_of(client):  # a Sentinel's own connections, to the sentinels
        sentinel.connection_pool.disconnect(inuse_connections=False)


async def close_async_client(client: Any) -> None:
    """Close an :func:`async_client`, as :func:`close_client` does a blocking one."""
    await client.aclose()
    for sentinel in _sentinels_of(client):
        await sentinel.aclose()


def _sentinels_of(client: Any) -> list[Any]:
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    return list(manager.sentinels) if manager is not None else []


def _client(
    classes: tuple[Any, Any],  # a client class and its Sentinel class
    url: str,
    sentinels: Sequence[SentinelAddress] | None,
    service_name: str | None,
    options: dict[str, Any],
) -> Any:
    client_class, sentinel_class = classes
    if not sentinels:
        return client_class.from_url(url, **options)
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
