"""How ``manage.py locks`` reads and writes held locks: paged scans, a table, JSON, details.

A listing never keeps more than a page of locks in memory: :func:`scan` reads one page per
round trip, and each writer takes one holder at a time (with how many readers hold its lock,
counted on its page: a page lists every holder of each lock on it). Holders are described by
:mod:`django_redis_lock.listing`, as on the admin page; this module lays them out for a
terminal, where :func:`escaped` and :func:`shown` keep what holders wrote from acting on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from django.core.management.base import OutputWrapper

from ..backends._redis.connections import redact_url
from ..backends.base import BaseLockBackend, LockInfo, WaiterInfo
from ..listing import (
    describe_holder,
    describe_mode,
    describe_waiter,
    duration,
    held_until,
    metadata_json,
    metadata_summary,
    min_hold_note,
    reader_counts,
    shorten,
    task_id,
)

__all__ = [
    "JSON_FORMAT",
    "JSON_VERSION",
    "PAGE_SIZE",
    "JsonWriter",
    "TableWriter",
    "Writer",
    "details",
    "escaped",
    "location",
    "one_line",
    "plural",
    "record",
    "scan",
    "scan_counted",
    "shown",
    "summary",
    "waiter_details",
    "waiter_record",
]

#: The ``version`` of the JSON written by ``--json``; raised when a field changes meaning.
JSON_VERSION = 4
#: Locks read per round trip while listing.
PAGE_SIZE = 500
#: The table's metadata column shows this many characters.
METADATA_WIDTH = 40

JSON_FORMAT = """\
JSON (--json, version 4): one object, written while the listing streams, one lock per line:
  {"version": 4, "locks": [LOCK, ...], "truncated": false, "errors": []}
show adds "name" (the name asked for) and "waiters": [WAITER, ...], the owners waiting for
it, in queue order on each alias. "truncated" is true when --limit left out at least one
more matching lock; "errors" lists {"alias": ..., "error": ...} for aliases that could not be
read. Each LOCK is one holder of one lock (a lock with limit > 1 has one per holder):
  alias          str         the LOCKS alias it is held on
  name           str         the exact lock name
  owner          str         the holder's owner token (for release --owner)
  min_hold_of    str|null    the owner that released it, when it is held on only for its
                             min_hold window (owner is then "min_hold:" and that token)
  task_id        str|null    the task id (Celery's, or a django.tasks result id), if a
                             @single_instance task holds it
  holds          int         reentrant hold count
  ttl            float       seconds left of the lease
  held_until     str         when the lease ends, ISO 8601 in UTC
  held_for       float       seconds since this holder acquired it
  acquired_at    str         when, ISO 8601 in UTC (e.g. 2026-01-31T09:30:00.250000+00:00)
  fencing_token  int         the holder's fencing token
  host           str|null    host name of the holding process
  pid            int|null    its process id
  thread         str|null    its thread name
  metadata       object      the metadata the holder recorded, in full ({} when none)
  waiting        int         how many owners wait for the lock (0 on Redlock, which keeps no
                             queue)
  mode           str|null    "read" or "write" for a holder of a read-write lock (rwlock);
                             null for a plain lock
Each WAITER is one owner waiting for the lock:
  alias, name, owner, task_id, host, pid, thread, metadata, mode   as in LOCK, as it
                             registered (mode: whether it waits to read or to write)
  position       int         its place in the queue, 0 first
  next           bool        true for the owner a release hands the lock to first
  fair           bool|null   whether it asked for fair (FIFO) order; null: not known
  waiting_since  str         when it joined the queue, ISO 8601 in UTC
  waited_for     float       seconds since
  expires_in     float       seconds its registration has left (a waiter that dies drops
                             out when it ends; a live one registers again before)
Seconds are floats with millisecond precision, measured on the backend's clock. Version 4
added mode; version 3 added waiting and show's waiters; version 2 added min_hold_of and
held_until."""

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def scan(backend: BaseLockBackend, pattern: str, count: int = PAGE_SIZE) -> Iterator[LockInfo]:
    """Yield the holders of the locks matching ``pattern``, reading ``count`` locks at a time."""
    for info, _ in scan_counted(backend, pattern, count):
        yield info


def scan_counted(
    backend: BaseLockBackend, pattern: str, count: int = PAGE_SIZE
) -> Iterator[tuple[LockInfo, int | None]]:
    """Do what :func:`scan` does, yielding each holder with how many readers hold its lock.

    The count is None for a lock that no reader holds (a plain lock, or a writer's).
    """
    cursor: str | None = None
    while True:
        cursor, page = backend.scan_page(pattern, cursor, count)
        readers = reader_counts(page)
        for info in page:
            yield info, readers.get(info.name)
        if cursor is None:
            return


# Writers -------------------------------------------------------------------------------------


class Writer:
    """Write holders as they come, then an end; subclasses choose the format."""

    def row(self, alias: str, info: LockInfo, *, readers: int | None = None) -> None:
        """Write one holder of a lock held on ``alias``; ``readers`` hold the lock to read."""
        raise NotImplementedError("subclasses of Writer must provide a row() method")

    def end(
        self, *, listed: int, limit: int | None, truncated: bool, errors: list[tuple[str, str]]
    ) -> None:
        """Finish the output; ``errors`` are the (alias, one-line message) of aliases not read."""
        raise NotImplementedError("subclasses of Writer must provide an end() method")


class JsonWriter(Writer):
    """The JSON object of :data:`JSON_FORMAT`, one lock per line, valid once ended."""

    def __init__(self, out: OutputWrapper, *, name: str | None = None) -> None:
        self.out = out
        head = {"version": JSON_VERSION} | ({} if name is None else {"name": name})
        self.out.write(json.dumps(head)[:-1] + ', "locks": [')
        self.first = True

    def row(self, alias: str, info: LockInfo, *, readers: int | None = None) -> None:
        text = json.dumps(record(alias, info))
        self.out.write(text if self.first else ",\n" + text, ending="")
        self.first = False

    def end(
        self,
        *,
        listed: int,
        limit: int | None,
        truncated: bool,
        errors: list[tuple[str, str]],
        waiters: list[tuple[str, WaiterInfo]] | None = None,
    ) -> None:
        failures = [{"alias": alias, "error": error} for alias, error in errors]
        queued = {} if waiters is None else {"waiters": [waiter_record(*w) for w in waiters]}
        tail = json.dumps(queued | {"truncated": truncated, "errors": failures})
        self.out.write(("" if self.first else "\n") + "], " + tail[1:])


def record(alias: str, info: LockInfo) -> dict[str, Any]:
    """Return one holder as a LOCK of :data:`JSON_FORMAT`."""
    return {
        "alias": alias,
        "name": info.name,
        "owner": info.owner,
        "min_hold_of": info.min_hold_of,
        "task_id": task_id(info),
        "holds": info.holds,
        "ttl": round(float(info.ttl), 3),
        "held_until": held_until(info).isoformat(),
        "held_for": round(float(info.held_for), 3),
        "acquired_at": info.acquired_at.isoformat(),
        "fencing_token": info.fencing_token,
        "host": info.host,
        "pid": info.pid,
        "thread": info.thread,
        "metadata": info.metadata,
        "waiting": info.waiting,
        "mode": info.mode,
    }


def waiter_record(alias: str, info: WaiterInfo) -> dict[str, Any]:
    """Return one waiter as a WAITER of :data:`JSON_FORMAT`."""
    return {
        "alias": alias,
        "name": info.name,
        "owner": info.owner,
        "task_id": task_id(info),
        "position": info.position,
        "next": info.next,
        "fair": info.fair,
        "waiting_since": info.waiting_since.isoformat(),
        "waited_for": round(info.waited_for, 3),
        "expires_in": round(info.expires_in, 3),
        "host": info.host,
        "pid": info.pid,
        "thread": info.thread,
        "metadata": info.metadata,
        "mode": info.mode,
    }


class TableWriter(Writer):
    """A table whose columns are sized by its first page of rows, so it streams after that."""

    HEADER = (
        "ALIAS",
        "NAME",
        "OWNER",
        "HOLDS",
        "TTL",
        "HELD FOR",
        "FENCING",
        "WAITING",
        "METADATA",
    )

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self.pending: list[tuple[str, ...]] = []
        self.widths: list[int] | None = None

    def row(self, alias: str, info: LockInfo, *, readers: int | None = None) -> None:
        cells = (
            alias,
            shown(info.name),
            escaped(describe_holder(info, readers=readers)),
            str(info.holds),
            duration(info.ttl),
            duration(info.held_for),
            str(info.fencing_token),
            str(info.waiting),
            shorten(escaped(metadata_summary(info)), METADATA_WIDTH),
        )
        if self.widths is not None:
            self._write(cells)
            return
        self.pending.append(cells)
        if len(self.pending) >= PAGE_SIZE:
            self._flush()

    def _flush(self) -> None:
        rows = [self.HEADER, *self.pending]
        self.widths = [max(len(row[i]) for row in rows) for i in range(len(self.HEADER) - 1)]
        for row in rows:
            self._write(row)
        self.pending = []

    def _write(self, cells: tuple[str, ...]) -> None:
        assert self.widths is not None
        padded = [cell.ljust(width) for cell, width in zip(cells, self.widths, strict=False)]
        self.out.write("  ".join([*padded, cells[-1]]).rstrip())

    def end(
        self, *, listed: int, limit: int | None, truncated: bool, errors: list[tuple[str, str]]
    ) -> None:
        if self.pending:
            self._flush()
        if listed:
            stop = f" (stopped at --limit {limit})" if truncated else ""
            self.out.write(f"{plural(listed, 'holder')} listed{stop}.")
        elif not errors:
            self.out.write("No matching locks are held.")


# Text ----------------------------------------------------------------------------------------


def details(info: LockInfo, *, readers: int | None = None) -> str:
    """Return every field of one holder, one per line, its metadata as indented JSON.

    A holder of a read-write lock has a ``mode`` line after its owner: "write", or "read" with
    how many ``readers`` hold the lock. Whatever the holder recorded, nothing a terminal acts
    on is written (see :func:`escaped`).
    """
    metadata = metadata_json(info, indent=2)
    fields = [
        ("owner", shown(info.owner)),
        ("task id", shown(task_id(info) or "-")),
        ("holds", str(info.holds)),
        ("ttl", f"{info.ttl:.3f} s ({duration(info.ttl)})"),
        ("held for", f"{info.held_for:.3f} s ({duration(info.held_for)})"),
        ("acquired at", info.acquired_at.isoformat()),
        ("fencing token", str(info.fencing_token)),
        ("host", shown(info.host or "-")),
        ("pid", "-" if info.pid is None else str(info.pid)),
        ("thread", shown(info.thread or "-")),
        # JSON's own line breaks stay: json.dumps writes any in the values as \n.
        ("metadata", ("\n" + " " * 18).join(map(escaped, metadata.split("\n")))),
    ]
    mode = describe_mode(info, readers)
    if mode is not None:
        fields[1:1] = [("mode", mode)]
    note = min_hold_note(info)
    if note is not None and info.min_hold_of is not None:
        fields[1:1] = [("held", note), ("released by", shown(info.min_hold_of))]
    return "\n".join(f"  {label + ':':<16}{value}" for label, value in fields)


def waiter_details(info: WaiterInfo) -> str:
    """Return one waiter on one line: its place, who it is, since when, and its owner token."""
    return (
        f"  {info.position + 1}. {escaped(describe_waiter(info))} "
        f"(since {info.waiting_since:%Y-%m-%d %H:%M:%S} UTC, owner {shown(info.owner)})"
    )


def summary(info: LockInfo) -> str:
    """Return one line naming a holder: owner token, who it is, how long held, its holds."""
    return (
        f"owner {shown(info.owner)}, {escaped(describe_holder(info))}, "
        f"held for {duration(info.held_for)}, {plural(info.holds, 'hold')}"
    )


def shown(text: str) -> str:
    """Return ``text`` as is, or as a Python literal if it could be misread in a table.

    A literal escapes what :func:`escaped` does, and quotes and backslashes besides.
    """
    plain = text.isprintable() and "\\" not in text and text == text.strip()
    return text if plain and text else repr(text)


def escaped(text: str) -> str:
    """Return ``text`` with each character that is not printable written as Python escapes it.

    Control characters (C0 such as ESC, which starts an ANSI sequence, and C1 such as U+009B),
    line and paragraph separators and format characters such as bidi overrides are what a
    terminal could act on; lock names, owners and metadata are written by whoever locks.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def plural(count: int, noun: str) -> str:
    """Return ``count`` and ``noun``, with an s unless the count is one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def location(backend: BaseLockBackend) -> str:
    """Return the backend's class and where it keeps its locks (never a password)."""
    name, place = type(backend).__name__, backend.location
    return name if place == name else f"{name} at {place}"


def one_line(exc: BaseException) -> str:
    """Return the message of ``exc`` on one line, every URL in it with its password redacted."""
    # Backends redact their URLs already; this also covers a URL in a message from below them.
    text = " ".join(str(exc).split())
    return _URL.sub(lambda match: redact_url(match.group()), text)
