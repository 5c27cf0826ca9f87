"""A real Celery worker in a subprocess, started and stopped by ``manage.py demo``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from celery import Celery
from django.conf import settings
from django.core.management import CommandError

#: Seconds the worker may take to start answering, and to finish its runs when told to stop.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


class CeleryWorker:
    """``celery -A example worker`` (prefork) on one queue, for the length of a ``with``.

    Its output goes to a temporary file, shown by :meth:`log_tail` when something fails.
    Leaving the ``with`` block stops it as an operator would: SIGTERM, a warm shutdown that
    lets running tasks finish, and SIGKILL for the whole process group if that takes longer
    than ``STOP_TIMEOUT`` seconds.
    """

    def __init__(self, *, redis_url: str, queue: str, concurrency: int = 2) -> None:
        self.redis_url = redis_url
        self.queue = queue
        self.concurrency = concurrency
        # A name of its own, so that only this worker answers the ping, even on a Redis that
        # other workers of the project use too.
        self.nodename = f"example-demo-{os.getpid()}@{socket.gethostname()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (stop() closes it)

    def __enter__(self) -> CeleryWorker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the worker process; it finds Redis, as the settings do, through REDIS_URL."""
        command = [
            sys.executable, "-m", "celery", "-A", "example", "worker",
            "--pool", "prefork", "--concurrency", str(self.concurrency),
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--hostname", self.nodename, "--queues", self.queue, "--loglevel", "INFO",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=Path(settings.BASE_DIR),
            env={**os.environ, "REDIS_URL": self.redis_url},
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # Its own process group: Ctrl-C reaches the demo only, which then stops the
            # worker, and a kill on timeout reaches the worker's pool processes too.
            start_new_session=True,
        )

    def wait_until_ready(self, app: Celery) -> float:
        """Return the seconds until the worker answered a ping; raise if it never does."""
        assert self.process is not None
        started = time.monotonic()
        while time.monotonic() - started < START_TIMEOUT:
            if self.process.poll() is not None:
                raise CommandError(
                    f"The Celery worker exited with status {self.process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            # A ping sent before the worker listens goes unanswered for its whole timeout.
            if app.control.ping(destination=[self.nodename], timeout=0.5):
                return time.monotonic() - started
        raise CommandError(
            f"The Celery worker did not answer within {START_TIMEOUT:g}s:\n{self.log_tail()}"
        )

    def stop(self) -> int | None:
        """Stop the worker (warm shutdown, else SIGKILL); return its exit status."""
        process, self.process = self.process, None
        try:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        finally:
            self.log.close()
        return None if process is None else process.returncode

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines the worker wrote, indented."""
        self.log.flush()
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        return "\n".join(f"    | {line}" for line in text.splitlines()[-lines:])
