"""Real Celery workers on ``tests.support.celery_app`` for the worker tests, and their records.

A worker is ``celery -A tests.support.celery_app worker`` in a subprocess, started from this
checkout (its ``PYTHONPATH`` and working directory), on the session's throw-away redis-server,
with a key prefix and a queue of its own. Its output goes to ``artifacts/celery-<name>.log``.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import redis as redis_py

ROOT = Path(__file__).resolve().parents[2]


def celery_app(redis_url: str, prefix: str) -> ModuleType:
    """Return ``tests.support.celery_app``, sending to ``redis_url``, recording at ``prefix``."""
    os.environ["DRL_CELERY_URL"], os.environ["DRL_CELERY_PREFIX"] = redis_url, prefix
    from tests.support import celery_app as module

    module.app.conf.update(
        broker_url=redis_url, result_backend=redis_url, task_default_queue=f"{prefix}-queue"
    )
    return module


@contextmanager
def running_worker(redis_url: str, name: str, *, concurrency: int = 2) -> Iterator[dict[str, Any]]:
    """Run a worker (see :func:`celery_worker`) under a new prefix for a test module.

    Yield what its tests use: the app module, a client of the server, the prefix and the URL.
    """
    prefix = f"{name}-{secrets.token_hex(4)}"
    with celery_worker(redis_url, prefix, name=name, concurrency=concurrency):
        client = redis_py.Redis.from_url(redis_url)
        app = celery_app(redis_url, prefix)
        yield {"app": app, "client": client, "prefix": prefix, "url": redis_url}
        client.close()


@contextmanager
def fresh(worker: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Give one test the worker of :func:`running_worker` with no event or lock left over.

    The app sends to the worker's queue again (a worker shared by several modules may have
    seen another module's worker started since), and the package's ``LOCKS`` point at the
    worker's prefix for the test.
    """
    from django.test import override_settings

    from tests.support.helpers import locks_setting

    celery_app(worker["url"], worker["prefix"])
    clear(worker["client"], worker["prefix"])
    with override_settings(LOCKS=locks_setting(worker["url"], worker["prefix"])):
        yield worker
    # The test's results are garbage now: let them unsubscribe (Celery 5.6 does so in
    # __del__) while the server is still running, not at the end of the session.
    gc.collect()


@contextmanager
def celery_worker(
    redis_url: str,
    prefix: str,
    *,
    name: str = "worker",
    pool: str = "prefork",
    concurrency: int = 2,
    queue: str | None = None,
    wrapper: Sequence[str] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a worker for the block, once it has answered a ping; stop it (warm) after.

    ``queue`` defaults to the prefix's default queue. ``wrapper`` is a command that runs the
    worker as its one child (such as ``unshare --fork``): the worker is stopped through it.
    """
    queue = queue or f"{prefix}-queue"
    app = celery_app(redis_url, prefix)
    env = {
        **os.environ,
        "DRL_CELERY_URL": redis_url,
        "DRL_CELERY_PREFIX": prefix,
        "DRL_CELERY_WORKER": "1",
        # This checkout first, then whatever the tests were given (another Celery, say).
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    (ROOT / "artifacts").mkdir(exist_ok=True)
    log = open(ROOT / "artifacts" / f"celery-{name}.log", "ab")  # noqa: SIM115
    process = subprocess.Popen(
        [
            *wrapper, sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "worker",
            "--pool", pool, "--concurrency", str(concurrency), "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--hostname", f"{prefix}-{name}@%h", "--queues", queue,
        ],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        pong = app.ping.apply_async(queue=queue).get(timeout=60)
        assert pong == "pong", f"the worker {name} did not start"
        yield process
    finally:
        _stop(process, wrapped=bool(wrapper))
        log.close()


def celery_beat(
    redis_url: str, prefix: str, directory: Path, *, name: str, ttl: float
) -> subprocess.Popen[bytes]:
    """Start ``celery beat -S django_redis_lock.celery.beat:LeaderScheduler`` as node ``name``.

    Its schedule file is in ``directory``; its one entry is due every second (see celery_app),
    and its leader's lease is ``ttl``. The caller stops it (:func:`stop_beat`).
    """
    env = {
        **os.environ,
        "DRL_CELERY_URL": redis_url,
        "DRL_CELERY_PREFIX": prefix,
        "DRL_CELERY_BEAT_TTL": str(ttl),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    (ROOT / "artifacts").mkdir(exist_ok=True)
    with open(ROOT / "artifacts" / f"celery-beat-{name}.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "beat",
                "-S", "django_redis_lock.celery.beat:LeaderScheduler", "--loglevel", "INFO",
                "--schedule", str(directory / f"beat-{name}"),
                "--pidfile", str(directory / f"beat-{name}.pid"),
            ],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def stop_beat(process: subprocess.Popen[bytes]) -> None:
    """Stop a beat node (warm), or kill it if it does not stop."""
    _stop(process, wrapped=False)


def beat_messages(client: redis_py.Redis, prefix: str) -> list[dict[str, Any]]:
    """Return the leader header of each message beat sent (see django_redis_lock.celery.beat).

    Oldest first: the broker's queue is a list pushed on the left.
    """
    found = []
    for raw in reversed(client.lrange(f"{prefix}-beat", 0, -1)):
        headers = json.loads(raw)["headers"]
        found.append(headers["django_redis_lock_beat"])
    return found


def _stop(process: subprocess.Popen[bytes], *, wrapped: bool) -> None:
    target = process.pid
    if wrapped:
        # The wrapper ignores SIGTERM; the worker is its only child.
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        found = children.read_text().split() if children.exists() else []
        target = int(found[0]) if found else process.pid
    try:
        os.kill(target, signal.SIGTERM)
        process.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def clear(client: redis_py.Redis, prefix: str) -> None:
    """Forget the recorded events and every lock left under ``prefix``."""
    client.delete(f"{prefix}:events")
    for key in client.scan_iter(match=f"{prefix}:{{*"):
        if not key.endswith(b":f"):
            client.delete(key)


def events(client: redis_py.Redis, prefix: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Return the events the runs recorded, oldest first, of one ``kind`` or all."""
    found = [json.loads(entry) for entry in client.lrange(f"{prefix}:events", 0, -1)]
    return [e for e in found if kind is None or e["event"] == kind]


def wait_for_events(
    client: redis_py.Redis, prefix: str, kind: str, count: int, timeout: float = 30, **match: Any
) -> list[dict[str, Any]]:
    """Wait until ``count`` events of ``kind`` with the ``match`` fields are recorded."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            e
            for e in events(client, prefix, kind)
            if all(e.get(field) == value for field, value in match.items())
        ]
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(found)} of {count} {kind} events {match} within {timeout}s: {found}"
            )
        time.sleep(0.02)


def spans(found: list[dict[str, Any]], key: str = "run") -> list[tuple[int, int]]:
    """Return the (start, end) times of the runs in ``found``, told apart by ``key``."""
    starts = {e[key]: e["at"] for e in found if e["event"] == "start"}
    ends = {e[key]: e["at"] for e in found if e["event"] == "end"}
    return sorted((starts[run], ends[run]) for run in starts if run in ends)


def assert_no_overlap(found: list[tuple[int, int]]) -> None:
    """Fail if any two of the (start, end) spans overlap."""
    for (_, end), (start, _) in itertools.pairwise(found):
        assert end <= start, "two runs overlapped"
