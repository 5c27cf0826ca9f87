"""The one presentation of a holder: durations, descriptions, metadata summaries, Retry-After."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

from django_redis_lock import locks, rwlock
from django_redis_lock._core.lock_arguments import HOST
from django_redis_lock.backends.base import LockInfo, WaiterInfo, holder_metadata
from django_redis_lock.listing import (
    TaskRecord,
    describe_holder,
    describe_mode,
    describe_waiter,
    duration,
    held_until,
    metadata_json,
    metadata_summary,
    reader_counts,
    retry_after,
    shorten,
    task_id,
)
from tests.support.helpers import read_write_holds


def info(metadata: bytes = b"", *, ttl: float = 1.0) -> LockInfo:
    """Return a holder of lock ``n`` that recorded ``metadata``."""
    return LockInfo.from_record(
        name="n",
        owner="o",
        holds=1,
        ttl=ttl,
        fencing_token=1,
        acquired_at=0,
        now=0,
        metadata=metadata,
    )


def with_data(data: dict[str, Any]) -> LockInfo:
    return info(holder_metadata(host="h", pid=7, thread="T", data=data))


def test_duration() -> None:
    seconds = (0, 0.9, 4.25, 59, 60, 61, 3599, 3600, 86399, 90061)
    assert [duration(s) for s in seconds] == [
        "0.0s",
        "0.9s",
        "4.2s",
        "59.0s",
        "1m00s",
        "1m01s",
        "59m59s",
        "1h00m",
        "23h59m",
        "1d01h",
    ]


@pytest.mark.parametrize(
    ("metadata", "described"),
    [
        (b"", "unknown"),
        (holder_metadata(host="web-1", pid=7, thread="T"), "web-1, pid 7, thread T"),
        (holder_metadata(host="", pid=7, thread=""), "pid 7"),
        (holder_metadata(host="h", pid=7, thread="T", data={"task_name": "t"}), "Celery task t"),
        (
            holder_metadata(host="h", pid=7, thread="T", data={"task_id": "i", "worker_pid": 9}),
            "Celery task (unnamed) [i] on pid 9",
        ),
        (
            holder_metadata(
                host="h",
                pid=7,
                thread="T",
                data={"task_id": "i", "task_name": "t", "hostname": "celery@w", "worker_pid": 9},
            ),
            "Celery task t [i] on celery@w, pid 9",
        ),
    ],
)
def test_describe_holder(metadata: bytes, described: str) -> None:
    assert describe_holder(info(metadata)) == described


def test_task_id__only_a_non_empty_string_is_one() -> None:
    assert task_id(with_data({"task_id": "abc"})) == "abc"
    assert task_id(with_data({"task_id": 42})) is None
    assert task_id(with_data({"task_id": ""})) is None
    assert task_id(with_data({})) is None


def test_metadata_summary__sorted_pairs_without_what_the_description_shows() -> None:
    plain = with_data({"b": "two", "a": [1, 2], "task_id": 3})
    record = TaskRecord(
        task_id="i",
        task_name="t",
        hostname="celery@w",
        worker_pid=9,
        args="customer_id=42",
        started_at="2026-01-31T09:30:00+00:00",
    )

    assert metadata_summary(plain) == "a=[1, 2], b=two, task_id=3"
    assert metadata_summary(with_data(record.as_metadata())) == (
        "args=customer_id=42, started_at=2026-01-31T09:30:00+00:00"
    )
    assert metadata_summary(info()) == ""


def test_task_record__keys_in_the_order_celery_records_them() -> None:
    record = TaskRecord(
        task_id=None, task_name="t", hostname=None, worker_pid=1, args="", started_at="now"
    )
    assert list(record.as_metadata()) == [
        "task_id",
        "task_name",
        "hostname",
        "worker_pid",
        "args",
        "started_at",
        "runner",
    ]


def test_metadata_json__sorted_keys_unicode_kept() -> None:
    holder = with_data({"b": "ключ", "a": 1})

    assert metadata_json(holder) == '{"a": 1, "b": "ключ"}'
    assert metadata_json(holder, indent=2) == '{\n  "a": 1,\n  "b": "ключ"\n}'
    assert metadata_json(info()) == "{}"


def test_shorten() -> None:
    assert shorten("abcd", 4) == "abcd"
    assert shorten("abcde", 4) == "abc…"


def test_retry_after__the_first_lease_to_end_rounded_up_and_at_least_one() -> None:
    assert retry_after([info(ttl=6.2), info(ttl=3.1)]) == 4
    assert retry_after([info(ttl=0.2)]) == 1
    assert retry_after([]) == 1


def test_describe_holder__a_min_hold_window_says_until_when_and_who_released_it() -> None:
    kept = LockInfo.from_record(
        name="n",
        owner="min_hold:celery:run-1",
        holds=0,
        ttl=2.5,
        fencing_token=1,
        acquired_at=1_800_000_000,
        now=1_800_000_001.5,
        metadata=holder_metadata(host="h", pid=7, thread="T"),
    )

    assert kept.min_hold_of == "celery:run-1"
    assert held_until(kept) == dt.datetime(2027, 1, 15, 8, 0, 4, tzinfo=dt.timezone.utc)
    assert describe_holder(kept) == (
        "held until 2027-01-15 08:00:04 UTC by min_hold (released by h, pid 7, thread T)"
    )
    assert info().min_hold_of is None


# Read-write locks --------------------------------------------------------------------------


def waiter(metadata: bytes) -> WaiterInfo:
    """Return the next waiter for lock ``n``, which registered ``metadata``."""
    return WaiterInfo.from_record(
        name="n", owner="w", position=0, fair=None, since=0, ends=10, now=4.25, metadata=metadata
    )


def test_describe_mode__read_write_holders_and_waiters_only() -> None:
    reader = info(holder_metadata(host="h", pid=7, thread="T", mode="read"))
    writer = info(holder_metadata(host="h", pid=7, thread="T", mode="write"))
    plain = info(holder_metadata(host="h", pid=7, thread="T"))

    assert [describe_mode(reader, 3), describe_mode(reader, 1), describe_mode(reader)] == [
        "read, 3 readers",
        "read, 1 reader",
        "read",
    ]
    assert describe_mode(writer, 3) == "write"
    assert describe_mode(plain, 3) is None
    assert describe_holder(reader, readers=3) == "h, pid 7, thread T (read, 3 readers)"
    assert describe_holder(writer) == "h, pid 7, thread T (write)"
    assert describe_holder(plain, readers=3) == "h, pid 7, thread T"
    task = holder_metadata(host="h", pid=7, thread="T", data={"task_name": "t"}, mode="write")
    assert describe_holder(info(task)) == "Celery task t (write)"
    waiting = waiter(holder_metadata(host="h", pid=7, thread="T", mode="write"))
    assert describe_waiter(waiting) == "h, pid 7, thread T (write): next, waiting 4.2s"
    assert describe_waiter(waiter(holder_metadata(host="h", pid=7, thread="T"))) == (
        "h, pid 7, thread T: next, waiting 4.2s"
    )


def test_describe_holder__read_write_lock_held_by_readers_and_a_writer_waiting(
    using: str,
) -> None:
    with read_write_holds("report:42", using=using, readers=3, waiting_writer=True):
        holders = locks[using].lock_info("report:42")
        [waiting] = locks[using].waiters("report:42")
    where = f"{HOST}, pid {os.getpid()}"

    assert reader_counts(holders) == {"report:42": 3}
    readers = reader_counts(holders)["report:42"]
    assert sorted(describe_holder(h, readers=readers) for h in holders) == [
        f"{where}, thread reader-{index} (read, 3 readers)" for index in range(3)
    ]
    assert describe_waiter(waiting).startswith(f"{where}, thread writer (write): next, waiting ")


def test_reader_counts__by_name_and_only_readers(using: str) -> None:
    with read_write_holds("report:42", using=using, readers=2):
        with rwlock("report:43", using=using).write():
            holders = list(locks[using].iter_locks("report:*"))

    assert sorted(h.mode or "" for h in holders) == ["read", "read", "write"]
    assert reader_counts(holders) == {"report:42": 2}
    assert reader_counts([]) == {}
