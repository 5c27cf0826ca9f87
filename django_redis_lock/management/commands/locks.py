"""``manage.py locks``: list the held locks, show one, force-release one, or list rate limits.

This module is the command line: the subcommands, their options and help, and the exit
status of :data:`EXIT_STATUS`. The work is done by ``list`` and ``show`` in
``management/inspection.py``, by ``release`` in ``management/release.py`` and by ``rates`` in
``management/rates.py``; every failure
is a ``CommandError`` carrying its exit status as ``returncode``, so ``call_command()``
callers see it too.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import BackendUnavailableError, InvalidLockBackendError
from ..arguments import LocksParser, lock_name, seconds, whole_number
from ..inspection import list_locks, show_lock
from ..output import JSON_FORMAT, one_line
from ..rates import RATES_JSON_FORMAT, list_rate_limits
from ..release import release_lock

EXIT_STATUS = """\
exit status: 0 done; 1 a check failed (list --fail listed a lock, show or release found
nothing to show or free, a release was declined); 2 a usage error, a bad LOCKS setting or a
backend that could not be reached (one line on stderr)."""


class Command(BaseCommand):
    """``manage.py locks [list|show|release|rates]``: see the module docstring and ``--help``."""

    help = (
        "List the held locks, show one lock, force-release one, or list the rate limits. With "
        "no subcommand, alone or with options of `list`, it runs `locks list`: `locks --json` "
        "is `locks list --json`."
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
            metavar="{list,show,release,rates}",
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

        rates = sub.add_parser(
            "rates",
            help="List the rate limits with hits in their window.",
            description=_paragraph(
                "List each rate of each rate limit that has hits in its window: alias, name, "
                "rate, the weight used in the window now out of the limit, and when the next "
                "slot frees. A rate limit idle for a whole period is not kept, so not listed."
            ),
            epilog=f"{RATES_JSON_FORMAT}\n\n{EXIT_STATUS}",
            formatter_class=raw,
        )
        _add_using(rates)
        which_rates = rates.add_mutually_exclusive_group()
        which_rates.add_argument(
            "--pattern", metavar="GLOB", help="Only rate limits whose name matches this glob."
        )
        which_rates.add_argument(
            "--exact", metavar="NAME", type=lock_name, help="Only the rate limit named NAME."
        )
        rates.add_argument(
            "--json", action="store_true", help="Write JSON (format below) instead of a table."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        subcommand = options.get("subcommand") or "list"
        using = options.get("using")
        try:
            if subcommand == "show":
                show_lock(
                    self.stdout, options["name"], using=using, as_json=bool(options.get("json"))
                )
            elif subcommand == "rates":
                list_rate_limits(
                    self.stdout,
                    using=using,
                    pattern=options.get("pattern"),
                    exact=options.get("exact"),
                    as_json=bool(options.get("json")),
                )
            elif subcommand == "release":
                release_lock(
                    self.stdout,
                    options["name"],
                    owner=options.get("owner"),
                    using=using,
                    yes=bool(options.get("yes")),
                )
            else:
                list_locks(
                    self.stdout,
                    self.stderr,
                    using=using,
                    pattern=options.get("pattern"),
                    exact=options.get("exact"),
                    as_json=bool(options.get("json")),
                    limit=options.get("limit"),
                    older_than=options.get("older_than"),
                    fail=bool(options.get("fail")),
                )
        except (BackendUnavailableError, InvalidLockBackendError) as exc:
            raise CommandError(one_line(exc), returncode=2) from exc


def _paragraph(text: str) -> str:
    return textwrap.fill(text, width=92)


def _add_using(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--using", metavar="ALIAS", help="Only this alias of LOCKS (default: every alias)."
    )
