"""Hold a lock for a while, so that the admin's Locks page has something to show."""

from __future__ import annotations

import os
import time
from typing import Any

from django.core.management import BaseCommand, CommandError, CommandParser

from django_redis_lock import LockNotOwnedError, lock, locks

#: How often the command looks whether its lease was taken away (force-released).
CHECK_EVERY = 0.5


class Command(BaseCommand):
    help = (
        "Hold the lock reports:nightly for N minutes, so the admin's Locks page shows it. "
        "Its lease is renewed while the command runs; Ctrl-C releases it early."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--minutes", type=float, default=10.0, help="How long to hold it (default 10)."
        )
        parser.add_argument(
            "--name", default="reports:nightly", help="The lock's name (default reports:nightly)."
        )
        parser.add_argument(
            "--ttl", type=float, default=30.0, help="The lease in seconds, renewed (default 30)."
        )

    def handle(self, *args: Any, minutes: float, name: str, ttl: float, **options: Any) -> None:
        held = lock(
            name,
            ttl=ttl,
            blocking=False,
            auto_renew=True,
            metadata={"started_by": "manage.py hold_lock", "minutes": minutes},
            raise_on_lost=False,
        )
        if not held.acquire():
            owners = ", ".join(
                f"{info.host}, pid {info.pid}" for info in locks["default"].lock_info(name)
            )
            raise CommandError(f"{name} is held already, by {owners or 'someone else'}.")
        self.stdout.write(
            f"Holding {name} (fencing token {held.fencing_token}, pid {os.getpid()}) for "
            f"{minutes:g} min; its {ttl:g} s lease is renewed meanwhile.\n"
            "The admin's Locks page (/admin/django_redis_lock/lock/) shows it. "
            "Ctrl-C releases it now."
        )
        self.stdout.flush()
        deadline = time.monotonic() + minutes * 60
        try:
            while time.monotonic() < deadline and not held.lost:
                time.sleep(CHECK_EVERY)
        except KeyboardInterrupt:
            self.stdout.write("Interrupted.")
        if held.lost:
            # What force-release means for a holder: it ran on, unaware, until its renewal
            # found the lease gone.
            self.stdout.write(
                f"{name} was taken from this process (force-released from the admin?); it "
                "kept running without knowing until its lease was renewed."
            )
            return
        try:
            held.release()
        except LockNotOwnedError:
            self.stdout.write(f"{name} was no longer held by this process.")
        else:
            self.stdout.write(f"Released {name}.")
