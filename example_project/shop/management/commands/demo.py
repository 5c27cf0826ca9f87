"""``manage.py demo``: one lock across processes, fencing, and single-instance tasks.

The tasks are a Celery task run by a real worker, and a ``django.tasks`` task run on
``ImmediateBackend``, in the demo's own process.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management import BaseCommand, CommandError, CommandParser
from django.test import override_settings

from django_redis_lock import lock, locks
from django_redis_lock.backends.redis import redact_url
from django_redis_lock.testing import RedisServer, RedisServerError
from shop.state import LOCK_NAME, clear, demo_key, redis_client, redis_url, signal, wait_for
from shop.storage import FencedStorage

#: Seconds a worker process may run before the demo gives up on it.
WORKER_TIMEOUT = 30.0
#: The stale holder's lease: short, so the demo does not wait long for it to end.
LEASE = 0.5
#: Seconds the demo waits for a Celery task's result.
RESULT_TIMEOUT = 20.0
#: The billing runs sent at once: three for one customer, one for another.
BILLED = (42, 42, 42, 7)

if TYPE_CHECKING:
    from celery.result import AsyncResult


@dataclass
class CeleryOutcome:
    """What part 3 saw: runs and skipped runs by customer, and of the nightly report."""

    runs: dict[int, int]
    skipped: dict[int, int]
    report_runs: int
    report_refused: int

    def counts(self) -> str:
        """Return the runs and skipped runs, for the summary."""
        runs, skipped = self.runs, self.skipped
        text = f"customer 42: {plural(runs[42], 'run')}, {skipped[42]} skipped; "
        text += f"customer 7: {plural(runs[7], 'run')}"
        if skipped[7]:
            text += f", {skipped[7]} skipped"
        return (
            f"{text}; nightly report: {plural(self.report_runs, 'run')}, "
            f"{self.report_refused} not sent"
        )

    def holds(self) -> bool:
        """Return whether each lock let exactly one run through, skipping the duplicates."""
        return (
            self.runs == {42: 1, 7: 1}
            and self.skipped == {42: 2, 7: 0}
            and (self.report_runs, self.report_refused) == (1, 1)
        )


@dataclass
class TasksOutcome:
    """What the django.tasks part saw: the refreshes of one supplier, and the nested one."""

    runs: int
    nested: str

    def counts(self) -> str:
        """Return the runs and what became of the nested refresh, for the summary."""
        runs = plural(self.runs, "run")
        return f"refresh_catalog(acme): {runs}, the one enqueued from inside a run {self.nested}"

    def holds(self) -> bool:
        """Return whether the two refreshes ran and the one enqueued from inside was skipped."""
        return (self.runs, self.nested) == (2, "skipped")


class Messages(logging.Handler):
    """Keep the messages of the records it handles, for the demo to tell them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class Command(BaseCommand):
    help = (
        "Show worker processes taking turns with one lock, a storage refusing the late write "
        "of a holder whose lease ended, a Celery task that runs once at a time per customer, "
        "and a django.tasks task that does the same per supplier. Uses REDIS_URL, else a "
        "throw-away Redis."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workers", type=int, default=2, help="Processes contending for the lock."
        )
        parser.add_argument(
            "--rounds", type=int, default=3, help="Times each process takes the lock."
        )
        parser.add_argument(
            "--skip-celery",
            action="store_true",
            help="Leave out part 3, which starts a Celery worker.",
        )

    def say(self, line: str = "") -> None:
        # Flushed at once: the workers write to the same terminal.
        self.stdout.write(line)
        self.stdout.flush()

    def tell(self, text: str, indent: str = "   ") -> None:
        """Print ``text`` as a paragraph of the story: indented, wrapped to 88 columns."""
        self.say(textwrap.fill(text, width=88, initial_indent=indent, subsequent_indent=indent))

    def handle(
        self, *args: Any, workers: int, rounds: int, skip_celery: bool, **options: Any
    ) -> None:
        if workers < 2 or rounds < 1:
            raise CommandError("--workers must be at least 2 and --rounds at least 1.")
        check_installed(celery=not skip_celery)
        parts = 3 if skip_celery else 4
        self.say(f"The django-redis-lock demo, in {parts} parts: real processes, one Redis.")
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
            expected = workers * rounds
            counter, growing = self.show_mutual_exclusion(workers, rounds)
            stale, newest = self.show_fencing()
            celery = None if skip_celery else self.show_single_instance()
            tasks = self.show_django_task(parts)
            self.say()
            self.say("Summary")
            verdict = "no lost update" if counter == expected else "UPDATES WERE LOST"
            if not growing:
                verdict += ", but fencing tokens DID NOT GROW"
            self.say(f"  1. counter = {counter}, expected {expected}: {verdict}")
            if stale is None:
                self.say("  2. stale write ACCEPTED: fencing failed")
            else:
                self.say(f"  2. stale write refused: token {stale} < {newest}")
            if celery is not None:
                self.say(f"  3. {celery.counts()}")
            self.say(f"  {parts}. {tasks.counts()}")
            names = [LOCK_NAME] + ([] if celery is None else [bill_lock(c) for c in (42, 7)])
            names.append(catalog_lock("acme"))
            held = [name for name in names if locks["default"].locked(name)]
            if held:
                self.say(f"  STILL HELD: {', '.join(held)}")
            else:
                self.say(
                    f"  every lock the demo took is free again ({plural(len(names), 'lock')})"
                )
            self.leave_a_lock_for_the_admin()
        failed = counter != expected or not growing or stale is None or not tasks.holds()
        if failed or (celery is not None and not celery.holds()):
            raise CommandError("The demo's invariants were violated; see the summary above.")

    def leave_a_lock_for_the_admin(self) -> None:
        """On a Redis that outlives the demo, leave a long-held lock for the admin to show."""
        self.say()
        if not os.environ.get("REDIS_URL"):
            self.say("To see held locks in the admin, run the demo with REDIS_URL set, or hold")
            self.say("one with `manage.py hold_lock` (see example_project/README.md).")
            return
        # A fixed ten-minute lease, no renewal: the lock stays after this process exits, and
        # its TTL counts down on the admin's Locks page until it ends or is force-released.
        held = lock(
            "reports:nightly",
            ttl=600,
            blocking=False,
            auto_renew=False,
            metadata={"left_by": "manage.py demo", "purpose": "shown in the admin's Locks page"},
        )
        if held.acquire():
            self.say("Left the lock reports:nightly held for 10 minutes: open the admin's")
            self.say("Locks page to see it, its TTL counting down, and to force-release it.")
        else:
            self.say("reports:nightly is held already: the admin's Locks page shows it.")

    def show_mutual_exclusion(self, workers: int, rounds: int) -> tuple[int, bool]:
        """Run the workers' rounds at the same moment.

        Return the final counter, and whether each holder's fencing token was larger than the
        one before it.
        """
        self.say()
        self.say(f"1. Mutual exclusion: {workers} processes, one lock")
        self.tell(
            f"{workers} worker processes each add 1 to a counter in Redis, {rounds} times. An "
            "addition reads the counter, pauses, and writes it back plus one: without a lock, "
            "two workers could read the same value and one addition would be lost. Each "
            f"addition is made holding the lock {LOCK_NAME}."
        )
        self.run_workers(
            [
                ["rounds", "--worker", str(n), "--rounds", str(rounds)]
                for n in range(1, workers + 1)
            ],
            start=True,
        )
        counter = int(self.client.get(demo_key("counter")) or 0)
        tokens = [int(token) for token in self.client.lrange(demo_key("tokens"), 0, -1)]
        growing = tokens == sorted(set(tokens))
        expected = workers * rounds
        if counter == expected:
            self.tell(
                f"So: the counter is {counter}, {workers} workers x {rounds} additions: the "
                "workers took turns and no addition was lost. "
                + (
                    "Each new holder got a larger fencing token than the one before it."
                    if growing
                    else "But fencing tokens DID NOT GROW with each holder."
                )
            )
        else:
            self.tell(f"So: the counter is {counter}, not {expected}: UPDATES WERE LOST.")
        return counter, growing

    def show_fencing(self) -> tuple[int | None, int | None]:
        """Let a holder stall past its lease; return the refused token and the newest one."""
        self.say()
        self.say("2. Fencing: a holder whose lease ended cannot write")
        self.tell(
            "A lease can end while its holder is paused. Worker 1 takes the lock with a "
            f"{LEASE:g} s lease and stalls past it, so worker 2 takes it. Both then write to a "
            "storage that accepts only the newest fencing token it has seen."
        )
        self.run_workers(
            [
                ["stale", "--worker", "1", "--lease", str(LEASE)],
                ["takeover", "--worker", "2"],
            ]
        )
        storage = FencedStorage(self.client)
        refused = storage.refused_tokens()
        stale, newest = (refused[0] if refused else None), storage.highest_token()
        if stale is None:
            self.tell("So: the stale write was ACCEPTED: fencing failed.")
        else:
            self.tell(
                "So: the storage refused the late write of worker 1, whose token was older. "
                "The lease alone could not stop that write; the fencing token did. And the "
                "lock told worker 1 that it had lost its lease."
            )
        return stale, newest

    def show_single_instance(self) -> CeleryOutcome:
        """Send billing runs and reports to a real Celery worker at once; return what ran."""
        from example.celery import app

        from shop.celery_worker import CeleryWorker

        self.say()
        self.say("3. Celery: a task that never runs twice at once for one customer")
        self.tell(
            'shop.tasks.bill_customer has @single_instance(key="{customer_id}", '
            'on_conflict="skip"): a run holds the lock of its customer while it bills, and a '
            "run that finds that lock held is skipped and returns None."
        )
        # The demo sends its tasks where the worker takes them: to the Redis of the locks.
        app.conf.update(broker_url=redis_url(), result_backend=redis_url())
        sent: list[AsyncResult] = []
        with CeleryWorker(redis_url=redis_url(), queue=demo_key("celery")) as worker:
            waited = worker.wait_until_ready(app)
            self.say(
                f"   Started a Celery worker with {worker.concurrency} prefork processes; it "
                f"answered after {waited:.1f} s."
            )
            try:
                outcome = self.send_tasks(worker.queue, sent)
            except Exception as exc:
                raise CommandError(
                    f"Part 3 failed: {exc}\nThe worker's last lines:\n{worker.log_tail()}"
                ) from exc
            finally:
                forget(sent)
        self.say("   Stopped the worker as an operator would: SIGTERM, a warm shutdown.")
        if outcome.holds():
            self.tell(
                "So: each customer was billed once, however many duplicates were sent, and one "
                "customer's lock did not stop another customer's run. One nightly report was "
                "made, and its duplicate was never sent."
            )
        else:
            self.tell("So: expected one run per customer and one report: @single_instance FAILED.")
        return outcome

    def send_tasks(self, queue: str, sent: list[AsyncResult]) -> CeleryOutcome:
        """Bill customers 42 (three times) and 7 at once, then ask for two reports at once.

        Every result sent is added to ``sent``, for the caller to forget.
        """
        runs, skipped = self.bill(queue, sent)
        self.tell(
            'shop.tasks.nightly_report has @single_instance(enqueue="skip") with no key: one '
            "lock for the whole task, and a send is refused while a report is queued or "
            "running. Sent it twice at the same moment:"
        )
        made, refused = self.report(queue, sent)
        return CeleryOutcome(runs, skipped, report_runs=made, report_refused=refused)

    def bill(self, queue: str, sent: list[AsyncResult]) -> tuple[dict[int, int], dict[int, int]]:
        """Send the billing runs of ``BILLED`` at once; return the runs and skips by customer."""
        from shop.tasks import bill_customer, billing_runs

        billing = [(c, bill_customer.apply_async((c,), queue=queue)) for c in BILLED]
        sent += [result for _, result in billing]
        self.say("   Sent bill_customer(42) three times and bill_customer(7) once, all at once.")
        wait_for(self.client, "billing:42")
        self.show_holder(bill_lock(42))
        wait_for(self.client, "billing:7")
        self.say("   Locks held when customer 7's run started:")
        held = locks["default"].iter_locks(bill_lock("*"))
        for info in sorted(held, key=lambda info: info.name):
            task_id = str(info.metadata.get("task_id"))
            pid = info.metadata.get("worker_pid")
            self.say(f"     {info.name:<36} task {task_id[:8]}  worker pid {pid}")

        self.say("   What the four runs returned:")
        skipped = dict.fromkeys(BILLED, 0)
        for customer, result in billing:
            value = result.get(timeout=RESULT_TIMEOUT)
            if value is None:
                skipped[customer] += 1
                about = f"None: skipped, customer {customer} was being billed"
            else:
                about = f"billed by worker pid {value['worker_pid']}"
            call = f"bill_customer({customer})"
            self.say(f"     {call:<17} task {result.id[:8]}  {about}")
        # Counted from what the runs recorded, not from what they returned.
        runs = dict.fromkeys(BILLED, 0)
        done: dict[int, dict[str, Any]] = {}
        for run in billing_runs(self.client):
            runs[run["customer_id"]] += 1
            done[run["customer_id"]] = run
        if runs == {42: 1, 7: 1}:
            first, second = done[42], done[7]
            together = first["started"] < second["ended"] and second["started"] < first["ended"]
            self.say(
                "   Customers 42 and 7 were billed at the same time: each has a lock of its own."
                if together
                else "   Customer 7 was billed after customer 42: the worker had no free process."
            )
        return runs, skipped

    def report(self, queue: str, sent: list[AsyncResult]) -> tuple[int, int]:
        """Send two nightly reports at once; return how many ran, and how many were not sent."""
        from shop.tasks import nightly_report

        pending = [nightly_report.apply_async(queue=queue) for _ in range(2)]
        sent += pending
        first_ids: set[str] = set()
        made = refused = 0
        for result in pending:
            if result.id in first_ids:
                refused += 1
                about = "not sent: the first one's result, as it was queued"
            else:
                first_ids.add(result.id)
                report = result.get(timeout=RESULT_TIMEOUT)
                made += report is not None
                about = "None: skipped, a report was being made" if report is None else "made it"
            self.say(f"     {'nightly_report()':<17} task {result.id[:8]}  {about}")
        return made, refused

    def show_holder(self, name: str) -> None:
        """Print who holds the lock ``name``, as the lock records it."""
        self.say("   While customer 42 is billed, its lock says who holds it:")
        self.say(f'     locks["default"].lock_info("{name}")')
        holders = locks["default"].lock_info(name)
        if not holders:
            self.say("     (free again: the run ended before the demo looked)")
        for info in holders:
            data = info.metadata
            self.say(f"       task id     {data.get('task_id')}")
            self.say(f"       task name   {data.get('task_name')}")
            self.say(f"       worker      {data.get('hostname')}, pid {data.get('worker_pid')}")
            self.say(f"       args        {data.get('args')}")
            self.say(f"       lease       {info.ttl:.1f} s left, renewed while the run lasts")

    def show_django_task(self, number: int) -> TasksOutcome:
        """Refresh a catalog that enqueues its own refresh again; then refresh it once more."""
        from shop.jobs import lock_of, outcome, refresh_catalog

        self.say()
        self.say(f"{number}. Django tasks: a task that never runs twice at once for one supplier")
        self.tell(
            "shop.jobs.refresh_catalog is a django.tasks task with @single_instance("
            'key="{supplier}", on_conflict="skip"). TASKS names ImmediateBackend, which runs '
            "a task inside enqueue(), in this process: no worker is needed. Refreshing acme "
            "tells the supplier, whose webhook enqueues another refresh of acme at once: from "
            "inside the first one's body, while it holds the lock."
        )
        # The skipped run logs a warning: the demo tells it, instead of letting it go to stderr.
        logged = Messages()
        logger = logging.getLogger("django_redis_lock")
        logger.addHandler(logged)
        try:
            first = refresh_catalog.enqueue("acme", notify=True)
            later = refresh_catalog.enqueue("acme")
        finally:
            logger.removeHandler(logged)
        value = first.return_value or {}
        self.say(
            f'   refresh_catalog.enqueue("acme", notify=True): result {first.id[:8]}, '
            f"{outcome(first)}"
        )
        self.say(f'     while it ran, lock_info("{lock_of("acme")}") said:')
        for holder in value.get("holders", []):
            self.tell(holder, indent="       ")
        again = value.get("again") or {"id": "?", "outcome": "not enqueued"}
        self.say(
            f'     from its body, refresh_catalog.enqueue("acme"): result {again["id"][:8]}, '
            f"{again['outcome']}"
        )
        for message in logged.messages:
            self.tell(f"the skipped run logged: {message}", indent="       ")
        self.say(
            f'   refresh_catalog.enqueue("acme") once it had ended: result {later.id[:8]}, '
            f"{outcome(later)}"
        )
        runs = [outcome(first), again["outcome"], outcome(later)].count("ran")
        result = TasksOutcome(runs=runs, nested=again["outcome"])
        if result.holds():
            self.tell(
                "So: the refresh enqueued from inside the first one ran under an owner of its "
                "own, so it did not share the first one's hold: it found the lock held and was "
                "skipped. The next refresh, enqueued once the first had ended, ran: the lock "
                "keeps runs apart, it does not stop them for good."
            )
        else:
            self.tell("So: expected two refreshes and one skipped: @single_instance FAILED.")
        return result

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


def check_installed(*, celery: bool) -> None:
    """Raise CommandError if a package that a part of the demo needs is missing."""
    if celery and find_spec("celery") is None:
        raise CommandError(
            "Part 3 needs Celery: pip install 'django-redis-lock[example]', or pass --skip-celery."
        )
    if find_spec("django.tasks") is None and find_spec("django_tasks") is None:
        raise CommandError(
            "The django.tasks part needs Django 6.0, or the django-tasks backport on "
            "Django 5.2: pip install 'django-redis-lock[example]'."
        )


def locks_at(url: str) -> dict[str, Any]:
    """Return the ``LOCKS`` setting with the ``default`` backend pointed at ``url``."""
    value = copy.deepcopy(settings.LOCKS)
    value["default"]["OPTIONS"]["url"] = url
    return value


def bill_lock(customer: int | str) -> str:
    """Return the name of the lock ``@single_instance`` takes to bill ``customer``."""
    return f"celery:shop.tasks.bill_customer:{customer}"


def catalog_lock(supplier: str) -> str:
    """Return the name of the lock ``@single_instance`` takes to refresh ``supplier``."""
    return f"task:shop.jobs.refresh_catalog:{supplier}"


def forget(results: list[AsyncResult]) -> None:
    """Delete ``results`` from the result backend, and stop listening for them.

    Done while Redis still runs: a result left pending would try to unsubscribe when it is
    garbage-collected, and retry for a long while if the throw-away Redis is gone by then.
    """
    for result in results:
        with contextlib.suppress(Exception):
            result.forget()


def plural(count: int, noun: str) -> str:
    """Return ``"1 run"``, ``"2 runs"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
