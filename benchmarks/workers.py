"""A pool of worker processes for the multi-process benchmarks.

The workers are started once, and each configures Django and opens its own Redis connection,
so starting sixty-four Python processes is paid once per run, not once per scenario. They are
forked from a ``forkserver`` that imported the benchmark's modules once (no state inherited
from this process, as with ``spawn``, but a start in milliseconds, not a second of CPU each);
where there is no ``forkserver``, they are spawned. :meth:`Pool.run` gives some of
them a job: each job prepares (makes its locks), reports ready, and waits for a start time
pushed through Redis, so every process starts its timed part at the same instant.

Workers ignore Ctrl-C (this process handles it, and stops them); they also exit by themselves
if this process disappears.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import redis
from libraries import configure_django

#: How long the pool waits for its workers to start, or for a job's processes to be ready.
STARTUP_TIMEOUT = 120.0
#: Every key a job uses to synchronise its processes starts with this (and the job's id).
SYNC_PREFIX = "bench-sync:"
#: What the forkserver imports once, for every worker it forks.
PRELOAD = [
    "__main__",
    "redis",
    "redis_lock",
    "django_redis_lock.backends.redis",
    "django.db.models",
    "django.core.management",
    "django.template",
]


@dataclass
class Job:
    """What a job function gets: its worker's number, a Redis client, and the start signal."""

    index: int
    client: redis.Redis[bytes]
    job_id: str
    outbox: Any

    def sync_key(self, what: str) -> str:
        """Return the key of the job's synchronisation list ``what`` (deleted after the job)."""
        return f"{SYNC_PREFIX}{self.job_id}:{what}"

    def wait_for_start(self) -> float:
        """Report ready, then wait for the common start time; return it (time.monotonic)."""
        self.outbox.put(("ready", self.index, None))
        reply = self.client.blpop([self.sync_key("start")], timeout=STARTUP_TIMEOUT)
        if reply is None:
            raise RuntimeError("no start signal came")
        start = float(reply[1])
        time.sleep(max(0.0, start - time.monotonic()))
        return start


def serve(index: int, url: str, inbox: Any, outbox: Any) -> None:
    """Run jobs from ``inbox`` until told to stop (``None``) or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # This process's parent (or the forkserver, which exits with it): orphaned once it changes.
    parent = os.getppid()
    client = redis.Redis.from_url(url)
    try:
        configure_django(url)
        from django_redis_lock import locks

        # Connect now: a first acquire that also connected would look slow, or out of order.
        client.ping()
        locks["default"].ping()
        outbox.put(("up", index, None))
        while True:
            try:
                message = inbox.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:
                    return
                continue
            if message is None:
                return
            func, job_id, params = message
            try:
                result = func(Job(index, client, job_id, outbox), **params)
            except Exception:
                outbox.put(("error", index, traceback.format_exc()))
            else:
                outbox.put(("done", index, result))
    finally:
        with contextlib.suppress(Exception):  # closing is best effort: the server may be gone
            from django_redis_lock import locks

            locks.close_all()
        client.close()


def start_context() -> Any:
    """Return the multiprocessing context workers start in: forkserver, else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


class Pool:
    """``size`` worker processes on the Redis server at ``url``."""

    def __init__(self, size: int, url: str) -> None:
        self.size = size
        self.url = url
        self._context = start_context()
        self._outbox: Any = self._context.Queue()
        self._inboxes: list[Any] = []
        self._processes: list[Any] = []
        self._client = redis.Redis.from_url(url)
        self._jobs = 0
        self._closed = False

    def __enter__(self) -> Pool:
        try:
            for index in range(self.size):
                inbox = self._context.Queue()
                process = self._context.Process(
                    target=serve,
                    args=(index, self.url, inbox, self._outbox),
                    name=f"bench-worker-{index}",
                    daemon=True,
                )
                self._inboxes.append(inbox)
                self._processes.append(process)
                process.start()
            self._collect("up", range(self.size), STARTUP_TIMEOUT)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def run(
        self,
        func: Callable[..., Any],
        params: Sequence[dict[str, Any]],
        timeout: float,
        *,
        first: int = 0,
    ) -> list[Any]:
        """Run ``func(job, **params[i])`` in worker ``first + i``, all starting together.

        Return their results. ``timeout`` bounds the timed part, after every worker reported
        ready.
        """
        self._jobs += 1
        job_id = f"{os.getpid()}:{self._jobs}"
        workers = range(first, first + len(params))
        if workers.stop > self.size:
            raise ValueError(f"the pool has {self.size} workers, not {workers.stop}")
        try:
            for index, job_params in zip(workers, params, strict=True):
                self._inboxes[index].put((func, job_id, job_params))
            self._collect("ready", workers, STARTUP_TIMEOUT)
            start = time.monotonic() + 0.1  # time enough for every worker to read it
            self._client.rpush(f"{SYNC_PREFIX}{job_id}:start", *[repr(start)] * len(params))
            return self._collect("done", workers, timeout)
        finally:
            with contextlib.suppress(redis.RedisError):  # the server may be gone (Ctrl-C)
                for key in self._client.scan_iter(match=f"{SYNC_PREFIX}{job_id}:*"):
                    self._client.delete(key)

    def _collect(self, kind: str, workers: range, timeout: float) -> list[Any]:
        results: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(results) < len(workers):
            try:
                got, index, value = self._outbox.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self._processes if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"worker process(es) died: {', '.join(dead)}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"workers did not report {kind!r} within {timeout:g} s"
                    ) from None
                continue
            if got == "error":
                raise RuntimeError(f"worker {index} failed:\n{value}")
            if got != kind:
                raise RuntimeError(f"worker {index} sent {got!r}, expected {kind!r}")
            results[index] = value
        return [results[index] for index in workers]

    def close(self) -> None:
        """Stop every worker: politely, then with SIGTERM, then SIGKILL."""
        if self._closed:
            return
        self._closed = True
        for inbox in self._inboxes:
            with contextlib.suppress(OSError, ValueError):
                inbox.put(None)
        deadline = time.monotonic() + 5.0
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=2.0)
            if process.is_alive():
                process.kill()
                process.join()
        for inbox in [*self._inboxes, self._outbox]:
            inbox.close()
            inbox.cancel_join_thread()  # never hang on a message a dead worker left unread
        self._processes, self._inboxes = [], []
        self._client.close()
