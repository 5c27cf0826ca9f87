"""One run at a time of a management command or a program: the work of ``manage.py locked``.

:func:`run_locked` takes the lock, runs the command as a child process under it (see
``child_process.py``), and frees it when the child ends. The lock's lease is renewed while the
child runs; its metadata says what runs, so ``manage.py locks`` and the admin page show
"migrate on web-3, pid 41". A run that finds the lock held (and does not wait for it) runs
nothing and says who holds it.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from typing import TextIO

from django.conf import settings
from django.core.management import get_commands
from django.core.management.base import CommandError

from ..exceptions import LockError, LockLostError, LockNotOwnedError
from ..handler import locks
from ..listing import describe_holder, duration
from ..lock import Lock
from .child_process import run_child
from .output import escaped

__all__ = ["LockedRun", "held_by", "run_locked"]


@dataclass(frozen=True)
class LockedRun:
    """What ``manage.py locked`` was asked: the lock's options and what to run under it."""

    argv: tuple[str, ...]
    program: bool = False
    name: str | None = None
    wait: bool = False
    timeout: float | None = None
    ttl: float | None = None
    using: str = "default"
    skip_exit_code: int = 0
    min_hold: float = 0.0

    def __post_init__(self) -> None:
        if not self.argv:
            raise CommandError(
                "Nothing to run: give a command after --, as in `manage.py locked -- migrate`."
            )
        if self.timeout is not None and not self.wait:
            raise CommandError("--timeout applies only with --wait (without it, none waits).")
        if not self.program and self.argv[0] not in get_commands():
            raise CommandError(
                f"Unknown command: {self.argv[0]!r}. Type 'manage.py help' for the commands, or "
                "pass --exec to run a program."
            )

    @property
    def lock_name(self) -> str:
        """Return the lock's name: ``--name``, else ``command:<command name>``."""
        return self.name or f"command:{os.path.basename(self.argv[0])}"

    @property
    def child_argv(self) -> list[str]:
        """Return what the child runs: the program, or this project's ``django`` command."""
        if self.program:
            return list(self.argv)
        return [sys.executable, "-m", "django", *self.argv]

    def describe(self) -> str:
        """Return what runs, for the lock's metadata: the command line, shell-quoted."""
        return shlex.join(self.argv)[:500]


def run_locked(run: LockedRun, stderr: TextIO) -> int:
    """Run ``run`` holding its lock; return its exit status, or the skip status.

    Raise :class:`~django.core.management.base.CommandError` for a lock that cannot be
    taken for a reason other than another holder (a backend that does not answer).
    """
    metadata = {"command": run.describe(), "runner": "manage.py locked"}
    held = Lock(
        run.lock_name,
        ttl=run.ttl,
        blocking=run.wait,
        timeout=run.timeout,
        using=run.using,
        min_hold=run.min_hold,
        metadata=metadata,
        auto_renew=True,
        on_lost=lambda lock: stderr.write(
            f"locked: the lock {run.lock_name!r} was lost while {run.describe()} ran: another "
            "run may start before it ends.\n"
        ),
    )
    try:
        acquired = held.acquire()
    except LockError as exc:
        message = f"Could not take the lock {run.lock_name!r}: {exc}"
        raise CommandError(message, returncode=2) from exc
    if not acquired:
        stderr.write(f"locked: skipped {run.describe()}: {_holder(run)}\n")
        return run.skip_exit_code
    status = 1
    try:
        status = run_child(run.child_argv, _child_env(run))
    finally:
        lost = False
        try:
            held.release()
        except (LockLostError, LockNotOwnedError) as exc:
            # The lease ended while the command ran (a wrapper paused meanwhile finds it so
            # only now); on_lost has said so, unless the hold was simply gone.
            lost = True
            if not held.lost:
                stderr.write(f"locked: {exc}\n")
        except LockError as exc:  # the server did not answer: the lock ends with its lease
            stderr.write(f"locked: could not free the lock {run.lock_name!r}: {exc}\n")
        if lost or held.lost:
            # The command ran, but not alone for all of it: never report that as a success.
            status = status or 1
    return status


def _holder(run: LockedRun) -> str:
    """Return who holds the run's lock, in one line: what runs, where, since when."""
    who = held_by(run.using, run.lock_name)
    if who is None:
        return f"the lock {run.lock_name!r} was held (and is free now)"
    return f"the lock {run.lock_name!r} is held by {who}"


def held_by(using: str, name: str) -> str | None:
    """Return who holds lock ``name`` and for how long, for a terminal; None if nobody does."""
    holders = locks[using].lock_info(name)
    if not holders:
        return None
    return f"{escaped(describe_holder(holders[0]))}, for {duration(holders[0].held_for)}"


def _child_env(run: LockedRun) -> dict[str, str] | None:
    """Return the child's environment: a management command finds this project's settings."""
    if run.program:
        return None
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = settings.SETTINGS_MODULE
    path = [entry for entry in sys.path if entry]
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env
