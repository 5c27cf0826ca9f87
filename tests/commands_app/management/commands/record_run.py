"""``manage.py record_run --log FILE [--seconds S] [--exit N]``: a command the tests run locked.

It writes "start <pid> <time>" to the log, sleeps, then "end <pid> <time>", and exits with
``--exit``. SIGTERM or SIGINT makes it write "signal-<number> <pid> <time>" and exit 3 at
once. Times are
``time.monotonic()``, which every process of the machine reads from one clock.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Record a run's start and end in a log file, sleeping between them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--log", required=True)
        parser.add_argument("--seconds", type=float, default=1.0)
        parser.add_argument("--exit", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        log = options["log"]

        def note(event: str) -> None:
            with open(log, "a", encoding="utf-8") as file:
                file.write(f"{event} {os.getpid()} {time.monotonic():.6f}\n")

        def stop(signum: int, frame: FrameType | None) -> None:
            note(f"signal-{signum}")
            sys.exit(3)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        note("start")
        time.sleep(options["seconds"])
        note("end")
        if options["exit"]:
            sys.exit(options["exit"])
