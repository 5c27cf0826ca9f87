"""``shop.jobs.refresh_catalog``: a django.tasks task that runs once at a time per supplier."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.test import override_settings
from shop.jobs import lock_of, outcome, refresh_catalog

from django_redis_lock import lock, locks
from django_redis_lock.testing import locmem_locks


@pytest.fixture(autouse=True)
def _in_process_locks() -> Iterator[None]:
    # The test settings run tasks on ImmediateBackend: each enqueue() runs its task at once.
    with override_settings(LOCKS=locmem_locks()):
        yield


def test_refresh_catalog__runs_holding_the_lock_of_its_supplier() -> None:
    result = refresh_catalog.enqueue("acme")

    assert outcome(result) == "ran"
    value = result.return_value
    assert value["supplier"] == "acme"
    assert value["again"] is None
    [holder] = value["holders"]
    assert holder.startswith(f"Django task shop.jobs.refresh_catalog [{result.id}] on ")
    assert lock_of("acme") == "task:shop.jobs.refresh_catalog:acme"
    assert not locks["default"].locked(lock_of("acme"))


def test_refresh_catalog__enqueued_from_its_own_body_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
        result = refresh_catalog.enqueue("acme", notify=True)

    assert outcome(result) == "ran"
    again = result.return_value["again"]
    assert again["outcome"] == "skipped"
    assert again["id"] != result.id
    assert (
        f"Skipped a run of {lock_of('acme')}: Lock {lock_of('acme')!r} is held by Django task "
        f"shop.jobs.refresh_catalog [{result.id}]"
    ) in caplog.text
    assert not locks["default"].locked(lock_of("acme"))


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("acme",), {}), ((), {"supplier": "acme"}), (("acme", False), {})],
    ids=["positional", "keyword", "with-default-given"],
)
def test_refresh_catalog__held_supplier_is_skipped_another_runs(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    with lock(lock_of("acme")):
        held = refresh_catalog.enqueue(*args, **kwargs)
        other = refresh_catalog.enqueue("globex")

    assert outcome(held) == "skipped"
    assert outcome(other) == "ran"
    assert outcome(refresh_catalog.enqueue(*args, **kwargs)) == "ran"
