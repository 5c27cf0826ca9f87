"""One worker process of ``manage.py demo``; the demo starts it, you need not."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.management import BaseCommand, CommandError, CommandParser

from django_redis_lock import LockLostError, lock
from shop.state import ACQUIRE_TIMEOUT, LOCK_NAME, demo_key, redis_client, signal, wait_for
from shop.storage import FencedStorage

#: Seconds between reading the counter and writing it back: without the lock, another
#: worker would read the same value meanwhile and one of the two updates would be lost.
WORK = 0.05
#: Seconds of other work between rounds, outside the lock, so the other workers get a turn.
PAUSE = 0.1


class Command(BaseCommand):
    help = "Run one worker of the lock demo (started by `manage.py demo`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "role",
            choices=["rounds", "stale", "takeover"],
            help="rounds: add to the counter under the lock; stale: hold a lease and stall "
            "past its end; takeover: take the lock once the stale holder's lease ends.",
        )
        parser.add_argument("--worker", type=int, required=True, help="This worker's number.")
        parser.add_argument("--rounds", type=int, default=3, help="Rounds of the counter.")
        parser.add_argument("--lease", type=float, default=0.5, help="The stale holder's lease.")

    def say(self, line: str) -> None:
        # Flushed at once, so lines of all processes reach the terminal in the order written.
        self.stdout.write(f"  worker {self.worker} {line}")
        self.stdout.flush()

    def handle(self, *args: Any, role: str, worker: int, **options: Any) -> None:
        self.worker = worker
        # A lost lease is also logged as a warning; the demo tells it in its own words, so
        # the record is kept out of the terminal the story is printed to.
        logging.getLogger("django_redis_lock").addHandler(logging.NullHandler())
        self.client = redis_client()
        try:
            if role == "rounds":
                self.rounds(options["rounds"])
            elif role == "stale":
                self.stale(options["lease"])
            else:
                self.takeover()
        finally:
            self.client.close()

    def rounds(self, rounds: int) -> None:
        """Add one to the shared counter ``rounds`` times, each time under the lock."""
        counter = demo_key("counter")
        signal(self.client, "ready")
        wait_for(self.client, "go")
        for _ in range(rounds):
            with lock(LOCK_NAME, timeout=ACQUIRE_TIMEOUT) as held:
                value = int(self.client.get(counter) or 0)
                time.sleep(WORK)
                self.client.set(counter, value + 1)
                # In the order of holding, for the demo to check that tokens only grow.
                self.client.rpush(demo_key("tokens"), str(held.fencing_token))
                self.say(
                    f"holds {LOCK_NAME} (fencing token {held.fencing_token}): "
                    f"counter {value} -> {value + 1}"
                )
            time.sleep(PAUSE)

    def stale(self, lease: float) -> None:
        """Hold the lock with a short lease, stall until another worker took it, then write."""
        storage = FencedStorage(self.client)
        try:
            # A fixed lease (no renewal): a process frozen by a real pause could not renew
            # it either, and here only the main thread stalls.
            with lock(LOCK_NAME, ttl=lease, timeout=ACQUIRE_TIMEOUT, auto_renew=False) as held:
                token = held.fencing_token
                assert token is not None
                self.say(f"takes {LOCK_NAME} with a {lease:g} s lease, fencing token {token}")
                self.say("stalls, as in a long GC pause, and its lease ends")
                stalled = time.monotonic()
                signal(self.client, "stale-holds")
                wait_for(self.client, "taken-over")
                slept = time.monotonic() - stalled
                self.say(f"wakes up {slept:.1f} s later, sure it still holds the lock")
                written = storage.write(f"written by worker {self.worker}", token=token)
                self.say(
                    f"writes with token {token}: "
                    + ("accepted" if written else "refused, a newer token was accepted")
                )
        except LockLostError:
            self.say("leaves its with block, and LockLostError tells it the lease had ended")
        else:
            raise CommandError(f"Worker {self.worker} kept a lock whose lease had ended.")

    def takeover(self) -> None:
        """Wait for the stale holder, take the lock when its lease ends, and write."""
        storage = FencedStorage(self.client)
        wait_for(self.client, "stale-holds")
        waiting = time.monotonic()
        with lock(LOCK_NAME, timeout=ACQUIRE_TIMEOUT) as held:
            token = held.fencing_token
            assert token is not None
            waited = time.monotonic() - waiting
            self.say(f"waits {waited:.1f} s, then takes {LOCK_NAME} with fencing token {token}")
            written = storage.write(f"written by worker {self.worker}", token=token)
            self.say(f"writes with token {token}: {'accepted' if written else 'refused'}")
        signal(self.client, "taken-over")
