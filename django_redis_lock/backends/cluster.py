"""Locks on Redis Cluster: the scripts and keys of :class:`~.redis.RedisBackend`, sharded.

Every key of one lock carries the hash tag ``{=name}``, so a lock lives in one slot, on one
primary, and each of its scripts runs there as on a single Redis. Locks of different names
spread over the primaries. Listing and force-release reach every primary; renewal sends one
pipeline per primary that holds renewed locks.

``wait_replicas`` and ``sentinels`` are not available here: a cluster fails over by itself,
and ``WAIT`` would need the connection of each write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from ..exceptions import InvalidLockArgumentError, InvalidLockBackendError, LockError
from ._redis.connections import VALKEY_SCHEMES, redact_url, secret_safe, sentinel_address
from ._redis.protocol import seconds
from .base import (
    AcquireAllResult,
    AcquireRequest,
    BaseLockBackend,
    LockInfo,
    Problem,
    ReleaseRequest,
    WaiterInfo,
)
from .redis import RedisBackend

__all__ = ["RedisClusterBackend"]


class RedisClusterBackend(RedisBackend):
    """Locks stored on a Redis Cluster.

    OPTIONS: ``url`` of any node (``redis://`` or ``rediss://``), or ``startup_nodes``
    (``"host:port"`` strings); then every option of :class:`~.redis.RedisBackend` except
    ``sentinels``, ``service_name``, ``wait_replicas`` and ``cache``.
    """

    options: ClassVar[frozenset[str]] = (
        RedisBackend.options - {"sentinels", "service_name", "wait_replicas", "cache"}
    ) | {"startup_nodes"}
    url_schemes: ClassVar[frozenset[str]] = frozenset({"redis", "rediss"}) | VALKEY_SCHEMES

    def __init__(
        self,
        *,
        url: str = "redis://127.0.0.1:7000/0",
        startup_nodes: Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        self.startup_nodes = list(startup_nodes or [])
        super().__init__(url=url, **options)

    @classmethod
    def option_problems(cls, options: Mapping[str, Any], *, where: str) -> list[Problem]:
        found = super().option_problems(options, where=where)
        nodes = options.get("startup_nodes")
        if nodes is not None and (
            not isinstance(nodes, (list, tuple))
            or not nodes
            or any(not isinstance(n, str) or sentinel_address(n) is None for n in nodes)
        ):
            found.append(
                cls.own_problem(
                    where,
                    f'startup_nodes must be a non-empty list of "host:port" strings, got '
                    f"{nodes!r}.",
                )
            )
        return found

    def _connect(self, url: str, options: dict[str, Any]) -> Any:
        # Redirections (MOVED, ASK) are followed; a command is never re-sent after an error.
        family = self.family
        options = {**options, "retry": family.no_retry()}
        try:
            if self.startup_nodes:
                nodes = [
                    family.cluster_node(*address)
                    for address in map(sentinel_address, self.startup_nodes)
                    if address is not None
                ]
                return family.cluster(startup_nodes=nodes, **options)
            return family.cluster.from_url(url, **options)
        except (family.error, family.cluster_error) as exc:
            raise self._unavailable(exc, None) from exc
        except (TypeError, ValueError) as exc:
            raise InvalidLockBackendError(
                f"Redis Cluster options could not be used: {secret_safe(url, exc)}"
            ) from None

    def _new_async_client(self) -> Any:
        family = self.family
        options = {**self._async_options, "retry": family.async_no_retry()}
        if self.startup_nodes:
            nodes = [
                family.async_cluster_node(*address)
                for address in map(sentinel_address, self.startup_nodes)
                if address is not None
            ]
            return family.async_cluster(startup_nodes=nodes, **options)
        return family.async_cluster.from_url(self.url, **options)

    def ping(self) -> None:
        with self._errors(None):
            self.client.ping(target_nodes=self.family.cluster.PRIMARIES)

    def _wait_then_claim(
        self, name: str, owner: str, window: float, args: list[Any], attempt: str
    ) -> tuple[Any, Any]:
        # The cluster's pipeline finds the primary of the lock's slot and follows redirections.
        pipe: Any = self.client.pipeline(transaction=False)
        for command in self._wait_commands(name, owner, window, args, attempt):
            pipe.execute_command(*command)
        call, reply = pipe.execute(raise_on_error=False)
        return call, reply

    def close(self) -> None:
        # Each node's idle connections; one in use (a renewal, a waiter) is left to finish,
        # as close_client() does on one server. The client keeps its slot table.
        cluster: Any = self.client
        for node in cluster.get_nodes():
            client = self.family.node_client(node)
            if client is not None:
                client.connection_pool.disconnect(inuse_connections=False)

    # lock_all: one script when every name lives in one slot -----------------------------------

    def _one_slot(self, names: Sequence[str]) -> bool:
        # A name's slot is its hash tag's: ``=`` and the name up to its first ``}``, so names
        # that start with one ``{tag}`` share a slot (``{acct}:1``, ``{acct}:2``).
        cluster: Any = self.client
        return len({cluster.keyslot(self.key(name)) for name in names}) == 1

    def acquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        if not self._one_slot(names):
            return None  # across slots, each name is acquired on its own primary, in order
        return super().acquire_all(names, owner, request, holds)

    async def aacquire_all(
        self, names: Sequence[str], owner: str, request: AcquireRequest, holds: Sequence[int]
    ) -> AcquireAllResult | None:
        if not self._one_slot(names):
            return None
        return await super().aacquire_all(names, owner, request, holds)

    @property
    def location(self) -> str:
        return "Redis Cluster " + ", ".join(self.startup_nodes or [redact_url(self.url)])

    def _subject(self) -> str:
        return f"The {self.location}"

    def _by_primary(self, keys: Sequence[str | bytes]) -> dict[str, tuple[Any, list[int]]]:
        # The primary of each key's slot, from the client's slot table: no round trip.
        cluster: Any = self.client
        found: dict[str, tuple[Any, list[int]]] = {}
        for index, key in enumerate(keys):
            node = cluster.get_node_from_key(key)
            found.setdefault(node.name, (node, []))[1].append(index)
        return found

    def release_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        # A multi-lock's names may live on several primaries: released one after another.
        return BaseLockBackend.release_many(self, releases)

    async def arelease_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        return await BaseLockBackend.arelease_many(self, releases)

    # Renewal: one pipeline per primary ---------------------------------------------------------

    def server_of(self, name: str) -> object:
        # Never raises: it runs in the renewal thread's scheduler, for every lease of the
        # process. A slot the client cannot place (its table is being refreshed, or the slot
        # is not covered) is renewed with the others of that kind, and fails there, alone.
        cluster: Any = self.client
        try:
            node = cluster.get_node_from_key(self.key(name))
        except (self.family.error, self.family.cluster_error):
            return None
        return None if node is None else node.name

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        # A primary that fails makes only its own leases unknown (retried); the others renew.
        results: list[float | LockError | None] = [None] * len(leases)
        keys = [self.key(name) for name, _, _ in leases]
        # The replies of a primary that no longer (or not yet) serves a lock's slot.
        redirected = (self.family.moved_error, self.family.ask_error)
        for node, indexes in self._by_primary(keys).values():
            batch = [leases[i] for i in indexes]
            try:
                replies = self._renew_on(self.family.node_client(node), batch, keep=redirected)
            except self.family.error as exc:
                error = self._unavailable(exc, None)
                for index in indexes:
                    results[index] = error
                continue
            for index, reply in zip(indexes, replies, strict=True):
                if isinstance(reply, redirected):
                    # The slot moved (resharding): once more through the cluster client,
                    # which follows MOVED and ASK and learns the new slot table.
                    results[index] = self._renew_redirected(*leases[index])
                else:
                    results[index] = seconds(reply)
        return results

    def _renew_redirected(self, name: str, owner: str, ttl: float) -> float | LockError | None:
        try:
            return self.extend(name, owner, ttl, replace=True)
        except LockError as exc:
            return exc

    # Listing: every primary ------------------------------------------------------------------

    def scan_page(
        self, pattern: str = "*", cursor: str | None = None, count: int = 50
    ) -> tuple[str | None, list[LockInfo]]:
        # The cursor names the primary being scanned and Redis's own cursor on it.
        cluster: Any = self.client
        primaries = sorted(node.name for node in cluster.get_primaries())
        index, position = _cluster_cursor(cursor, len(primaries))
        keys: list[bytes] = []
        with self._errors(None):
            while index < len(primaries) and len(keys) < count:
                node = cluster.get_node(node_name=primaries[index])
                position, found = self.family.node_client(node).scan(
                    position, match=self._match(pattern), count=max(count, 100), _type="hash"
                )
                keys.extend(k if isinstance(k, bytes) else k.encode() for k in found)
                if position == 0:
                    index += 1
            infos = list(self._read_batch(keys)) if keys else []
        after = None if index >= len(primaries) else json.dumps([index, position])
        return after, infos

    def waiters(self, name: str) -> list[WaiterInfo]:
        # On the primary of the lock's slot, on its own clock, as the scripts that queue.
        cluster: Any = self.client
        with self._errors(name):
            node = cluster.get_node_from_key(self.key(name))
            return self._waiters_on(self.family.node_client(node), name)

    def _read_batch(self, keys: list[bytes], client: Any = None) -> Iterator[LockInfo]:
        # Per primary, on that primary's own clock.
        for node, indexes in self._by_primary(keys).values():
            client = self.family.node_client(node)
            yield from super()._read_batch([keys[i] for i in indexes], client)


def _cluster_cursor(cursor: str | None, primaries: int) -> tuple[int, int]:
    if cursor is None:
        return 0, 0
    try:
        index, position = json.loads(cursor)
        numbers = all(isinstance(n, int) and not isinstance(n, bool) for n in (index, position))
        if not (numbers and 0 <= index < primaries and position >= 0):
            raise ValueError(cursor)
    except (ValueError, TypeError):
        raise InvalidLockArgumentError(
            f"cursor must be None or a cursor returned by scan_page(), got {cursor!r}."
        ) from None
    return index, position
