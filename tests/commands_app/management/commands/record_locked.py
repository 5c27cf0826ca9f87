"""``manage.py record_locked --log FILE [--seconds S]``: ``record_run`` as a LockedCommand.

Its runs never overlap, whoever starts them; a skipped run exits 75.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.core.management.base import CommandParser

from django_redis_lock.management import LockedCommand


class Command(LockedCommand):
    help = "Record a run's start and end, never two runs at once."
    lock_skip_exit_code = 75

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True)
        parser.add_argument("--seconds", type=float, default=1.0)

    def handle(self, *args: Any, **options: Any) -> None:
        with open(options["log"], "a", encoding="utf-8") as file:
            file.write(f"start {os.getpid()} {time.monotonic():.6f}\n")
        time.sleep(options["seconds"])
        with open(options["log"], "a", encoding="utf-8") as file:
            file.write(f"end {os.getpid()} {time.monotonic():.6f}\n")
