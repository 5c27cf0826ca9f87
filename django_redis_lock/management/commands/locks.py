"""``manage.py locks``: list the held locks, show one, or force-release one.

Every subcommand looks at each alias of ``LOCKS`` in turn, or at ``--using ALIAS`` only.
Listing pages through each backend with ``scan_page()`` and writes each page before reading
the next, so memory stays bounded however many locks are held (see ``management/listing.py``;
holders are described by ``django_redis_lock.listing``). The exit status is that of
:data:`EXIT_STATUS`; every failure is a ``CommandError`` carrying it as ``returncode``, so
``call_command()`` callers see it too.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...backends.base import BaseLockBackend, LockInfo, WaiterInfo, glob_escape
from ...exceptions import BackendUnavailableError, InvalidLockBackendError
from ...handler import locks
from ...listing import duration, reader_counts, task_id
from ..arguments import LocksParser, lock_name, seconds, whole_number
from ..output import (
    JSON_FORMAT,
    PAGE_SIZE,
    JsonWriter,
    TableWriter,
    Writer,
    details,
    location,
    one_line,
    plural,
    scan_counted,
    shown,
    summary,
    waiter_details,
)

audit_logger = logging.getLogger("django_redis_lock.audit")

#: Holders named in the message of ``list --fail``; the rest are counted.
NAMED_IN_FAILURE = 5

EXIT_STATUS = """\
exit status: 0 done; 1 a check failed (list --fail listed a lock, show or release found
nothing to show or free, a release was declined); 2 a usage error, a bad LOCKS setting or a
backend that could not be reached (one line on stderr)."""


class Command(BaseCommand):
    """``manage.py locks [list|show|release]``: see the module docstring and ``--help``."""

    help = (
        "List the held locks, show one lock, or force-release one. With no subcommand, alone or "
        "with options of `list`, it runs `locks list`: `locks --json` is `locks list --json`."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("epilog", EXIT_STATUS)
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django's parser reports usage errors of call_command() with exit status 1; ours says 2
        # both ways. Its subparsers are LocksParsers already (see add_arguments).
        parser.__class__ = LocksParser
        assert isinstance(parser, LocksParser)
        parser.default_subcommand = "list"
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand",
            title="subcommands",
            metavar="{list,show,release}",
            parser_class=LocksParser,
        )
        raw = argparse.RawDescriptionHelpFormatter

        listing = sub.add_parser(
            "list",
            help="List held locks as a table, or as JSON (the default subcommand).",
            description=_paragraph(
                "List every holder of every held lock, in SCAN order: alias, name, owner "
                "(the task, else host, pid and thread; then, for a read-write lock, read and "
                "how many readers hold it, or write), holds, lease left, time held, "
                "fencing token, owners waiting and a short metadata summary. Names with control "
                "characters, a backslash or surrounding spaces are shown quoted, as Python "
                "literals; --json gives every name exactly. `locks` alone, or followed by these "
                "options, runs `locks list`."
            ),
            epilog=f"{JSON_FORMAT}\n\n{EXIT_STATUS}",
            formatter_class=raw,
        )
        _add_using(listing)
        which = listing.add_mutually_exclusive_group()
        which.add_argument(
            "--pattern",
            metavar="GLOB",
            help="Only locks whose name matches this Redis glob: * any characters, ? one, "
            "[abc] one of, \\ escapes the next character (default: all). Match a name that "
            "contains *, ?, [ or \\ with --exact, or escape those characters with \\.",
        )
        which.add_argument(
            "--exact", metavar="NAME", type=lock_name, help="Only the lock named exactly NAME."
        )
        listing.add_argument(
            "--json", action="store_true", help="Write JSON (format below) instead of a table."
        )
        listing.add_argument(
            "--limit", metavar="N", type=whole_number, help="Stop after N holders (default: all)."
        )
        listing.add_argument(
            "--older-than",
            metavar="SECONDS",
            type=seconds,
            help="Only holders that have held their lock for more than SECONDS.",
        )
        listing.add_argument(
            "--fail",
            action="store_true",
            help="Exit with status 1, naming them on stderr, if any holder is listed (with "
            "--older-than: if any lock is held longer than SECONDS). For monitoring.",
        )

        show = sub.add_parser(
            "show",
            help="Show everything known about one lock.",
            description=_paragraph(
                "Show every holder of the lock named exactly NAME (any characters; put -- "
                "before a name that starts with -), with all its details and full metadata "
                "(and, for a read-write lock, its mode: read or write), then the owners waiting "
                "for it, in queue order. Exit status 1 if nobody holds it."
            ),
            epilog=f"{JSON_FORMAT}\n\n{EXIT_STATUS}",
            formatter_class=raw,
        )
        show.add_argument("name", metavar="NAME", type=lock_name, help="The exact lock name.")
        _add_using(show)
        show.add_argument("--json", action="store_true", help="Write JSON instead of text.")

        release = sub.add_parser(
            "release",
            help="Force-release one lock, after confirmation.",
            description="Free the lock named exactly NAME (put -- before a name that starts "
            "with -): show its holders, ask for confirmation, then remove exactly those holders "
            "(one that took the lock since is kept). The holders are not told, so free only "
            "locks whose holders are dead or stuck. Each release is logged at WARNING on the "
            "django_redis_lock.audit logger.",
            epilog=EXIT_STATUS,
        )
        release.add_argument("name", metavar="NAME", type=lock_name, help="The exact lock name.")
        release.add_argument(
            "--owner",
            help="Free only this holder (an owner token, as `locks show` prints it); if it "
            "does not hold the lock, nothing is freed and the exit status is 1.",
        )
        release.add_argument(
            "--yes",
            action="store_true",
            help="Do not ask for confirmation (needed when stdin is not a terminal).",
        )
        _add_using(release)

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand = options.get("subcommand") or "list"
        try:
            if subcommand == "show":
                self.show_lock(options)
            elif subcommand == "release":
                self.release_lock(options)
            else:
                self.list_locks(options)
        except (BackendUnavailableError, InvalidLockBackendError) as exc:
            raise CommandError(one_line(exc), returncode=2) from exc

    # list ------------------------------------------------------------------------------------

    def list_locks(self, options: dict[str, Any]) -> None:
        """Write the matching holders, page by page; apply --limit, --older-than and --fail."""
        exact, limit, older = options.get("exact"), options.get("limit"), options.get("older_than")
        pattern = glob_escape(exact) if exact else options.get("pattern") or "*"
        out: Writer = JsonWriter(self.stdout) if options.get("json") else TableWriter(self.stdout)
        page = PAGE_SIZE if limit is None else min(PAGE_SIZE, limit + 1)
        listed, named, truncated = 0, list[str](), False
        errors: list[tuple[str, str]] = []
        for alias, backend in _backends(options.get("using")):
            try:
                for info, readers in scan_counted(backend, pattern, page):
                    if older is not None and info.held_for <= older:
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
        failed = options.get("fail") and listed
        if failed:
            what = "held longer than " + duration(older) if older is not None else "listed"
            more = f" and {listed - len(named)} more" if listed > len(named) else ""
            message = f"{plural(listed, 'lock holder')} {what}: {', '.join(named)}{more}."
            if not errors:
                raise CommandError(message, returncode=1)
            self.stderr.write(message)
        if errors:
            raise CommandError("; ".join(f"alias {a!r}: {e}" for a, e in errors), returncode=2)

    # show ------------------------------------------------------------------------------------

    def show_lock(self, options: dict[str, Any]) -> None:
        """Write every holder of one lock in full; exit 1 when nobody holds it."""
        name: str = options["name"]
        found: list[tuple[str, BaseLockBackend, list[LockInfo], list[WaiterInfo]]] = []
        errors: list[tuple[str, str]] = []
        for alias, backend in _backends(options.get("using")):
            try:
                holders, waiters = backend.lock_info(name), backend.waiters(name)
            except BackendUnavailableError as exc:
                errors.append((alias, one_line(exc)))
                continue
            if holders:
                found.append((alias, backend, holders, waiters))
        if options.get("json"):
            out = JsonWriter(self.stdout, name=name)
            for alias, _, holders, _ in found:
                for info in holders:
                    out.row(alias, info)
            queued = [(alias, waiter) for alias, _, _, waiters in found for waiter in waiters]
            out.end(listed=0, truncated=False, errors=errors, limit=None, waiters=queued)
        else:
            for alias, backend, holders, waiters in found:
                self._write_lock(name, alias, backend, holders, waiters)
        if errors:
            raise CommandError("; ".join(f"alias {a!r}: {e}" for a, e in errors), returncode=2)
        if not found:
            where = _on(options.get("using"))
            raise CommandError(f"Lock {name!r} is not held{where}.", returncode=1)

    def _write_lock(
        self,
        name: str,
        alias: str,
        backend: BaseLockBackend,
        holders: list[LockInfo],
        waiters: list[WaiterInfo],
    ) -> None:
        """Write one lock's holders in full, then its waiters, one line each, in queue order."""
        self.stdout.write(
            f"Lock {name!r} on alias {alias!r} ({location(backend)}): "
            f"{plural(len(holders), 'holder')}, {len(waiters)} waiting"
        )
        readers = reader_counts(holders).get(name)
        for info in holders:
            self.stdout.write(details(info, readers=readers))
        if waiters:
            self.stdout.write("Waiting, in queue order:")
        for waiter in waiters:
            self.stdout.write(waiter_details(waiter))

    # release ---------------------------------------------------------------------------------

    def release_lock(self, options: dict[str, Any]) -> None:
        """Force-release the holders shown, after confirmation; log who did it."""
        name: str = options["name"]
        targets = _holders_to_free(name, options.get("owner"), options.get("using"))
        count = sum(len(chosen) for _, _, chosen in targets)
        self.stdout.write(f"Force-releasing lock {name!r} frees {plural(count, 'holder')}:")
        for alias, _, chosen in targets:
            for info in chosen:
                self.stdout.write(f"  {alias}: {summary(info)}")
        if not options.get("yes"):
            _confirm(f"Release lock {name!r}? The holders are not told. [y/N] ")
        user, freed_total = _os_user(), 0
        for alias, backend, chosen in targets:
            freed: list[LockInfo] = []
            try:
                for info in chosen:
                    if backend.force_release(name, owner=info.owner):
                        freed.append(info)
                    else:
                        owner = shown(info.owner)
                        self.stdout.write(f"Owner {owner} on {alias} had let go already.")
            finally:  # what was freed is logged even if the backend fails half-way
                if freed:
                    _audit(user, alias, name, freed)
                    owners = "; ".join(summary(info) for info in freed)
                    self.stdout.write(f"Released lock {name!r} on alias {alias!r}: {owners}.")
            freed_total += len(freed)
        if not freed_total:
            raise CommandError(
                f"Nothing was released: the holders of {name!r} let go of it meanwhile.",
                returncode=1,
            )


# Helpers -------------------------------------------------------------------------------------


def _paragraph(text: str) -> str:
    return textwrap.fill(text, width=92)


def _add_using(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--using", metavar="ALIAS", help="Only this alias of LOCKS (default: every alias)."
    )


def _backends(using: str | None) -> Iterator[tuple[str, BaseLockBackend]]:
    for alias in [using] if using else list(locks):
        yield alias, locks[alias]


def _on(using: str | None) -> str:
    return f" on alias {using!r}" if using else ""


# Releasing -----------------------------------------------------------------------------------


def _holders_to_free(
    name: str, owner: str | None, using: str | None
) -> list[tuple[str, BaseLockBackend, list[LockInfo]]]:
    """Return, per alias, the holders of ``name`` to free (only ``owner``, if given)."""
    targets: list[tuple[str, BaseLockBackend, list[LockInfo]]] = []
    others: list[str] = []
    for alias, backend in _backends(using):
        holders = backend.lock_info(name)
        chosen = [info for info in holders if owner is None or info.owner == owner]
        others += [f"{alias} {shown(info.owner)}" for info in holders if info not in chosen]
        if chosen:
            targets.append((alias, backend, chosen))
    if targets:
        return targets
    where = _on(using)
    if owner is None:
        message = f"Lock {name!r} is not held{where}; nothing was released."
    else:
        held = f"it is held by {', '.join(others)}" if others else "nobody holds it"
        message = (
            f"Owner {owner!r} does not hold lock {name!r}{where} ({held}); nothing was released."
        )
    raise CommandError(message, returncode=1)


def _confirm(prompt: str) -> None:
    """Return if the user at the terminal says yes; raise CommandError otherwise."""
    try:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # stdin was closed
        interactive = False
    if not interactive:
        raise CommandError(
            "Refusing to force-release without confirmation: stdin is not a terminal "
            "(pass --yes to release anyway).",
            returncode=2,
        )
    try:
        answer = input(prompt)
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in {"y", "yes"}:
        raise CommandError("Release declined; nothing was released.", returncode=1)


def _os_user() -> str:
    """Return who runs the command: the login name, else the numeric user id."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no name in the environment or the user database
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def _audit(user: str, alias: str, name: str, freed: list[LockInfo]) -> None:
    task_ids = [task_id(info) for info in freed]
    audit_logger.warning(
        "OS user %r force-released lock %r on alias %r, freeing %s",
        user,
        name,
        alias,
        "; ".join(summary(info) for info in freed),
        extra={
            "os_user": user,
            "lock_alias": alias,
            "lock_name": name,
            "lock_owners": [info.owner for info in freed],
            "task_ids": [one for one in task_ids if one],
        },
    )
