"""Fixtures of the integration tests: a Celery worker shared by the modules that fit in it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import celery_harness


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
