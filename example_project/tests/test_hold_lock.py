"""``manage.py hold_lock``: the long-held lock the example's admin shows."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from shop.management.commands.hold_lock import Command

from django_redis_lock import locks
from django_redis_lock.backends.base import AcquireRequest, holder_metadata
from django_redis_lock.testing import locmem_locks
from tests.support.helpers import eventually


@pytest.fixture(autouse=True)
def _in_process_locks() -> Iterator[None]:
    with override_settings(LOCKS=locmem_locks()):
        # Built here, before two threads of a test reach for it at once.
        locks["default"]
        yield


def hold_lock(**options: object) -> str:
    out = io.StringIO()
    call_command(Command(), stdout=out, **options)
    return out.getvalue()


def test_hold_lock__holds_then_releases() -> None:
    seen: list[list[str]] = []

    def look() -> None:
        eventually(lambda: locks["default"].locked("reports:nightly"))
        seen.append(
            [i.metadata["started_by"] for i in locks["default"].lock_info("reports:nightly")]
        )

    watcher = threading.Thread(target=look)
    watcher.start()
    output = hold_lock(minutes=0.005)
    watcher.join(5)

    assert seen == [["manage.py hold_lock"]]
    assert output.startswith("Holding reports:nightly (fencing token ")
    assert output.endswith("Released reports:nightly.\n")
    assert not locks["default"].locked("reports:nightly")


def test_hold_lock__notices_a_force_release() -> None:
    def free_it() -> None:
        eventually(lambda: locks["default"].force_release("reports:nightly") == 1)

    releaser = threading.Thread(target=free_it)
    releaser.start()
    output = hold_lock(minutes=1, ttl=0.3)
    releaser.join(5)

    assert "was taken from this process (force-released from the admin?)" in output


def test_hold_lock__refuses_a_held_lock() -> None:
    metadata = holder_metadata(host="web-1", pid=7, thread="MainThread")
    locks["default"].acquire(
        "reports:nightly", "someone", AcquireRequest(ttl=30, metadata=metadata)
    )
    with pytest.raises(
        CommandError, match=r"^reports:nightly is held already, by web-1, pid 7\.$"
    ):
        hold_lock(minutes=0.005)
