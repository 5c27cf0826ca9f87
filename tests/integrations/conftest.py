"""Fixtures of the integration tests: a Celery worker shared by the modules that fit in it,
and django-tasks-db workers for each module that asks for them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.support import celery_harness, tasks_worker
from tests.support.helpers import locks_setting
from tests.support.tasks_worker import Pool


@pytest.fixture(scope="package")
def celery_pair(redis_url: str) -> Iterator[dict[str, Any]]:
    """One real prefork worker of two children, for every module whose tests fit in it.

    A test takes it through :func:`tests.support.celery_harness.fresh` (or clears it as
    that does): no event or lock of an earlier test, and the app sending to its queue. A
    module that needs another shape (one child, three, a threads pool, PID namespaces)
    starts its own worker.
    """
    with celery_harness.running_worker(redis_url, "pair", concurrency=2) as worker:
        yield worker


@pytest.fixture(scope="module")
def pool(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    """Run two django-tasks-db workers and a client on a SQLite file for the module."""
    with tasks_worker.running(Path(tmp_path_factory.mktemp("tasks-db")), redis_url) as pool:
        yield pool


@pytest.fixture
def workers(pool: Pool) -> Iterator[Pool]:
    """Give a test both workers running, LOCKS on theirs; wait for its tasks after it."""
    pool.revive()
    with override_settings(LOCKS=locks_setting(pool.redis_url, pool.prefix)):
        yield pool
    pool.drain()
