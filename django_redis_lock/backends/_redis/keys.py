"""What every Redis lock backend shares: the key layout, error messages, and listing.

A lock's keys all carry the hash tag ``{=name}`` (see ``lua/_prelude.lua``). Listing finds
the holders keys (hashes of holder records) with ``SCAN`` (never ``KEYS``) and reads each
batch in one pipeline, with each lock's waiter registrations, to count the live ones. One
lock's waiters are its queue (a sorted set, by arrival) and their registrations (a hash).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ...exceptions import BackendUnavailableError
from ..base import BaseLockBackend, LockInfo, WaiterInfo, glob_escape, page_cursor
from .clients import ClientFamily
from .scripts import KEY_COUNTS

__all__ = ["RedisKeyspace"]

_SUFFIX_HOLDERS = "h"
_SUFFIX_WAITERS = b"w"


class RedisKeyspace(BaseLockBackend):
    """The keys, errors and listing of a backend whose ``client`` is one of ``family``'s."""

    client: Any
    family: ClientFamily

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

    def script_keys(self, script: str, name: str, attempt: str = "", owner: str = "") -> list[str]:
        """Return the keys ``script`` is given for lock ``name``: every key it may touch.

        They are the prelude's KEYS (``lua/_prelude.lua``), as many as the script takes: the
        holders, queue, waiters, fence and wake-up list, the mark of ``attempt`` withdrawn,
        and ``owner``'s own list (withdraw.lua's alone).
        """
        tagged = f"{self.key_prefix}:{{={name}}}:"
        kinds = ("h", "q", "w", "f", "s", f"x:{attempt}", f"s:{owner}")[: KEY_COUNTS[script]]
        return [tagged + kind for kind in kinds]

    def _all_keys(self, names: Sequence[str], attempt: str) -> list[str]:
        # The keys of acquire_all on ``names``: each lock's, one lock after another.
        each = (self.script_keys("acquire_all", name, attempt) for name in names)
        return [key for keys in each for key in keys]

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
        except (self.family.error, self.family.cluster_error) as exc:
            raise self._unavailable(exc, name) from exc

    def _unavailable(self, exc: Exception, name: str | None) -> BackendUnavailableError:
        # ``exc`` is an error of the client library. Its cluster client says "cannot be
        # connected" with a RedisClusterException, which is no RedisError.
        family = self.family
        if isinstance(exc, family.auth_error):
            # A healthy server that wants a password is not "unavailable": say what it wants.
            return BackendUnavailableError(
                f"{self._subject()} {_auth_problem(exc)} ({exc})", lock_name=name
            )
        if isinstance(exc, (family.connection_error, family.timeout_error, family.cluster_error)):
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
            for key in self.client.scan_iter(match=match, count=batch_size, _type="hash"):
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
                    position, match=match, count=max(count, 100), _type="hash"
                )
                keys.extend(k if isinstance(k, bytes) else k.encode() for k in found)
                if position == 0 or len(keys) >= count:
                    break
            infos = list(self._read_batch(keys)) if keys else []
        return (None if position == 0 else str(position)), infos

    def _read_batch(self, keys: list[bytes], client: Any = None) -> Iterator[LockInfo]:
        pipe = (client or self.client).pipeline(transaction=False)
        pipe.time()
        for key in keys:
            pipe.hgetall(key)
            pipe.hvals(key[: -len(_SUFFIX_HOLDERS)] + _SUFFIX_WAITERS)
        replies = pipe.execute()
        seconds, micros = replies[0]
        now_ms = seconds * 1000 + micros // 1000
        for i, key in enumerate(keys):
            records, registrations = replies[1 + 2 * i], replies[2 + 2 * i]
            name = self._name_from_key(key)
            waiting = sum(1 for text in registrations if _ends(text) > now_ms)
            for owner, record in records.items():
                info = _info(name, owner.decode(), record, now_ms, waiting)
                if info is not None:
                    yield info

    def waiters(self, name: str) -> list[WaiterInfo]:
        with self._errors(name):
            return self._waiters_on(self.client, name)

    def _waiters_on(self, client: Any, name: str) -> list[WaiterInfo]:
        """Return the live waiters of ``name``, read in one round trip on ``client``."""
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.zrange(self.key(name, "q"), 0, -1, withscores=True)
        pipe.hgetall(self.key(name, _SUFFIX_WAITERS.decode()))
        (seconds, micros), queue, registrations = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        found: list[WaiterInfo] = []
        for owner, arrival in queue:
            text = registrations.get(owner)
            if text is None or _ends(text) <= now_ms:
                continue  # gone, or dead: the next handoff drops it
            ends, _lease, _limit, _attempt, rest = text.split(b" ", 4)
            flag, _, metadata = rest.partition(b" ")
            fair: bool | None = flag == b"f" if flag in (b"f", b"-") else None
            found.append(
                WaiterInfo.from_record(
                    name=name,
                    owner=owner.decode(),
                    position=len(found),
                    fair=fair,
                    since=arrival / 1_000_000,
                    ends=int(ends) / 1000,
                    now=now_ms / 1000,
                    metadata=metadata if fair is not None else rest,
                )
            )
        return found


def _ends(registration: bytes) -> int:
    """Return when a waiter's registration ends (ms, on the server's clock)."""
    return int(registration.split(b" ", 1)[0])


def _info(name: str, owner: str, record: bytes, now_ms: int, waiting: int) -> LockInfo | None:
    """Return a holder's record (see ``lua/_prelude.lua``) as a LockInfo; None if it ended."""
    ends, holds, fence, acquired_at, _limit, _attempt, metadata = record.split(b" ", 6)
    if int(ends) <= now_ms:
        return None
    return LockInfo.from_record(
        name=name,
        owner=owner,
        holds=int(holds),
        ttl=(int(ends) - now_ms) / 1000,
        fencing_token=int(fence),
        acquired_at=int(acquired_at) / 1000,
        now=now_ms / 1000,
        metadata=metadata,
        waiting=waiting,
    )


def _auth_problem(exc: Exception) -> str:
    """Say what a server that refused to authenticate wants (never quoting a password)."""
    # redis-py raises it for WRONGPASS (credentials sent, refused) and NOAUTH (none sent).
    if str(exc).startswith("invalid username-password pair"):
        return "refused the user name or password it was given"
    return (
        "requires a password, and none was given: put it in the URL "
        "(redis://:PASSWORD@host:6379/0) or in OPTIONS['password']"
    )
