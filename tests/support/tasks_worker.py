"""Real django-tasks-db ``db_worker`` processes for the worker tests, and what they record.

A :class:`Pool` migrates a SQLite file, then runs two ``python -m django db_worker`` processes
on it and a client (:mod:`tests.support.tasks_client`) that enqueues, all with
:mod:`tests.support.tasks_worker_settings`: from this checkout, on the session's throw-away
redis-server, under a key prefix of their own. The runs of :mod:`tests.support.tasks` write
their start and end to one log file, with ``time.monotonic()``, which every process on the
machine reads from the same clock; the tests read results straight from the SQLite file.
Worker output goes to ``artifacts/tasks-worker-<n>.log``.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "tests.support.tasks_worker_settings"
TABLE = "django_tasks_database_dbtaskresult"
FINAL = frozenset({"SUCCESSFUL", "FAILED"})

T = TypeVar("T")


@dataclass(frozen=True)
class Line:
    """One line a run logged: its event ("start" or "end"), key, pid, run and monotonic time."""

    event: str
    key: str
    pid: int
    run: str
    at: float


@dataclass(frozen=True)
class Row:
    """One task result, as the database has it."""

    id: str
    task: str
    status: str
    args: list[Any]
    value: Any
    exception: str
    traceback: str
    enqueued_at: dt.datetime
    run_after: dt.datetime | None
    worker_ids: list[str]

    @property
    def final(self) -> bool:
        """Tell whether the task is over: it succeeded or failed."""
        return self.status in FINAL


def poll(probe: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
    """Return the first answer of ``probe`` that is not None; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.01)


class Pool:
    """Two ``db_worker`` processes on one SQLite file, a client enqueueing, and their records."""

    def __init__(self, directory: Path, redis_url: str, *, size: int = 2) -> None:
        self.directory, self.redis_url, self.size = directory, redis_url, size
        self.prefix = f"tasks-{secrets.token_hex(4)}"
        self.database, self.log = directory / "tasks.sqlite3", directory / "runs.log"
        self.workers: dict[int, tuple[str, subprocess.Popen[bytes]]] = {}  # by slot
        self.dead: set[str] = set()  # the ids of the workers killed
        self.client: subprocess.Popen[str] | None = None
        self._outputs: list[IO[bytes]] = []

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "DRL_TASKS_DB": str(self.database),
            "DRL_TASKS_REDIS_URL": self.redis_url,
            "DRL_TASKS_PREFIX": self.prefix,
            "DRL_TASKS_LOG": str(self.log),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }

    def start(self) -> None:
        """Migrate the database, then start the workers and the client."""
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
            cwd=ROOT, env=self.env, check=True, timeout=120,
        )  # fmt: skip
        # Readers never wait for a writer, nor block one: the test reads while workers write.
        with closing(sqlite3.connect(self.database)) as db:
            db.execute("PRAGMA journal_mode=WAL")
        self.log.touch()
        self.client = subprocess.Popen(
            [sys.executable, "-m", "tests.support.tasks_client"],
            cwd=ROOT, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._output("client"), text=True,
        )  # fmt: skip
        self.revive()

    def revive(self) -> None:
        """Start workers until ``size`` of them run, each one once its loop has started."""
        for slot in range(self.size):
            found = self.workers.get(slot)
            if found is not None and found[1].poll() is None:
                continue
            worker_id = f"w{slot}-{secrets.token_hex(8)}"
            self.workers[slot] = worker_id, subprocess.Popen(
                [
                    sys.executable, "-m", "django", "db_worker", "--backend", "db",
                    "--no-startup-delay", "--interval", "0.05", "--no-reload",
                    "--worker-id", worker_id,
                ],
                cwd=ROOT, env=self.env, stdout=self._output(f"worker-{slot}"),
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        for slot, (worker_id, _) in self.workers.items():
            poll(functools.partial(self._started, slot, worker_id), f"worker {worker_id} started")

    def _started(self, slot: int, worker_id: str) -> bool | None:
        output = ROOT / "artifacts" / f"tasks-worker-{slot}.log"
        return f"worker_id={worker_id} " in output.read_text() or None

    def pid(self, worker_id: str) -> int:
        """Return the process id of the worker ``worker_id``."""
        [pid] = [process.pid for found, process in self.workers.values() if found == worker_id]
        return pid

    def kill(self, pid: int) -> float:
        """SIGKILL the worker ``pid``; return the ``time.monotonic()`` just before."""
        [(worker_id, process)] = [found for found in self.workers.values() if found[1].pid == pid]
        at = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.dead.add(worker_id)
        return at

    def stop(self) -> None:
        """Stop the workers (warm) and the client."""
        for _, process in self.workers.values():
            process.terminate()
        for _, process in self.workers.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.client is not None:
            assert self.client.stdin is not None
            assert self.client.stdout is not None
            self.client.stdin.close()
            self.client.wait(20)
            self.client.stdout.close()
        for output in self._outputs:
            output.close()

    def _output(self, name: str) -> IO[bytes]:
        (ROOT / "artifacts").mkdir(exist_ok=True)
        output = open(ROOT / "artifacts" / f"tasks-{name}.log", "ab")  # noqa: SIM115
        self._outputs.append(output)
        return output

    # Enqueueing

    def enqueue(self, *calls: dict[str, Any]) -> list[dict[str, Any]]:
        """Enqueue ``calls`` (see :func:`call`) at once; return an outcome per call."""
        assert self.client is not None
        assert self.client.stdin is not None
        assert self.client.stdout is not None
        self.client.stdin.write(json.dumps(list(calls)) + "\n")
        self.client.stdin.flush()
        answer = self.client.stdout.readline()
        assert answer, "the client died: see artifacts/tasks-client.log"
        outcomes: list[dict[str, Any]] = json.loads(answer)
        return outcomes

    def send(self, task: str, *args: Any, countdown: float | None = None) -> str:
        """Enqueue one task; return its result id (fail if it was refused)."""
        [outcome] = self.enqueue(call(task, *args, countdown=countdown))
        assert "id" in outcome, f"{task}{args} was not enqueued: {outcome}"
        return str(outcome["id"])

    # Records

    def rows(self) -> list[Row]:
        """Return every task result, oldest first."""
        with closing(sqlite3.connect(self.database, timeout=30)) as db:
            found = db.execute(
                "SELECT id, task_path, status, args_kwargs, return_value, exception_class_path,"
                f" traceback, enqueued_at, run_after, worker_ids FROM {TABLE} ORDER BY enqueued_at"
            ).fetchall()
        return [
            Row(
                id=str(uuid.UUID(raw_id)),
                task=path.rsplit(".", 1)[-1],
                status=status,
                args=json.loads(args_kwargs)["args"],
                value=None if value is None else json.loads(value),
                exception=exception,
                traceback=traceback,
                enqueued_at=dt.datetime.fromisoformat(enqueued_at),
                run_after=None if run_after.startswith("9999") else dt.datetime.fromisoformat(
                    run_after
                ),
                worker_ids=json.loads(worker_ids),
            )
            for raw_id, path, status, args_kwargs, value, exception, traceback, enqueued_at,
            run_after, worker_ids in found
        ]  # fmt: skip

    def row(self, result_id: str) -> Row:
        """Return the task result ``result_id``."""
        [found] = [row for row in self.rows() if row.id == result_id]
        return found

    def finished(self, *result_ids: str, timeout: float = 30.0) -> list[Row]:
        """Wait until the task results ``result_ids`` are final; return them."""

        def probe() -> list[Row] | None:
            rows = {row.id: row for row in self.rows()}
            found = [rows[i] for i in result_ids if i in rows and rows[i].final]
            return found if len(found) == len(result_ids) else None

        return poll(probe, f"results {result_ids} final", timeout)

    def lines(self, key: str | None = None) -> list[Line]:
        """Return the lines the runs logged, oldest first; those of ``key`` only if given."""
        found = []
        for text in self.log.read_text(encoding="utf-8").splitlines():
            event, line_key, pid, run, at = text.split(" ")
            if key is None or line_key == key:
                found.append(Line(event, line_key, int(pid), run, float(at)))
        return found

    def logged(self, event: str, key: str, run: str | None = None, timeout: float = 30.0) -> Line:
        """Wait until a run of ``key`` (``run`` if given) logged ``event``; return that line."""

        def probe() -> Line | None:
            for line in self.lines(key):
                if line.event == event and (run is None or line.run == run):
                    return line
            return None

        return poll(probe, f"{event} of {key} {run or ''}", timeout)

    def drain(self, timeout: float = 30.0) -> None:
        """Wait until every task result is final, but those of killed workers."""

        def probe() -> bool | None:
            rows = self.rows()
            dead = [row for row in rows if row.worker_ids and row.worker_ids[-1] in self.dead]
            return all(row.final or row in dead for row in rows) or None

        poll(probe, "every task ran", timeout)


def call(task: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> dict[str, Any]:
    """Return one call for :meth:`Pool.enqueue`: ``task`` of tests.support.tasks, and arguments."""
    return {"task": task, "args": list(args), "kwargs": kwargs, "countdown": countdown}


def spans(lines: list[Line]) -> list[tuple[float, float]]:
    """Return the (start, end) times of the runs that both started and ended, by start."""
    starts = {line.run: line.at for line in lines if line.event == "start"}
    ends = {line.run: line.at for line in lines if line.event == "end"}
    return sorted((starts[run], ends[run]) for run in starts if run in ends)


def assert_no_overlap(found: list[tuple[float, float]]) -> None:
    """Fail if any two of the (start, end) spans, sorted by start, overlap."""
    for (_, end), (start, _) in itertools.pairwise(found):
        assert end <= start, f"two runs overlapped by {end - start:.3f}s: {found}"


@contextmanager
def running(directory: Path, redis_url: str) -> Iterator[Pool]:
    """Run a :class:`Pool` in ``directory`` for the block."""
    pool = Pool(directory, redis_url)
    try:
        pool.start()
        yield pool
    finally:
        pool.stop()
