"""``manage.py demo``: worker processes share one lock, and fencing stops a stale holder."""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import BaseCommand, CommandError, CommandParser
from django.test import override_settings

from django_redis_lock import lock
from django_redis_lock.backends.redis import redact_url
from django_redis_lock.testing import RedisServer, RedisServerError
from shop.state import LOCK_NAME, clear, demo_key, redis_client, redis_url, signal, wait_for
from shop.storage import FencedStorage

#: Seconds a worker process may run before the demo gives up on it.
WORKER_TIMEOUT = 30.0
#: The stale holder's lease: short, so the demo does not wait long for it to end.
LEASE = 0.5


class Command(BaseCommand):
    help = (
        "Show worker processes taking turns with one lock, and a storage refusing the late "
        "write of a holder whose lease ended. Uses REDIS_URL, else a throw-away Redis."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workers", type=int, default=2, help="Processes contending for the lock."
        )
        parser.add_argument(
            "--rounds", type=int, default=3, help="Times each process takes the lock."
        )

    def say(self, line: str = "") -> None:
        # Flushed at once: the workers write to the same terminal.
        self.stdout.write(line)
        self.stdout.flush()

    def handle(self, *args: Any, workers: int, rounds: int, **options: Any) -> None:
        if workers < 2 or rounds < 1:
            raise CommandError("--workers must be at least 2 and --rounds at least 1.")
        with contextlib.ExitStack() as stack:
            if os.environ.get("REDIS_URL"):
                self.say(f"Redis: {redact_url(redis_url())} (from REDIS_URL)")
            else:
                try:
                    server = stack.enter_context(RedisServer())
                except RedisServerError as exc:
                    raise CommandError(f"{exc} Or set REDIS_URL.") from exc
                stack.enter_context(override_settings(LOCKS=locks_at(server.url)))
                self.say(f"Redis: a throw-away server at {server.url} (REDIS_URL is unset)")
            self.client = redis_client()
            stack.callback(self.client.close)
            clear(self.client)
            counter = self.show_mutual_exclusion(workers, rounds)
            stale, newest = self.show_fencing()
            self.say()
            self.say("Summary")
            expected = workers * rounds
            verdict = "no lost update" if counter == expected else "UPDATES WERE LOST"
            self.say(f"  counter = {counter}, expected {expected}: {verdict}")
            if stale is None:
                self.say("  stale write ACCEPTED: fencing failed")
            else:
                self.say(f"  stale write refused: token {stale} < {newest}")
            self.say(f"  {LOCK_NAME} is {'still held' if lock(LOCK_NAME).locked() else 'free'}")
        if counter != expected or stale is None:
            raise CommandError("The demo's invariants were violated; see the summary above.")

    def show_mutual_exclusion(self, workers: int, rounds: int) -> int:
        """Run the workers' rounds at the same moment; return the final counter."""
        self.say()
        self.say(f"1. {workers} processes, {rounds} rounds each, one lock: {LOCK_NAME}")
        self.say("   Each round reads a counter in Redis, pauses, and writes it + 1:")
        self.say("   without the lock, two workers could read the same value.")
        self.run_workers(
            [
                ["rounds", "--worker", str(n), "--rounds", str(rounds)]
                for n in range(1, workers + 1)
            ],
            start=True,
        )
        return int(self.client.get(demo_key("counter")) or 0)

    def show_fencing(self) -> tuple[int | None, int | None]:
        """Let a holder stall past its lease; return the refused token and the newest one."""
        self.say()
        self.say("2. A lease that ends too soon")
        self.say(f"   Worker 1 takes {LOCK_NAME} with a {LEASE:g} s lease, then stalls past it.")
        self.say("   The storage accepts a write only with the newest fencing token.")
        self.run_workers(
            [
                ["stale", "--worker", "1", "--lease", str(LEASE)],
                ["takeover", "--worker", "2"],
            ]
        )
        storage = FencedStorage(self.client)
        refused = storage.refused_tokens()
        return (refused[0] if refused else None), storage.highest_token()

    def run_workers(self, argvs: list[list[str]], *, start: bool = False) -> None:
        """Run one ``demo_worker`` process per argument list and wait for all of them.

        With ``start``, the workers wait until every one of them is ready, then begin
        together: starting Python and Django takes longer than a whole round.
        """
        manage = Path(settings.BASE_DIR, "manage.py")
        # The workers find Redis as the settings do: through REDIS_URL.
        env = {**os.environ, "REDIS_URL": redis_url()}
        processes = [
            subprocess.Popen([sys.executable, str(manage), "demo_worker", *argv], env=env)
            for argv in argvs
        ]
        try:
            if start:
                for _ in processes:
                    wait_for(self.client, "ready")
                signal(self.client, "go", times=len(processes))
            codes = [process.wait(timeout=WORKER_TIMEOUT) for process in processes]
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        if any(codes):
            raise CommandError(f"A worker failed (exit codes {codes}).")


def locks_at(url: str) -> dict[str, Any]:
    """Return the ``LOCKS`` setting with the ``default`` backend pointed at ``url``."""
    value = copy.deepcopy(settings.LOCKS)
    value["default"]["OPTIONS"]["url"] = url
    return value
