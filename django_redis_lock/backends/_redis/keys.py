"""What every Redis lock backend shares: the key layout, error messages, and listing.

A lock's keys all carry the hash tag ``{=name}`` (see ``lua/_prelude.lua``). Listing finds
the holders keys with ``SCAN`` (never ``KEYS``) and reads each batch in one pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from ...exceptions import BackendUnavailableError
from ..base import BaseLockBackend, LockInfo, glob_escape, page_cursor

__all__ = ["RedisKeyspace"]

_SUFFIX_HOLDERS = "h"


class RedisKeyspace(BaseLockBackend):
    """The keys, errors and listing of a backend whose ``client`` is a redis-py client."""

    client: Any

    def _subject(self) -> str:
        """Return what an error message says is unavailable (a server, a service)."""
        raise NotImplementedError("subclasses of RedisKeyspace must provide a _subject() method")

    # Keys ------------------------------------------------------------------------------------

    def key(self, name: str, kind: str = _SUFFIX_HOLDERS) -> str:
        """Return the key of one ``kind`` of lock ``name`` (see ``lua/_prelude.lua``).

        The hash tag is ``=`` and the name: never empty, even for a name that starts with
        ``}``, so every key of a lock is in one Redis Cluster slot.
        """
        return f"{self.key_prefix}:{{={name}}}:{kind}"

    def keys(self, name: str) -> tuple[str, str, str]:
        """Return the holders, data and fence keys of lock ``name``."""
        return self.key(name), self.key(name, "d"), self.key(name, "f")

    def _match(self, pattern: str) -> str:
        # The SCAN pattern of the holders keys of the locks whose names match ``pattern``.
        return f"{glob_escape(self.key_prefix)}:{{={pattern}}}:{_SUFFIX_HOLDERS}"

    def _name_from_key(self, key: bytes) -> str:
        text = key.decode("utf-8")
        return text[len(self.key_prefix) + 3 : -(len(_SUFFIX_HOLDERS) + 2)]

    @contextlib.contextmanager
    def _errors(self, name: str | None) -> Iterator[None]:
        try:
            yield
        except (redis.RedisError, RedisClusterException) as exc:
            raise self._unavailable(exc, name) from exc

    def _unavailable(
        self, exc: redis.RedisError | RedisClusterException, name: str | None
    ) -> BackendUnavailableError:
        # redis-py's cluster client says "cannot be connected" with a RedisClusterException,
        # which is no RedisError.
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, RedisClusterException)):
            problem = "is unavailable"
        else:
            # A server that answers but refuses (read-only replica, ACL, bad database index)
            # cannot serve locks either; the cause is kept in the message and the chain.
            problem = "refused the command"
        return BackendUnavailableError(f"{self._subject()} {problem}: {exc}", lock_name=name)

    # Listing ---------------------------------------------------------------------------------

    def iter_locks(self, pattern: str = "*", *, batch_size: int = 500) -> Iterator[LockInfo]:
        match = self._match(pattern)
        with self._errors(None):
            batch: list[bytes] = []
            for key in self.client.scan_iter(match=match, count=batch_size, _type="zset"):
                batch.append(key)
                if len(batch) >= batch_size:
                    yield from self._read_batch(batch)
                    batch = []
            if batch:
                yield from self._read_batch(batch)

    def lock_info(self, name: str) -> list[LockInfo]:
        # One lock's own keys, read directly: no scan of the keyspace.
        with self._errors(name):
            return list(self._read_batch([self.key(name).encode()]))

    def scan_page(
        self, pattern: str = "*", cursor: str | None = None, count: int = 50
    ) -> tuple[str | None, list[LockInfo]]:
        # Redis's own SCAN cursor: memory stays bounded however many locks are held.
        match = self._match(pattern)
        position, keys = page_cursor(cursor), list[bytes]()
        with self._errors(None):
            while True:
                position, found = self.client.scan(
                    position, match=match, count=max(count, 100), _type="zset"
                )
                keys.extend(k if isinstance(k, bytes) else k.encode() for k in found)
                if position == 0 or len(keys) >= count:
                    break
            infos = list(self._read_batch(keys)) if keys else []
        return (None if position == 0 else str(position)), infos

    def _read_batch(self, keys: list[bytes], client: Any = None) -> Iterator[LockInfo]:
        pipe = (client or self.client).pipeline(transaction=False)
        pipe.time()
        names = [self._name_from_key(key) for key in keys]
        for key, name in zip(keys, names, strict=False):
            pipe.zrange(key, 0, -1, withscores=True)
            pipe.hgetall(self.key(name, "d"))
        replies = pipe.execute()
        seconds, micros = replies[0]
        yield from self._infos(names, replies[1:], seconds * 1000 + micros // 1000)

    def _infos(self, names: list[str], replies: list[Any], now_ms: int) -> Iterator[LockInfo]:
        # Each name's two replies, ZRANGE of its holders and HGETALL of its data, in turn.
        for index, name in enumerate(names):
            holders, data = replies[2 * index], replies[2 * index + 1]
            for owner_bytes, ends in holders:
                if ends <= now_ms:
                    continue
                yield _info(name, owner_bytes.decode(), ends - now_ms, data, now_ms)


def _info(name: str, owner: str, ttl_ms: float, data: dict[bytes, bytes], now_ms: int) -> LockInfo:
    def field(suffix: str, default: bytes = b"0") -> bytes:
        return data.get(f"{owner}{suffix}".encode(), default)

    return LockInfo.from_record(
        name=name,
        owner=owner,
        holds=int(field("")),
        ttl=ttl_ms / 1000,
        fencing_token=int(field("|f")),
        acquired_at=int(field("|t")) / 1000,
        now=now_ms / 1000,
        metadata=field("|m", b"{}"),
    )
