"""The read-only subcommands of ``manage.py locks``: ``list`` and ``show``.

Each looks at every alias of ``LOCKS`` in turn, or at ``--using ALIAS`` only. Listing pages
through each backend with ``scan_page()`` and writes each page before reading the next, so
memory stays bounded however many locks are held (see ``management/output.py``; holders are
described by ``django_redis_lock.listing``). A failure is a ``CommandError`` carrying the
exit status.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.core.management.base import CommandError, OutputWrapper

from ..backends.base import BaseLockBackend, LockInfo, WaiterInfo, glob_escape
from ..exceptions import BackendUnavailableError
from ..handler import locks
from ..listing import duration, reader_counts
from .output import (
    PAGE_SIZE,
    JsonWriter,
    TableWriter,
    Writer,
    details,
    location,
    one_line,
    plural,
    scan_counted,
    waiter_details,
)

__all__ = ["NAMED_IN_FAILURE", "each_backend", "list_locks", "on_alias", "show_lock"]

#: Holders named in the message of ``list --fail``; the rest are counted.
NAMED_IN_FAILURE = 5


def list_locks(
    stdout: OutputWrapper,
    stderr: OutputWrapper,
    *,
    using: str | None,
    pattern: str | None,
    exact: str | None,
    as_json: bool,
    limit: int | None,
    older_than: float | None,
    fail: bool,
) -> None:
    """Write the matching holders, page by page; apply --limit, --older-than and --fail."""
    glob = glob_escape(exact) if exact else pattern or "*"
    out: Writer = JsonWriter(stdout) if as_json else TableWriter(stdout)
    page = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit + 1)
    listed, named, truncated = 0, list[str](), False
    errors: list[tuple[str, str]] = []
    for alias, backend in each_backend(using):
        try:
            for info, readers in scan_counted(backend, glob, page):
                if older_than is not None and info.held_for <= older_than:
                    continue
                if limit is not None and listed >= limit:
                    truncated = True
                    break
                out.row(alias, info, readers=readers)
                listed += 1
                if len(named) < NAMED_IN_FAILURE:
                    named.append(f"{alias} {info.name!r} ({duration(info.held_for)})")
        except BackendUnavailableError as exc:
            errors.append((alias, one_line(exc)))
        if truncated:
            break
    out.end(listed=listed, truncated=truncated, errors=errors, limit=limit)
    if fail and listed:
        what = "held longer than " + duration(older_than) if older_than is not None else "listed"
        more = f" and {listed - len(named)} more" if listed > len(named) else ""
        message = f"{plural(listed, 'lock holder')} {what}: {', '.join(named)}{more}."
        if not errors:
            raise CommandError(message, returncode=1)
        stderr.write(message)
    if errors:
        raise CommandError("; ".join(f"alias {a!r}: {e}" for a, e in errors), returncode=2)


def show_lock(stdout: OutputWrapper, name: str, *, using: str | None, as_json: bool) -> None:
    """Write every holder of one lock in full; exit 1 when nobody holds it."""
    found: list[tuple[str, BaseLockBackend, list[LockInfo], list[WaiterInfo]]] = []
    errors: list[tuple[str, str]] = []
    for alias, backend in each_backend(using):
        try:
            holders, waiters = backend.lock_info(name), backend.waiters(name)
        except BackendUnavailableError as exc:
            errors.append((alias, one_line(exc)))
            continue
        if holders:
            found.append((alias, backend, holders, waiters))
    if as_json:
        out = JsonWriter(stdout, name=name)
        for alias, _, holders, _ in found:
            for info in holders:
                out.row(alias, info)
        queued = [(alias, waiter) for alias, _, _, waiters in found for waiter in waiters]
        out.end(listed=0, truncated=False, errors=errors, limit=None, waiters=queued)
    else:
        for alias, backend, holders, waiters in found:
            _write_lock(stdout, name, alias, backend, holders=holders, waiters=waiters)
    if errors:
        raise CommandError("; ".join(f"alias {a!r}: {e}" for a, e in errors), returncode=2)
    if not found:
        raise CommandError(f"Lock {name!r} is not held{on_alias(using)}.", returncode=1)


def _write_lock(
    stdout: OutputWrapper,
    name: str,
    alias: str,
    backend: BaseLockBackend,
    *,
    holders: list[LockInfo],
    waiters: list[WaiterInfo],
) -> None:
    """Write one lock's holders in full, then its waiters, one line each, in queue order."""
    stdout.write(
        f"Lock {name!r} on alias {alias!r} ({location(backend)}): "
        f"{plural(len(holders), 'holder')}, {len(waiters)} waiting"
    )
    readers = reader_counts(holders).get(name)
    for info in holders:
        stdout.write(details(info, readers=readers))
    if waiters:
        stdout.write("Waiting, in queue order:")
    for waiter in waiters:
        stdout.write(waiter_details(waiter))


def each_backend(using: str | None) -> Iterator[tuple[str, BaseLockBackend]]:
    """Yield ``--using``'s alias and its backend, or every alias of ``LOCKS``, built in turn."""
    for alias in [using] if using else list(locks):
        yield alias, locks[alias]


def on_alias(using: str | None) -> str:
    """Return " on alias 'x'" for a message about ``--using x``, else an empty string."""
    return f" on alias {using!r}" if using else ""
