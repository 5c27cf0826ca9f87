"""``manage.py locked [options] -- <command> [args...]``: one run at a time of a command.

The command line only: its options, their checks, and the exit status. The run is done by
``management/locked_runs.py``; the child process by ``management/child_process.py``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..._core.validation import validate_min_hold, validate_timeout, validate_ttl
from ...conf import DEFAULT_ALIAS
from ...exceptions import InvalidLockArgumentError
from ..locked_runs import LockedRun, run_locked

EPILOG = """\
exit status: the command's own (128 + N when a signal N ended it); --skip-exit-code (0 by
default) when another run holds the lock; 1 when the command succeeded but its lock was lost
while it ran; 2 for a usage error or a backend that could not be reached."""


class Command(BaseCommand):
    """``manage.py locked``: see the module docstring and ``--help``."""

    help = (
        "Run a management command (or, with --exec, a program) under a lock, so that only one "
        "run of it runs at a time, on every machine that shares the lock's Redis. Put the "
        "command after --: `manage.py locked --wait -- migrate`."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        kwargs.setdefault("epilog", EPILOG)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name", help="The lock's name (default: command:<the command's name>)."
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="Wait for the lock instead of skipping the run when another run holds it.",
        )
        parser.add_argument(
            "--timeout", type=float, metavar="S", help="With --wait: wait at most S seconds."
        )
        parser.add_argument(
            "--ttl",
            type=float,
            metavar="S",
            help="The lock's lease, renewed while the command runs (default: the alias's).",
        )
        parser.add_argument(
            "--using", default=DEFAULT_ALIAS, metavar="ALIAS", help="The LOCKS alias."
        )
        parser.add_argument(
            "--skip-exit-code",
            type=int,
            default=0,
            metavar="N",
            help="The exit status of a skipped run (default 0: a skipped cron run is no alarm).",
        )
        parser.add_argument(
            "--min-hold",
            type=float,
            default=0.0,
            metavar="S",
            help="Keep the lock at least S seconds after the run started: one run per window.",
        )
        parser.add_argument(
            "--exec",
            action="store_true",
            dest="program",
            help="Run a program (the rest of the line) rather than a management command.",
        )
        parser.add_argument(
            "argv",
            nargs=argparse.REMAINDER,
            metavar="-- COMMAND [ARGS...]",
            help="What to run, after --.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        argv = list(options["argv"])
        if argv[:1] == ["--"]:
            argv = argv[1:]
        try:
            run = LockedRun(
                argv=tuple(argv),
                program=options["program"],
                name=options["name"],
                wait=options["wait"],
                timeout=validate_timeout(options["timeout"], argument="--timeout"),
                ttl=_lease(options["ttl"]),
                using=options["using"],
                skip_exit_code=options["skip_exit_code"],
                min_hold=validate_min_hold(options["min_hold"]),
            )
        except (InvalidLockArgumentError, CommandError) as exc:  # a usage error: status 2
            raise CommandError(str(exc), returncode=2) from None
        status = run_locked(run, sys.stderr)
        if status:
            sys.exit(status)


def _lease(value: float | None) -> float | None:
    return None if value is None else validate_ttl(value, argument="--ttl")
