"""``LockedCommand``: a management command that never runs twice at once, whoever starts it.

For command authors: where ``manage.py locked`` wraps a command from outside, this mixin
makes the command itself take its lock in ``execute()``, with the wrapper's options as class
attributes. The lock is renewed while ``handle()`` runs and freed when it returns or raises.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..conf import DEFAULT_ALIAS
from ..exceptions import LockLostError, LockNotAcquiredError
from ..lock import Lock
from .locked_runs import held_by

__all__ = ["LockedCommand"]


class LockedCommand(BaseCommand):
    """A :class:`~django.core.management.base.BaseCommand` that runs once at a time.

    Subclass it as you would ``BaseCommand``, or put it first among a command's bases. A run
    that finds the lock held skips (one line on stderr names the holder; exit status
    ``lock_skip_exit_code``), or waits with ``lock_wait``, at most ``lock_timeout`` seconds.
    """

    #: The lock's name (None: ``command:<the command's name>``).
    lock_name: str | None = None
    #: Wait for the lock instead of skipping the run.
    lock_wait: bool = False
    #: With ``lock_wait``: wait at most this many seconds (None: as long as it takes).
    lock_timeout: float | None = None
    #: The lease, renewed while the command runs (None: the alias's ``ttl``).
    lock_ttl: float | None = None
    #: The ``LOCKS`` alias.
    lock_using: str = DEFAULT_ALIAS
    #: The exit status of a skipped run (0: a skipped cron run is no alarm).
    lock_skip_exit_code: int = 0
    #: Keep the lock at least this many seconds after the run started.
    lock_min_hold: float = 0.0

    def get_lock_name(self) -> str:
        """Return the lock's name: ``lock_name``, else ``command:<the module's name>``."""
        return self.lock_name or f"command:{type(self).__module__.rsplit('.', 1)[-1]}"

    def execute(self, *args: Any, **options: Any) -> str | None:
        """Run the command holding its lock, or skip it (see the class)."""
        name = self.get_lock_name()
        held = Lock(
            name,
            ttl=self.lock_ttl,
            blocking=self.lock_wait,
            timeout=self.lock_timeout if self.lock_wait else None,
            using=self.lock_using,
            min_hold=self.lock_min_hold,
            metadata={"command": name.removeprefix("command:"), "runner": "LockedCommand"},
        )
        try:
            held._enter()  # renewed while the command runs, as a with block's lock is
        except LockNotAcquiredError:
            who = held_by(self.lock_using, name) or "another run (free now)"
            message = f"Skipped: the lock {name!r} is held by {who}."
            if self.lock_skip_exit_code:
                raise CommandError(message, returncode=self.lock_skip_exit_code) from None
            self.stderr.write(message)
            return None
        try:
            output: str | None = super().execute(*args, **options)
        except BaseException as exc:
            held._leave(exc)
            raise
        try:
            held._leave()
        except LockLostError as exc:  # it ran, but not alone for all of it: no success
            raise CommandError(str(exc), returncode=1) from exc
        return output
